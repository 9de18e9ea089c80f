"""Model files: synthesized tiny GGUFs and profile model lookup."""
