"""Workload plots (matplotlib, Agg, imported only when drawn): each function takes a
workload summary's plain data, writes one PNG and returns its path (None: nothing to draw).

- rate_latency: requested rate vs TTFT / E2E percentiles per engine (open loop);
- goodput_vs_rate: goodput vs requested rate per engine, the offered rate as a line;
- stall_distribution: the decode gaps overlapping long prompts' admissions, per engine, as
  an ECDF next to each engine's undisturbed decode gap (prefill under decode);
- ttft_by_turn: TTFT per turn index per engine (multi-turn);
- prefix_hits: the server's prefix-cache hit rate per engine next to the share a perfect
  cache would reach (shared prefix)."""

from __future__ import annotations

from pathlib import Path

DPI = 90
HOLLOW = {"markerfacecolor": "white"}  # a point that was not held, or not valid


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _axes(left: float = 0.13):
    fig, ax = _plt().subplots(figsize=(6.4, 3.8))
    fig.subplots_adjust(left=left, right=0.97, top=0.9, bottom=0.14)
    return fig, ax


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    _plt().close(fig)
    return path


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v


def _by_engine(medians: list[dict], key: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for m in medians:
        if _num(m.get(key)):
            out.setdefault(m["engine"], []).append(m)
    for pts in out.values():
        pts.sort(key=lambda m: m["n"])
    return out


def _rate_axis(ax, rates) -> None:
    rates = sorted(set(rates))
    if rates and rates[0] > 0 and rates[-1] / rates[0] >= 8:
        ax.set_xscale("log")
    ax.set_xticks(rates)
    ax.set_xticklabels([f"{r:g}" for r in rates])
    ax.minorticks_off()
    ax.set_xlabel("requested rate (req/s)")


def _invalid(rows: list[dict], key: str) -> list[dict]:
    """Rows a load generator voided (no median), still drawn as crosses: where the box gave up."""
    return [r for r in rows or [] if not r.get("valid", True) and _num(r.get(key))]


def rate_latency(medians: list[dict], path: Path, rows: list[dict] | None = None, metrics=("ttft_p50_ms", "ttft_p99_ms", "e2e_p99_ms")) -> Path | None:
    """Latency percentiles vs the requested rate; hollow markers: the server did not hold the
    rate; crosses: invalid points (the load generator fell behind)."""
    lines = {(eng, k): pts for k in metrics for eng, pts in _by_engine(medians, k).items()}
    bad = {k: _invalid(rows, k) for k in metrics}
    if not lines and not any(bad.values()):
        return None
    fig, ax = _axes()
    styles = {k: s for k, s in zip(metrics, ("-", "--", ":"))}
    colors: dict[str, str] = {}
    for (eng, k), pts in sorted(lines.items()):
        xs, ys = [m["n"] for m in pts], [m[k] for m in pts]
        (line,) = ax.plot(xs, ys, linestyle=styles[k], color=colors.get(eng), label=f"{eng} {k}")
        colors.setdefault(eng, line.get_color())
        for m in pts:
            ax.plot([m["n"]], [m[k]], marker="o", color=colors[eng], **(HOLLOW if m.get("held") is False else {}))
    for k, rs in bad.items():
        for r in rs:
            ax.plot([r["n"]], [r[k]], marker="x", color=colors.get(r["engine"], "black"), linestyle="none")
    ax.set_yscale("log")
    _rate_axis(ax, [m["n"] for pts in lines.values() for m in pts] + [r["n"] for rs in bad.values() for r in rs])
    ax.set_ylabel("latency (ms, log)")
    ax.set_title("latency vs request rate (hollow: not held; x: invalid)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="x-small")
    return _save(fig, path)


def goodput_vs_rate(medians: list[dict], path: Path, rows: list[dict] | None = None) -> Path | None:
    lines = _by_engine(medians, "goodput_rps")
    bad = _invalid(rows, "goodput_rps")
    if not lines and not bad:
        return None
    fig, ax = _axes()
    rates = [m["n"] for pts in lines.values() for m in pts] + [r["n"] for r in bad]
    top = max(rates)
    low = min(rates)
    ax.plot([low, top], [low, top], color="grey", linestyle="--", linewidth=1, label="offered rate")
    for eng, pts in sorted(lines.items()):
        (line,) = ax.plot([m["n"] for m in pts], [m["goodput_rps"] for m in pts], label=eng)
        for m in pts:
            ax.plot([m["n"]], [m["goodput_rps"]], marker="o", color=line.get_color(), **(HOLLOW if m.get("held") is False else {}))
    for r in bad:
        ax.plot([r["n"]], [r["goodput_rps"]], marker="x", color="black", linestyle="none")
    _rate_axis(ax, rates)
    if ax.get_xscale() == "log":
        ax.set_yscale("log")
    ax.set_ylabel("goodput (req/s meeting every SLO)")
    ax.set_title("goodput vs request rate (hollow: not held; x: invalid)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return _save(fig, path)


def stall_distribution(rows: list[dict], path: Path) -> Path | None:
    """ECDF of the admission-overlapping decode gaps per engine (all valid repeats pooled),
    each engine's undisturbed median gap as a dotted line."""
    gaps: dict[str, list[float]] = {}
    base: dict[str, list[float]] = {}
    for r in rows:
        if r.get("valid", True) and r.get("stall_gaps_ms"):
            gaps.setdefault(r["engine"], []).extend(g for g in r["stall_gaps_ms"] if _num(g) and g > 0)
            if _num(r.get("decode_gap_p50_ms")):
                base.setdefault(r["engine"], []).append(r["decode_gap_p50_ms"])
    gaps = {e: sorted(v) for e, v in gaps.items() if v}
    if not gaps:
        return None
    fig, ax = _axes()
    for eng, vals in sorted(gaps.items()):
        ys = [(i + 1) / len(vals) for i in range(len(vals))]
        (line,) = ax.step(vals, ys, where="post", label=f"{eng} ({len(vals)} gaps)")
        if base.get(eng):
            b = sorted(base[eng])[len(base[eng]) // 2]
            ax.axvline(b, color=line.get_color(), linestyle=":", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlabel("decode gap overlapping an admission (ms, log); dotted: undisturbed median")
    ax.set_ylabel("share of gaps <= x")
    ax.set_title("decode stalls while long prompts are admitted")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small", loc="lower right")
    return _save(fig, path)


def ttft_by_turn(medians: list[dict], path: Path, metric: str = "ttft_mean_ms") -> Path | None:
    lines = _by_engine(medians, metric)
    if not lines:
        return None
    fig, ax = _axes()
    for eng, pts in sorted(lines.items()):
        ax.plot([m["n"] for m in pts], [m[metric] for m in pts], marker="o", label=eng)
    turns = sorted({m["n"] for pts in lines.values() for m in pts})
    ax.set_xticks(turns)
    ax.set_xlabel("turn (the prompt resends every earlier turn)")
    ax.set_ylabel(f"{metric} (ms)")
    ax.set_title("time to first token by turn")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return _save(fig, path)


def prefix_hits(medians: list[dict], path: Path) -> Path | None:
    """Hit rate per engine (the server's counters, else reuse derived from computed prompt
    tokens over the prompt tokens), next to prefix_share (a perfect cache)."""
    bars = []
    for m in medians:
        rate = m.get("prefix_hit_rate")
        if not _num(rate) and _num(m.get("prefix_hits_derived")) and _num(m.get("prompt_tok_total")) and m["prompt_tok_total"]:
            rate = m["prefix_hits_derived"] / m["prompt_tok_total"]
        if _num(rate):
            bars.append((m["engine"], rate, m.get("prefix_share")))
    if not bars:
        return None
    fig, ax = _axes(left=0.1)
    xs = list(range(len(bars)))
    ax.bar(xs, [b[1] for b in bars], width=0.6, label="prefix-cache hit rate (server)")
    ideal = [(x, b[2]) for x, b in zip(xs, bars) if _num(b[2])]
    if ideal:
        ax.scatter([x for x, _ in ideal], [v for _, v in ideal], marker="_", s=900, color="black", label="prefix share (a perfect cache)")
    ax.set_xticks(xs)
    ax.set_xticklabels([b[0] for b in bars])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("share of prompt tokens")
    ax.set_title("prefix-cache hits on shared-prefix requests")
    ax.legend(fontsize="small")
    return _save(fig, path)
