"""Capacity at SLA: the highest load each engine carries while it meets its latency objectives,
and the capacity ratio of two engines with a paired interval over blocks (docs/CAPACITY.md).

- slo.py: the objectives (`ttft_p99_ms=500,itl_p99_ms=50`) and a probe's margin to each;
- probe.py: what one probe at one load returns (`Requests`), the prompts it sends (`PromptSet`)
  and the `Probe` protocol the search drives (the simulator and the real engines plug in alike);
- search.py: the bracket, the matched levels, the paired blocks, the ratio and its outcome;
- estimate.py, curves.py: per-block capacities from margin lines with one slope per engine;
- frontier.py: throughput per GPU against the per-user decode rate, per engine;
- grid.py: an exhaustive grid of probes (the reference the search is held to);
- simulator.py, accuracy.py: a seeded continuous-batching server with a step-time lever and
  drift, and the search's accuracy on it over seeded trials."""
