"""Workload kinds: what each sends (prompt sets x arrivals), what it measures and how it is sized."""
