"""Request traces replayed token-exactly (the `trace` workload, parity.workloads.trace).

- record.py: one typed request (arrival, input and output tokens, hash ids and their block
  size, session) and the trace read from a file;
- formats.py: one pure parser per published format (Azure LLM 2023 CSV, BurstGPT CSV,
  Mooncake JSONL, Bailian JSONL), the format told from the file, one-line errors;
- select.py: a window, a seeded sample of whole sessions, requests too long left out, the
  time scaled (--speedup);
- blocks.py: prompts as token ids, every hash id one byte-identical block, the rest private;
- cache.py: the prefix-cache hit rates a slice allows: the trace's own (hash ids, infinite
  cache) and the one the sent token ids allow an engine's cache;
- mixtures.py: named input/output length mixtures fitted to the published samples.

Not parity/traces/: that package reads the series' trace envs from server logs."""
