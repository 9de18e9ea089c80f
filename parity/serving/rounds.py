"""A point at small N runs several rounds: ceil(serving.min_requests / N) rounds of N concurrent
requests, each round started when the last one ended, so at N=1 a block holds several TTFT
samples instead of one.  A round is exactly the users' point (N requests at once); the metrics
that describe a round as a whole (its windows, rates, totals, longest TTFT) are the mean over the
rounds, those of single requests (TTFT mean and percentiles, per-sequence rates, gaps) are taken
over every request of the point."""

from __future__ import annotations

from statistics import fmean

from parity.metrics.registry import per_round
from parity.metrics.serving import METRICS, NoValue, compute, decode_window_reads


def count(n: int, min_requests: int) -> int:
    """Rounds of N requests a point runs: enough for min_requests, at least one."""
    return max(1, -(-max(1, min_requests) // max(1, n)))


def split(items: list, n: int) -> list[list]:
    return [items[i : i + n] for i in range(0, len(items), n)]


def metrics(rounds: list[list]) -> tuple[dict, dict]:
    """(row, why) over the valid records of each round (parity.metrics.serving.compute); a
    round's metric that has no value leaves the point without it, with that round's reason."""
    ok = [[r for r in rs if r.valid] for rs in rounds]
    row, why = compute([r for rs in ok for r in rs])
    if len(rounds) == 1:
        return row, why
    names = per_round()  # the metrics whose declaration says per_round
    per = [compute(rs, names) for rs in ok]
    for name in names:
        missing = [(k, w[name]) for k, (r, w) in enumerate(per) if r[name] is None]
        if missing:
            row[name], why[name] = None, f"round {missing[0][0]}: {missing[0][1]}"
        else:
            v = fmean(r[name] for r, _ in per)
            row[name] = int(v) if all(isinstance(r[name], int) for r, _ in per) and v.is_integer() else round(v, 4)
            why.pop(name, None)
    return {k: row[k] for k in METRICS}, why


def window_reads(rounds: list[list]) -> int | None:
    """The fewest decode-window reads of any round (the calibration's evidence of a pace), None: a round has none."""
    try:
        return min(decode_window_reads([r for r in rs if r.valid]) for rs in rounds)
    except NoValue:
        return None
