"""What tracing costs: decode throughput traced / untraced on the same workload, paired by block.

Each block of a profile runs the workload once untraced and once traced (the long ntg), the
order alternating per block so linear drift cancels; per arm the ratio traced/untraced of
llama-batched-bench S_TG over the blocks, with parity.stats.paired's 95 % interval.  A traced
run is never a throughput result: this ratio is the only number taken from its S_TG."""

from __future__ import annotations
from parity.stats.paired import paired

METRIC = "s_tg"
METHOD = ("per block: S_TG of the traced run / S_TG of the untraced run of the same workload (llama-batched-bench, the longest ntg); "
          "geometric mean over blocks, 95 % t interval on the log ratios (parity.stats.paired)")  # fmt: skip


def tracer_overhead(rows: list[dict], tracer: str) -> list[dict]:
    """rows: {"engine", "block", "traced": bool, "s_tg"} (one per run).  Per engine: the ratio
    traced/untraced with its interval and the slowdown in %, or the reason there is none."""

    out = []
    for eng in sorted({r["engine"] for r in rows}):
        cell = lambda traced: {r["block"]: r.get(METRIC) for r in rows if r["engine"] == eng and r["traced"] is traced}  # noqa: E731
        p = paired(cell(False), cell(True), better="higher")
        d = {"engine": eng, "tracer": tracer, "metric": METRIC, "ratio": p.ratio, "low": p.low, "high": p.high, "blocks": p.n_blocks,
             "half_width_pct": p.half_width_pct, "per_block": dict(zip(p.blocks, p.ratios)), "method": METHOD}  # fmt: skip
        d["slowdown_pct"] = None if p.ratio is None else round((1 - p.ratio) * 100, 3)
        d["reason"] = p.reason if p.low is None else ""
        out.append(_round(d))
    return out


def not_measured(engines: list[str], tracer: str, why: str) -> list[dict]:
    return [{"engine": e, "tracer": tracer, "metric": METRIC, "ratio": None, "low": None, "high": None, "blocks": 0, "slowdown_pct": None, "reason": why, "method": METHOD} for e in engines]


def line(d: dict) -> str:
    if d["ratio"] is None:
        return f"tracer cost ({d['tracer']}, {d['engine']}): not measured: {d['reason']}"
    iv = f" [{d['low']:.4f}, {d['high']:.4f}]" if d["low"] is not None else f" (no interval: {d['reason']})"
    return f"tracer cost ({d['tracer']}, {d['engine']}): traced/untraced S_TG {d['ratio']:.4f}{iv}, {d['blocks']} blocks: decode {d['slowdown_pct']:+.2f} % slower traced"


def _round(d: dict) -> dict:
    for k in ("ratio", "low", "high", "half_width_pct"):
        if d.get(k) is not None:
            d[k] = round(d[k], 6)
    d["per_block"] = {str(k): round(v, 6) for k, v in d["per_block"].items()}
    return d
