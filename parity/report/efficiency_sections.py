"""The report's efficiency section (issue 25) as markdown, read from a run: summary.json's
`efficiency` (serving points, memory per engine), bench.json's `efficiency` (batched-bench
rows) and bandwidth.json (the peaks).  Rendering only: every number comes from the run, and
the definitions printed are the ones the run recorded beside them."""

from __future__ import annotations

from pathlib import Path

from parity.report.sections import fmt
from parity.gpu.bandwidth import load


def _table(header: list[str], rows: list[list]) -> str:
    cell = lambda v: str("-" if v is None or v == "" else v).replace("|", "\\|")  # noqa: E731
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def _points(eff: dict, bench: bool) -> list[list]:
    rows = []
    for p in eff.get("points") or []:
        where = [p.get("pp"), p.get("tg"), p["n"]] if bench else [p["n"]]
        rows.append([p.get("engine"), *where, fmt(p.get("context")), fmt(p.get("rate_tps")), fmt(p["bytes_per_step"] / 1e6) if p.get("bytes_per_step") else "-", fmt(p.get("achieved_gbps")),
                     fmt(p.get("pct_published")), fmt(p.get("pct_measured")), p.get("expert_share") if p.get("expert_share") is not None else "-"])  # fmt: skip
    return rows


def efficiency_section(rd, asset_dir: Path, rel: str, plots: bool = True) -> dict | None:
    """{markdown, plots} or None when the run has no efficiency figures."""
    serving = (rd.summary or {}).get("efficiency")
    bench = (rd.bench or {}).get("efficiency")
    if not serving and not bench:
        return None

    bw = load(rd.path) or {}
    pub, meas = bw.get("published") or {}, bw.get("measured") or {}
    md = ["## Efficiency (% of the memory-bandwidth roofline)", ""]
    pub_text = f"{pub['gbps']:g} GB/s, {pub.get('label')} ({pub.get('source')})" if pub.get("gbps") else pub.get("reason") or "none recorded"
    meas_text = f"{meas['gbps']:g} GB/s ({meas.get('method')}; {meas.get('counted')})" if meas.get("gbps") else meas.get("reason") or "none recorded"
    md += [f"- published peak: {pub_text}", f"- measured copy: {meas_text}"]
    defs = (serving or bench).get("definitions") or {}
    md += ["", "Definitions (as recorded with the run):", ""] + [f"- `{k}`: {v}" for k, v in defs.items()] + [""]
    head = ["engine", "context", "rate tok/s", "MB/step", "achieved GB/s", "% published", "% measured copy", "expert share"]
    if serving and serving.get("points"):
        md += [f"Serving (model file `{serving.get('model_file')}`):", "", _table([head[0], "N", *head[1:]], _points(serving, False)), ""]
        md += [f"- {p['engine']} N={p['n']}: {p['why']}" for p in serving["points"] if p.get("why")] + [""] * any(p.get("why") for p in serving["points"])
    elif serving:
        md += [f"Serving: {serving.get('why')}", ""]
    if bench and bench.get("points"):
        md += [f"llama-batched-bench (model file `{bench.get('model_file')}`):", "", _table([head[0], "PP", "TG", "B", *head[1:]], _points(bench, True)), ""]
    mem = (serving or {}).get("memory")
    if mem:
        rows = [[e, m.get("peak_mib"), m.get("steady_mib"), m.get("arms"), m.get("source"), m.get("note") or ""] for e, m in mem["engines"].items()]
        md += ["Memory per engine (median over its arms):", "", _table(["engine", "peak MiB", "steady MiB", "arms", "source", "note"], rows), ""]
        md += [f"- {r['engine']}/{r['reference']}: " + (r["why"] if r.get("why") else f"peak x{r['peak']}, steady x{r['steady']}") for r in mem.get("ratios") or []] + [""]
    figs = []
    if plots:
        path = roofline_vs_n(serving, bench, asset_dir / "roofline_vs_n.png")
        if path is not None:
            figs.append({"title": "% of roofline vs N per engine", "file": f"{rel}/roofline_vs_n.png", "path": str(path)})
            md += [f"![% of roofline vs N per engine]({rel}/roofline_vs_n.png)", ""]
    return {"markdown": "\n".join(md), "plots": figs}


def roofline_vs_n(serving: dict | None, bench: dict | None, path: Path) -> Path | None:
    """% of roofline (published peak where there is one, else the measured copy) vs N per engine."""
    key = "pct_published" if any(p.get("pct_published") is not None for e in (serving, bench) if e for p in e.get("points") or []) else "pct_measured"
    series: dict[str, list] = {}
    for label, eff in (("serving", serving), ("bench", bench)):
        for p in (eff or {}).get("points") or []:
            if p.get(key) is not None:
                series.setdefault(f"{p.get('engine')} ({label})", []).append((p["n"], p[key]))
    if not series:
        return None
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    fig.subplots_adjust(left=0.12, right=0.97, top=0.9, bottom=0.14)
    for name, pts in sorted(series.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    ns = sorted({p[0] for pts in series.values() for p in pts})
    ax.set_xscale("log", base=2)
    ax.set_xticks(ns)
    ax.set_xticklabels([str(n) for n in ns])
    ax.minorticks_off()
    ax.set_xlabel("N (concurrent sequences)")
    ax.set_ylabel(f"% of {'published peak' if key == 'pct_published' else 'measured copy'}")
    ax.set_title("decode: % of the memory-bandwidth roofline")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
