"""Request-paired ratios of a replay: every engine of a block is sent the same requests on the same
schedule, so each request is compared with itself.  Per block, over requests of B/A (TTFT from the
due time, TPOT): the geometric mean, and the median request's ratio; across blocks: the paired
interval (parity.stats.paired) of those block ratios.  The block p50 compares one request of a mix
with another: on the H200's A/A replay of 31 requests (docs/evidence/device-h200-1129/) the p50s
read 1.087 [1.012, 1.167], the requests paired with themselves 1.015 [0.986, 1.045] (geometric
mean) and 1.005 [0.981, 1.029] (median).  Why the median beside it: a request that waited behind
another's long prompt in one arm and not in the other reads 3-5x (|log| up to 1.65 on the 59-request
replay of docs/evidence/device-h200-1129b/), and one such request moves a block's mean by ~3 %."""

from __future__ import annotations

import math
import statistics

from parity.stats.paired import gpus_of, paired, placement_of

QUANTITIES = {"ttft_sched_ms": "TTFT from the due time", "tpot_ms": "TPOT"}
STATISTICS = {"gmean": "geometric mean", "median": "median request"}


def per_request(records) -> dict[str, list[float | None]]:
    """{quantity: one value per request in schedule order, None where the request is not valid}."""
    out: dict[str, list[float | None]] = {q: [] for q in QUANTITIES}
    for r in records:
        ok = r.valid and r.first is not None and r.end is not None
        ttft = (r.first - r.scheduled) * 1000 if ok and r.scheduled is not None else None
        out["ttft_sched_ms"].append(None if ttft is None else round(ttft, 4))
        tpot = r.tpot_ms if ok else None
        out["tpot_ms"].append(round(tpot, 4) if tpot else None)
    return out


def block_ratio(a: list, b: list, statistic: str = "gmean") -> float | None:
    """exp(mean, or median, over requests of log(b/a)) where both are positive; None: no request to pair."""
    logs = [math.log(y / x) for x, y in zip(a, b) if x and y and x > 0 and y > 0]
    if not logs:
        return None
    return math.exp(statistics.median(logs) if statistic == "median" else sum(logs) / len(logs))


def summary(rows, reference: str | None, threshold_pct: float, confidence: float) -> list[dict]:
    """Per engine (not the reference) x point x quantity x statistic: the paired statistics of its block ratios.
    A block pairs only where both rows are valid and were sent the same prompts (prompt_digest)."""
    if reference is None:
        return []
    ok = [r for r in rows if r.valid and not r.discarded and r.info.get("per_request_ms")]
    ref = {(r.point, r.repeat): r for r in ok if r.engine == reference}
    out, gpus = [], gpus_of(ok)
    for eng in sorted({r.engine for r in ok} - {reference}):
        groups = placement_of(gpus, eng)  # a crossover's placement
        for pt in sorted({r.point for r in ok if r.engine == eng}):
            for q, stat in ((q, stat) for q in QUANTITIES for stat in STATISTICS):
                ratios = {}
                for r in (r for r in ok if r.engine == eng and r.point == pt):
                    a = ref.get((pt, r.repeat))
                    if a is None or a.info.get("prompt_digest") != r.info.get("prompt_digest"):
                        continue
                    x = block_ratio(a.info["per_request_ms"][q], r.info["per_request_ms"][q], stat)
                    if x is not None:
                        ratios[r.repeat] = x
                p = paired(dict.fromkeys(ratios, 1.0), ratios, "lower", threshold_pct, confidence, groups)
                out.append({"engine": eng, "reference": reference, "point": pt, "quantity": q, "statistic": stat,
                            **p.to_dict()})
    return out


def stop_metric(quantity: str, statistic: str) -> str:
    """The name --until-ci gives one pairing: request_ttft_median, request_tpot_gmean, ..."""
    return f"request_{quantity.split('_')[0]}_{statistic}"


STOP_METRICS = tuple(stop_metric(q, s) for q in QUANTITIES for s in STATISTICS)


def stop_widths(pairs: list[dict]) -> dict:
    """{"<engine> <point> request_<quantity>_<statistic>": the pairing's conservative half-width %}."""
    return {f"{p['engine']} {p['point']} {stop_metric(p['quantity'], p['statistic'])}": p.get("stop_half_width_pct")
            for p in pairs}


def lines(pairs: list[dict]) -> list[str]:
    return [f"request-paired {p['engine']}/{p['reference']} {p['point']}: {QUANTITIES[p['quantity']]} "
            f"({_statistic(p)}) {p['outcome']}: {p['reason']}" for p in pairs]


def _statistic(p: dict) -> str:
    return STATISTICS[p.get("statistic") or "gmean"]  # summaries written before the median have no key


HEAD = ["engine", "reference", "point", "quantity", "per block", "B/A [95 %]", "outcome", "blocks", "why"]


def table(pairs: list[dict], fmt) -> dict:
    """The report's table of the request-paired ratios ({title, head, rows})."""
    def iv(p: dict) -> str:
        if p.get("low") is None:
            return fmt(p.get("ratio"))
        return f"{fmt(p['ratio'])} [{fmt(p['low'])}, {fmt(p['high'])}]"

    rows = [[p["engine"], p["reference"], p["point"], QUANTITIES[p["quantity"]], _statistic(p), iv(p),
             p.get("outcome") or "-", p.get("n_blocks"), p.get("reason")] for p in pairs]
    return {"title": "Request-paired: each request against itself, engine / reference over the blocks", "head": HEAD,
            "rows": rows}
