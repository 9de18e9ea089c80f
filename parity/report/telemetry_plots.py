"""The telemetry plot: throughput per repeat beside the GPU's SM clock and power (median per
point), one line per engine x N -- a drop in throughput that moves with the clock is the GPU,
one that does not is elsewhere."""

from __future__ import annotations

from pathlib import Path

from parity.report.plots import _plt, _save


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
