"""Efficiency in the users' terms (issue 25): bytes each decode step moves, read from the
model file (bytes_per_token); the memory bandwidth a machine has, published and measured
(peak); achieved bandwidth and % of roofline per point (roofline); memory per engine
(memory); the serving gap decomposed into static decode x serving overhead (gap).

Every module here imports its heavy dependencies (gguf, numpy, torch) inside functions,
so `parity --help` never pays for them."""
