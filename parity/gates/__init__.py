"""Correctness gates: greedy md5 per path, op-oracle, KL divergence, pre/post."""
