"""When requests are sent, apart from what they say (guidellm keeps its scheduling
strategies apart from request content the same way).

- closed loop: N workers, each sends its next request when its last one ends;
- open loop: request i is due at t_i = sum of inter-arrival gaps drawn from a
  gamma distribution with shape `burstiness` and mean 1/rate (burstiness 1 is a
  Poisson process; below 1 burstier, above 1 more regular), as `vllm bench serve`
  draws them.  Seeded: the same (rate, burstiness, seed, n) gives the same times."""

from __future__ import annotations

import random
from parity.stats import percentile


def open_loop_times(n: int, rate: float, burstiness: float = 1.0, seed: int = 0, exact: bool = False) -> list[float]:
    """n due times in seconds from the start (the first request at 0).  exact: the drawn gaps
    scaled so that the last request is due at (n - 1) / rate, i.e. the schedule's own mean
    rate is the requested one (for Poisson: the process conditioned on its count; the
    draws' shape is kept, not their sampling error of about 1/sqrt(n) in the mean)."""
    if rate <= 0 or burstiness <= 0:
        raise ValueError("rate and burstiness must be positive")
    rng = random.Random(seed)
    theta = 1.0 / (rate * burstiness)  # gamma(shape k, scale theta) has mean k * theta = 1 / rate
    gaps = [rng.gammavariate(burstiness, theta) for _ in range(max(0, n - 1))]
    if exact and gaps and sum(gaps) > 0:
        scale = (len(gaps) / rate) / sum(gaps)
        gaps = [g * scale for g in gaps]
    t, out = 0.0, [0.0] if n > 0 else []
    for g in gaps:
        t += g
        out.append(t)
    return out


def achieved(records, skip: int = 0) -> dict:
    """What the load generator really did: the send rate it achieved and how late each
    send was against its due time (scheduling delay)."""
    sends = sorted(r.send for r in records)
    delays = sorted((r.send - r.scheduled) * 1000 for r in records if r.scheduled is not None)
    span = sends[-1] - sends[0] if len(sends) > 1 else 0.0

    return {
        "sent": len(sends),
        "achieved_rate": round((len(sends) - 1) / span, 3) if span > 0 else None,
        "delay_p50_ms": round(percentile(delays, 50), 4) if delays else None,
        "delay_p99_ms": round(percentile(delays, 99), 4) if delays else None,
        "delay_max_ms": round(delays[-1], 4) if delays else None,
    }
