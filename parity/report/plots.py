"""Report plots (matplotlib, Agg backend, imported only when a plot is drawn).
Each function takes plain data, writes one PNG and returns its path (or None
when there is nothing to draw)."""

from __future__ import annotations

from pathlib import Path

from parity.results.model import PointRow

DPI = 90


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _log2_n_axis(ax, ns) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(set(ns)))
    ax.set_xticklabels([str(n) for n in sorted(set(ns))])
    ax.minorticks_off()


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)  # fixed margins: tight_layout costs an extra draw per figure
    _plt().close(fig)
    return path


def _n_axes(left: float):
    fig, ax = _plt().subplots(figsize=(6, 3.6))
    fig.subplots_adjust(left=left, right=0.97, top=0.9, bottom=0.14)
    return fig, ax


def _finish_n_axes(ax, series: dict, ylabel: str, title: str) -> None:
    """The shared x axis of the per-N plots: log2 N, labels, grid."""
    _log2_n_axis(ax, [p[0] for pts in series.values() for p in pts])
    ax.set_xlabel("N (concurrent requests)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)


def throughput_vs_n(medians: list[dict], spreads: dict, path: Path, metric: str = "decode_agg_tps") -> Path | None:
    """metric (median, min..max whiskers over repeats) vs N per engine, log-x."""
    series: dict[str, list] = {}
    for m in medians:
        if isinstance(m.get(metric), (int, float)):
            series.setdefault(m["engine"], []).append((m["n"], m[metric]))
    if not series:
        return None
    fig, ax = _n_axes(left=0.14)
    for eng, pts in sorted(series.items()):
        pts.sort()
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        lo = [max(0.0, y - spreads.get((eng, x), (y, y))[0]) for x, y in pts]
        hi = [max(0.0, spreads.get((eng, x), (y, y))[1] - y) for x, y in pts]
        ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=eng)
    _finish_n_axes(ax, series, f"{metric} (tok/s)", f"{metric} vs N (median, min..max over repeats)")
    ax.legend()
    return _save(fig, path)


def ratio_vs_n(ratios: list[dict], metrics: list[str], path: Path, spreads: dict | None = None) -> Path | None:
    """engine/reference ratio vs N (median ratio, min..max of the per-repeat ratios), parity at 1.0."""
    lines: dict[str, list] = {}
    ref = None
    for r in ratios:
        ref = r.get("reference", ref)
        for k in metrics:
            if isinstance(r.get(k), (int, float)):
                lines.setdefault(f"{r['engine']} {k}", []).append((r["n"], r[k]))
    if not lines:
        return None
    spreads = spreads or {}
    fig, ax = _n_axes(left=0.12)
    for label, pts in sorted(lines.items()):
        pts.sort()
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        lo = [max(0.0, y - spreads.get((label, x), (y, y))[0]) for x, y in pts]
        hi = [max(0.0, spreads.get((label, x), (y, y))[1] - y) for x, y in pts]
        ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=label)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    _finish_n_axes(ax, lines, f"ratio vs {ref}", f"engine / {ref} (1.0 = parity; whiskers: per-repeat min..max)")
    ax.legend(fontsize="small")
    return _save(fig, path)


def ratio_spreads(rows: list[PointRow], reference: str | None, metrics: list[str]) -> dict:
    """{("<engine> <metric>", n): (min, max)} of per-repeat ratios (repeat i of the engine over
    repeat i of the reference: they ran back to back), valid rows only."""
    if not reference:
        return {}
    by = {(r.engine, r.n, r.repeat): r for r in rows if r.valid}
    vals: dict = {}
    for (eng, n, rep), r in by.items():
        ref = by.get((reference, n, rep))
        if eng == reference or ref is None:
            continue
        for k in metrics:
            a, b = r.metric(k), ref.metric(k)
            if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b:
                vals.setdefault((f"{eng} {k}", n), []).append(a / b)
    return {key: (min(v), max(v)) for key, v in vals.items()}


def bucket_bars(captures: list[dict], path: Path, top: int = 12) -> Path | None:
    """Share of kernel time per bucket, grouped bars per capture."""
    caps = [c for c in captures if c.get("buckets")]
    if not caps:
        return None
    totals: dict[str, float] = {}
    for c in caps:
        for b in c["buckets"]:
            totals[b["bucket"]] = totals.get(b["bucket"], 0.0) + float(b.get("share") or 0)
    names = sorted(totals, key=lambda k: -totals[k])[:top]
    plt = _plt()
    height = 0.35 * len(names) + 1.2
    fig, ax = plt.subplots(figsize=(6.5, height))
    fig.subplots_adjust(left=0.25, right=0.97, top=1 - 0.35 / height, bottom=0.5 / height)
    h = 0.8 / len(caps)
    for i, c in enumerate(caps):
        share = {b["bucket"]: float(b.get("share") or 0) * 100 for b in c["buckets"]}
        ys = [j + i * h for j in range(len(names))]
        ax.barh(ys, [share.get(n, 0.0) for n in names], height=h, label=c.get("label") or c.get("engine") or f"capture {i}")
    ax.set_yticks([j + h * (len(caps) - 1) / 2 for j in range(len(names))])
    ax.set_yticklabels(names)
    ax.invert_yaxis()
    ax.set_xlabel("share of kernel time (%)")
    ax.set_title("kernel buckets")
    ax.legend(fontsize="small")
    return _save(fig, path)


