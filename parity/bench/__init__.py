"""llama-batched-bench and its paired A/B."""
