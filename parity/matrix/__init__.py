"""A campaign matrix: the same campaign on several hosts (SSH or Slurm) and profiles, one
cross-hardware report.

spec.py    the matrix file (campaign, profile, targets)
run.py     runs each target (`parity --host H campaign run ...`), hosts in parallel
report.py  the cross-hardware report: metrics, gates, verdicts and provenance side by side
"""