def ab_deltas(rows: list[dict], path: Path) -> Path | None:
    """Delta % (B vs A) per engine x N, one panel per metric, with the noise
    threshold shaded: bars inside the band are noise whatever their size."""
    rows = [r for r in rows if isinstance(r.get("delta_pct"), (int, float))]
    if not rows:
        return None
    metrics = list(dict.fromkeys(r["metric"] for r in rows))
    plt = _plt()
    fig, axes = plt.subplots(len(metrics), 1, figsize=(7, 2.3 * len(metrics) + 0.4), squeeze=False)
    fig.subplots_adjust(left=0.1, right=0.98, top=1 - 0.3 / (2.3 * len(metrics) + 0.4), bottom=0.6 / (2.3 * len(metrics) + 0.4), hspace=0.75)
    colors = {"improved": "tab:green", "regressed": "tab:red", "within noise": "tab:grey"}
    for ax, metric in zip(axes[:, 0], metrics):
        rs = [r for r in rows if r["metric"] == metric]
        xs = list(range(len(rs)))
        thr = [r["threshold_pct"] for r in rs]
        ax.bar(xs, [2 * t for t in thr], bottom=[-t for t in thr], width=0.9, color="tab:orange", alpha=0.2, linewidth=0, zorder=0)
        ax.bar(xs, [r["delta_pct"] for r in rs], width=0.6, color=[colors.get(r["verdict"], "tab:blue") for r in rs], zorder=2)
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_xticks(xs)
        ax.set_xticklabels([f"{r['engine']}\nN={r['n']}" for r in rs], fontsize="x-small")
        better = rs[0].get("better", "higher")
        ax.set_ylabel("delta %")
        ax.set_title(f"{metric} B vs A ({better} is better; band = noise threshold)", fontsize="small")
    return _save(fig, path)


def paired_blocks(points: list[dict], path: Path, threshold_pct: float = 2.0) -> Path | None:
    """Paired block statistics, one panel per metric: per engine x N the per-block ratios
    engine/reference (dots), their geometric mean with its interval (error bar, coloured by
    outcome), 1.0 and the +-threshold band of practical equivalence."""
    pts = [p for p in points if p.get("ratios")]
    if not pts:
        return None
    metrics = list(dict.fromkeys(p["metric"] for p in pts))
    plt = _plt()
    h = 2.3 * len(metrics) + 0.4
    fig, axes = plt.subplots(len(metrics), 1, figsize=(7, h), squeeze=False)
    fig.subplots_adjust(left=0.1, right=0.98, top=1 - 0.3 / h, bottom=0.6 / h, hspace=0.75)
    colors = {"improved": "tab:green", "regressed": "tab:red", "equivalent": "tab:blue", "inconclusive": "tab:grey"}
    band = (1 / (1 + threshold_pct / 100), 1 + threshold_pct / 100)
    for ax, metric in zip(axes[:, 0], metrics):
        ps = [p for p in pts if p["metric"] == metric]
        ax.axhspan(*band, color="tab:orange", alpha=0.2, linewidth=0, zorder=0)
        ax.axhline(1.0, color="black", linewidth=0.8)
        for i, p in enumerate(ps):
            rs = p["ratios"]
            ax.scatter([i - 0.15 + 0.3 * j / max(1, len(rs) - 1) for j in range(len(rs))], rs, s=10, color="black", alpha=0.6, zorder=2)
            if p.get("ratio") is not None:
                lo, hi = (p["ratio"] - p["low"], p["high"] - p["ratio"]) if p.get("low") is not None else (0, 0)
                ax.errorbar([i + 0.3], [p["ratio"]], yerr=[[lo], [hi]], fmt="D", capsize=4, color=colors.get(p.get("outcome"), "tab:grey"), zorder=3)
        ax.set_xticks(range(len(ps)))
        ax.set_xticklabels([f"{p['engine']}\n{p.get('point') or 'N=' + str(p.get('n'))}" for p in ps], fontsize="x-small")
        ax.set_xlim(-0.6, len(ps) - 0.3)
        ax.set_ylabel(f"/ {ps[0].get('reference')}")
        ax.set_title(f"{metric}: per-block ratios, geometric mean and {int(round((ps[0].get('confidence') or 0.95) * 100))}% interval ({ps[0].get('better')} is better; band +-{threshold_pct:g}%)", fontsize="small")
    return _save(fig, path)


def throughput_vs_clock(points: list[dict], path: Path) -> Path | None:
    """points: [{engine, n, repeat, decode_agg_tps, sm_mhz, power_w}] (telemetry_sections.plot_points)."""
    if not points:
        return None
    series: dict = {}
    for p in points:
        series.setdefault((p["engine"], p["n"]), []).append(p)
    fig, axes = _plt().subplots(3, 1, figsize=(6.5, 7.2), sharex=True)
    fig.subplots_adjust(left=0.14, right=0.97, top=0.94, bottom=0.08, hspace=0.12)
    for (eng, n), pts in sorted(series.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        pts.sort(key=lambda p: p["repeat"])
        xs = [p["repeat"] for p in pts]
        for ax, key in zip(axes, ("decode_agg_tps", "sm_mhz", "power_w")):
            ys = [p.get(key) if isinstance(p.get(key), (int, float)) else float("nan") for p in pts]
            ax.plot(xs, ys, marker="o", label=f"{eng} N={n}")
    for ax, label in zip(axes, ("decode_agg_tps (tok/s)", "SM clock (MHz, median)", "power (W, median)")):
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
    axes[0].set_title("throughput per repeat beside the GPU's clock and power")
    axes[0].legend(fontsize="small")
    axes[-1].set_xlabel("repeat")
    axes[-1].set_xticks(sorted({p["repeat"] for p in points}))
    return _save(fig, path)
