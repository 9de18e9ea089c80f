"""A workload's profile section (serving.workloads.NAME, or inline in a campaign step) and its value checks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from parity.workloads import WORKLOADS

BUILTIN = tuple(WORKLOADS)  # every kind runs by its name, sized for the profile (parity.workloads.defaults)


@dataclass
class SloConfig:
    """Bounds a request must meet to count toward goodput (None: not bounded)."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None


@dataclass
class WorkloadConfig:
    """A named workload (serving.workloads.NAME, or inline in a campaign's snapshot step), run
    with `parity snapshot --workload NAME` (parity.serving.workloads).  Each kind reads its own
    keys; gen / ptok None = serving.gen / serving.ptok."""

    kind: Literal[BUILTIN] | None = None  # a registered kind (parity.workloads.WORKLOADS); None: the built-in of the same name
    description: str = ""
    gen: int | None = None
    ptok: int | None = None  # prompt tokens of the plain requests (decode streams, open-loop arrivals)
    # shared-prefix: groups of requests sharing a prefix, each with its own suffix
    groups: int = 4
    group_size: int = 8
    prefix_tokens: int = 512
    suffix_tokens: int = 32
    prime: bool = True  # one request per group first (its prefix computed), then the measured group_size per group
    # prefill-under-decode: steady decode streams, long prompts arriving during them
    decode_streams: int = 4
    decode_gen: int = 256
    long_prompts: int = 2
    long_ptok: int = 1024
    long_every_s: float = 1.0
    # open-loop: arrivals at each rate (gamma gaps, burstiness 1 = Poisson)
    rates: list[float] = field(default_factory=lambda: [1.0, 2.0, 4.0])
    requests_per_rate: int = 32
    burstiness: float = 1.0
    seed: int = 0
    exact_rate: bool = True  # scale the drawn gaps so the schedule's mean rate is the requested one (false: raw draws)
    max_delay_p99_ms: float = 10.0  # the load generator falls behind past this: the point is invalid
    min_achieved_share: float = 0.95  # achieved / scheduled send rate below this: invalid; served / scheduled below it: not held
    slo: SloConfig = field(default_factory=SloConfig)
    # multi-turn: conversations whose turns resend the growing history
    conversations: int = 4
    turns: int = 4
    turn_tokens: int = 64
    # prefill-curve: TTFT and the engine's prompt time against prompt length, at N=1 and at N=n
    lengths: list[int] = field(default_factory=lambda: [128, 256, 512, 1024, 2048, 4096, 8192, 16384])
    n: int = 8  # the N beside N=1 (1: N=1 only)
    rounds: int = 3  # rounds of N requests at once per point, one after another
    # trace: a request trace replayed token-exact on its own arrival times (parity.replay)
    trace: str | None = None  # Azure LLM CSV, BurstGPT CSV, Mooncake or Bailian JSONL (None: draws from `mixture`)
    speedups: list[float] = field(default_factory=lambda: [1.0])  # one point each: the trace's times divided by it
    start_s: float | None = None  # the window: from this many trace seconds after its first request (None: 0) ...
    duration_s: float | None = None  # ... and how long (None: to the end)
    sessions: int | None = None  # a sample (seed) of this many whole sessions of the window (None: every request)
    max_request_tokens: int | None = None  # requests needing more (input + output) are left out, counted (None: none)
    block_size: int | None = None  # tokens per hash id (None: the publisher's: Mooncake 512, Bailian 16)
    mixture: str | None = None  # no trace: lengths drawn from this named mixture (parity.replay.mixtures)
    requests: int = 32  # no trace: how many requests
    mixture_rate: float = 1.0  # no trace: their arrival rate (req/s; gamma gaps of `burstiness`)
    fresh_blocks: bool = True  # each point its own blocks: no point reuses another's prompts (a cold cache per point)
    max_hit_gap: float = 0.02  # server's prefix-cache hit rate off the expected one by more: the point is invalid
    cache_block: int = 16  # the cache block of an engine that reports no per-request cached tokens (vLLM's block_size)


def check_workload(w: WorkloadConfig, label: str, key: str) -> None:
    """Value checks of one workload, as its kind says (ConfigError naming the key)."""
    kind = WORKLOADS[w.kind]
    kind.check_positive(w, label, key)
    kind.check(w, label, key)
