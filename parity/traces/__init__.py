"""The series' trace envs read back: each trace format the users' series prints (a pure parse_*()
per format, formats.py), and per arm of a run the lines its server or bench log holds for the
trace envs its env sets, counted and summarized (histograms of the fields), with the series'
exit-time [L5INSTR] counters and the graph reuse they give (summary.py)."""
