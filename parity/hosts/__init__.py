"""Host kinds: ship a whole parity command to another host and bring its run directory back (ssh, slurm)."""
