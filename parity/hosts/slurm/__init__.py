"""A Slurm cluster as a place to run parity: a runner beside local and ssh.

commands.py  the Slurm client commands (sbatch, scontrol, sacct, scancel): pure parse_*
login.py     where those commands run: this machine or a login node over SSH
job.py       `parity --host NAME ...` for a kind: slurm host: one sbatch job, followed, its run dir pulled back
"""
