"""What the kinds' plots share (matplotlib, Agg, imported only when one is drawn): a figure,
its file, the finite numbers and the per-engine lines of a summary's medians.  Each kind draws
its own plots in its file; the report places them (parity.report.workload_sections)."""

from __future__ import annotations

from pathlib import Path

DPI = 90
HOLLOW = {"markerfacecolor": "white"}  # a point that was not held, or not valid


def pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def axes(left: float = 0.13):
    fig, ax = pyplot().subplots(figsize=(6.4, 3.8))
    fig.subplots_adjust(left=left, right=0.97, top=0.9, bottom=0.14)
    return fig, ax


def save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    pyplot().close(fig)
    return path


def num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v


def by_engine(medians: list[dict], key: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for m in medians:
        if num(m.get(key)):
            out.setdefault(m["engine"], []).append(m)
    for pts in out.values():
        pts.sort(key=lambda m: m["n"])
    return out
