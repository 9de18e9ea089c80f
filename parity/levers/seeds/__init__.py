"""The users' lever history read into the lever map (`parity levers import`): one parser per
source format, each a pure function over the text (handoff.py: the rendered PARITY_HANDOFF seed,
its lever tables and Phase records; markdown.py: VLLM_PARITY_LEVER_MAP.md's closed table and
Phase sections; lists.py: verdict lists such as SPEEDUP_HUNT's ranked levers), the words they
share (words.py), and the import that writes the entries into the map (importer.py)."""
