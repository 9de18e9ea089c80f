"""Reading GGUF files: the header (metadata, tensor infos) and the gguf package's constants."""
