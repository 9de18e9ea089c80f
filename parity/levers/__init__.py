"""The lever loop (issue 24): one command per lever A/B (`parity ab`: arms.py derives the two
arms, ab.py gates and measures them in one session and decides GO / NO-GO / FLAT /
INCONCLUSIVE), and the lever map that remembers every verdict (map.py, `parity levers`)."""
