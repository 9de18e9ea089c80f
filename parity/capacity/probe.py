"""One probe: an engine held at one load (concurrency, or request rate) while it serves a set of
prompts; what it returns is the per-request latencies the objectives read.  The search talks to
any `Probe` (the simulator, the real engines) through this one call."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

from parity.metrics.serving import itl_ms, ttft_ms

CLOSED, OPEN = "concurrency", "rate"  # the load's kind: clients (closed loop) or requests per second (open loop)


@dataclass
class PromptSet:
    """The requests of one block, the same for every engine and every load of that block:
    `prompt_tokens[i]` tokens in, `gen_tokens[i]` tokens out.  The first `measured` are the
    measured requests; the rest warm a probe up (closed loop: one per client)."""

    prompt_tokens: Any  # numpy int array
    gen_tokens: Any
    measured: int
    seed: int = 0  # what drew them (the real probe derives its token ids from it)

    @property
    def warmup(self) -> int:
        return len(self.prompt_tokens) - self.measured


@dataclass
class Requests:
    """The measured requests of one probe, as the objectives read them (numpy float arrays, ms)."""

    ttft_ms: Any  # per request: send -> first token
    itl_ms: Any  # per generated token after the first: the gap before it (pooled over requests)
    tpot_ms: Any  # per request with >= 2 tokens: (last - first token) / (tokens - 1)
    e2e_ms: Any  # per request: send -> last token
    output_tokens: int  # tokens generated within the window, by every request (warm-up and cool-down too)
    window_s: float  # first measured send -> last measured token
    sent: int  # every request sent, warm-up included (what a request budget counts)
    seconds: float  # the probe's whole duration (what a time budget counts)
    problems: list = field(default_factory=list)  # why a request did not count (a real engine's invalid requests)

    @property
    def throughput_tps(self) -> float:
        return self.output_tokens / self.window_s if self.window_s > 0 else float("nan")

    @property
    def user_tps(self) -> float:
        """The median request's decode rate (tokens per second one user sees after the first); nan
        where there is none: no requests, or a median time per token of 0 (a stream whose tokens
        arrived in one read)."""
        import numpy as np

        tpot = float(np.median(self.tpot_ms)) if len(self.tpot_ms) else 0.0
        return 1000 / tpot if tpot > 0 else float("nan")


class Probe(Protocol):
    def __call__(self, engine: str, load: float, block: int, prompts: PromptSet) -> Requests: ...


def from_records(records: Sequence, warmup: int, cooldown: int = 0, sent: int | None = None,
                 seconds: float | None = None) -> Requests:
    """A real probe's request records (parity.loadgen.record.RequestRecord, in send order) as
    Requests: the first `warmup` and the last `cooldown` are not measured (their tokens within
    the window count to the throughput); an invalid measured one is named in `problems`."""
    import numpy as np

    records = list(records)
    measured = records[warmup : len(records) - cooldown]
    problems = [f"request {warmup + i}: {r.error or r.invalid}" for i, r in enumerate(measured) if not r.valid]
    ok = [r for r in measured if r.valid and r.first is not None and r.end is not None]
    if not ok:
        problems.append("no measured request produced a token")
        empty = np.zeros(0)
        n = len(records) if sent is None else sent
        return Requests(empty, empty, empty, empty, 0, 0.0, n, seconds or 0.0, problems)
    tpot = [t for r in ok if (t := r.tpot_ms) is not None]
    lo, hi = min(r.send for r in ok), max(r.end for r in ok)
    made = sum(1 for r in records if r.error is None for t in r.token_times if lo < t <= hi)
    return Requests(
        ttft_ms=np.array(ttft_ms(ok)),
        itl_ms=np.array(itl_ms(ok)),
        tpot_ms=np.array(tpot),
        e2e_ms=np.array([(r.end - r.send) * 1000 for r in ok]),
        output_tokens=made,
        window_s=hi - lo,
        sent=sent if sent is not None else len(records),
        seconds=seconds if seconds is not None else hi - lo,
        problems=problems,
    )
