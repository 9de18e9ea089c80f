"""parity: gated, reproducible performance parity for a paged llama.cpp vs vLLM."""

__version__ = "0.1.0"
