"""A workload's profile section (serving.workloads.NAME, or inline in a campaign step) and its value checks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from parity.errors import ConfigError

BUILTIN = ("shared-prefix", "prefill-under-decode", "open-loop", "multi-turn")


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

    kind: Literal["shared-prefix", "prefill-under-decode", "open-loop", "multi-turn"] | None = None  # None: the built-in of the same name
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


def check_workload(w: WorkloadConfig, label: str, key: str) -> None:
    """Value checks of one workload (ConfigError naming the key)."""
    positive = {
        "shared-prefix": ("groups", "group_size", "prefix_tokens", "suffix_tokens"),
        "prefill-under-decode": ("decode_streams", "decode_gen", "long_prompts", "long_ptok"),
        "open-loop": ("requests_per_rate", "burstiness", "max_delay_p99_ms"),
        "multi-turn": ("conversations", "turns", "turn_tokens"),
    }[w.kind]
    for k in positive + ("gen", "ptok"):
        v = getattr(w, k)
        if v is not None and not v > 0:
            raise ConfigError(label, f"{key}.{k}", "must be positive")
    if w.kind == "prefill-under-decode" and w.long_every_s < 0:
        raise ConfigError(label, f"{key}.long_every_s", "must not be negative")
    if w.kind == "open-loop":
        if not w.rates or any(not r > 0 for r in w.rates) or len(set(w.rates)) != len(w.rates):
            raise ConfigError(label, f"{key}.rates", "must be a non-empty list of distinct positive request rates (requests/s)")
        if w.requests_per_rate < 2:
            raise ConfigError(label, f"{key}.requests_per_rate", "must be at least 2 (a rate needs two sends)")
        if not 0 < w.min_achieved_share <= 1:
            raise ConfigError(label, f"{key}.min_achieved_share", "must be a share in (0, 1]")
        for k in ("ttft_ms", "tpot_ms", "e2e_ms"):
            v = getattr(w.slo, k)
            if v is not None and not v > 0:
                raise ConfigError(label, f"{key}.slo.{k}", "must be positive (or null: not bounded)")
