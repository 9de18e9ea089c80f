"""Bucket analysis of captures, the difference method, and engine comparison.

Results are plain dicts written to <run>/profile/analysis.json (shape in
docs/CONTRACTS.md) plus buckets.tsv / difference.tsv / comparison.tsv.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from parity.errors import UsageError
from parity.context import run_session
from parity.files import atomic_write_json, atomic_write_text
from parity.profiles.buckets import attribute, load_table_file, table_for
from parity.profiles.nsys import GRAPH_TRACE, decode_window, export_metadata, export_sqlite, graph_launches, parse_kern_sum_csv, parse_window_spec, read_kernel_groups
from parity.runners.local import LocalRunner

# Every derived number, declared once; reports print these definitions.
DEFINITIONS = {
    "total_ms": "sum over the bucket's kernels of (end - start), ns -> ms",
    "share": "bucket total_ms / total_ms of all kernels in the capture (or window)",
    "instances": "kernel launches in the bucket; with --cuda-graph-trace=node every graph-node execution counts once",
    "ms_per_launch": "total_ms / instances (launch-normalized cost; stable when launch counts drift, Phase141)",
    "steps": "ntg_long - ntg_short: the extra decode steps the long capture ran (each step decodes one token for each of npl sequences)",
    "delta_ms": "total_ms(ntg_long capture) - total_ms(ntg_short capture): prefill, warmup and setup cancel, only decode steps remain",
    "delta_launches": "instances(long) - instances(short)",
    "ms_per_step": "delta_ms / steps",
    "us_per_token": "delta_ms * 1000 / (steps * npl): decode cost per generated token",
    "launches_per_step": "delta_launches / steps",
    "ms_per_launch_delta": "delta_ms / delta_launches: marginal cost of one decode launch (null when delta_launches <= 0)",
    "ratio": "b total_ms / a total_ms (comparison of two captures, e.g. vllm / paged)",
}
COLLAPSED_NOTE = "COLLAPSED: captured without --cuda-graph-trace=node; each CUDA-graph replay is one opaque launch and per-kernel attribution of decode is wrong"


def resolve_sqlite(path: str, runner=None, nsys: str = "nsys") -> str | None:
    """The SQLite export for a path (.nsys-rep exported first); None for a kern_sum CSV."""

    p = Path(path)
    if not p.exists():
        raise UsageError(f"{path}: no such file")
    suffix = p.suffix.lower()
    if suffix == ".csv":
        return None
    if suffix in (".nsys-rep", ".qdrep"):
        out = p.with_suffix(".sqlite")
        if out.is_file() and out.stat().st_mtime >= p.stat().st_mtime:
            return str(out)
        if runner is None:
            runner = LocalRunner()
        return export_sqlite(runner, nsys, str(p), str(out))
    if suffix in (".sqlite", ".sqlite3", ".db"):
        return str(p)
    raise UsageError(f"{path}: expected a .sqlite export, a .nsys-rep report or a cuda_gpu_kern_sum .csv")


def analyze_file(path: str, table, *, label: str | None = None, engine: str | None = None, ntg: int | None = None, npl: int | None = None,
                 top_unmatched: int = 10, window_ms=None, after_nvtx: str | None = None, runner=None, nsys: str = "nsys", collapsed: bool = False) -> dict:  # fmt: skip

    sqlite_path = resolve_sqlite(path, runner, nsys)
    window = None
    if sqlite_path is None:
        if window_ms or after_nvtx:
            raise UsageError(f"{path}: a cuda_gpu_kern_sum CSV has no timestamps; a decode window needs the SQLite export")
        groups = parse_kern_sum_csv(Path(path).read_text(errors="replace"))
    else:
        window = decode_window(sqlite_path, after_nvtx=after_nvtx, window_ms=window_ms)
        groups = read_kernel_groups(sqlite_path, window)
    res = attribute(groups, table, top_unmatched)
    cap = {
        "label": label or Path(path).stem,
        "engine": engine,
        "ntg": ntg,
        "npl": npl,
        "source": str(path),
        "sqlite": sqlite_path,
        "window": None if window is None else {"start_ns": window.start_ns, "end_ns": window.end_ns, "why": window.why},
        "collapsed": bool(collapsed),
        **res,
    }
    if sqlite_path is not None:
        _graph_trace(cap, sqlite_path, window, res)
    return cap


def _graph_trace(cap: dict, sqlite_path: str, window, res: dict) -> None:
    """What the export says about CUDA graphs: whole-graph launches (graph mode: their kernels
    are not in the kernel table, so the capture is collapsed whatever was asked) and the
    recorded trace mode (newer exports), plus the nsys version that wrote it."""

    meta = export_metadata(sqlite_path)
    mode = meta["graph_trace_mode"]
    graphs = graph_launches(sqlite_path, window)
    cap["export"] = {"table": meta["table"], "nsys_version": meta["export"].get("NSIGHT_SYSTEMS_VERSION"), "schema_version": meta["export"].get("EXPORT_SCHEMA_VERSION")}
    cap["graph_trace_mode"] = mode
    cap["graph_launches"] = None if graphs is None else {"launches": graphs["launches"], "total_ms": round(graphs["total_ns"] / 1e6, 6)}
    if (graphs and graphs["launches"]) or mode == "graph":
        n, ms = (graphs["launches"], graphs["total_ns"] / 1e6) if graphs else (0, 0.0)
        cap["collapsed"] = True
        cap["warning"] = (f"{n} CUDA-graph launches ({ms:.3f} ms) are in {GRAPH_TRACE}, not in the kernel table: the capture traced graphs whole "
                          f"(--cuda-graph-trace=graph{', as its META_DATA_CAPTURE records' if mode == 'graph' else ''}); the kernels inside them are not attributed")  # fmt: skip
    elif res["kernels"] and res["graph_node_kernels"] == 0 and not cap["collapsed"]:
        if mode == "node":
            cap["warning"] = "no kernel carries a graphNodeId although the export records --cuda-graph-trace=node: nothing ran inside a CUDA graph here"
        else:
            cap["warning"] = "no kernel carries a graphNodeId: either nothing ran inside a CUDA graph, or the capture did not use --cuda-graph-trace=node"


def difference(long: dict, short: dict, npl: int | None = None) -> dict:
    """Decode cost by the difference method (seed 000 section 3.4):
    per-bucket delta = long capture - short capture, normalized per decode step,
    per generated token (npl tokens per step) and per launch."""
    nl, ns = long.get("ntg"), short.get("ntg")
    if nl is None or ns is None:
        raise UsageError("the difference method needs the ntg of both captures (give --ntg-long/--ntg-short or capture with parity profile)")
    if nl <= ns:
        raise UsageError(f"the difference method needs ntg_long > ntg_short, got {nl} and {ns}")
    npl = npl or long.get("npl") or short.get("npl")
    if not npl:
        raise UsageError("the difference method needs npl (parallel sequences) to give a per-token cost")
    steps = nl - ns
    a = {b["bucket"]: b for b in short["buckets"]}
    z = {b["bucket"]: b for b in long["buckets"]}
    order = [b["bucket"] for b in long["buckets"]] + [b for b in a if b not in z]
    rows = [_delta_row(b, z.get(b), a.get(b), steps, npl) for b in order]
    total = _delta_row("total", {"total_ms": long["total_ms"], "instances": long["kernels"]}, {"total_ms": short["total_ms"], "instances": short["kernels"]}, steps, npl)
    rows.sort(key=lambda r: -r["delta_ms"])
    return {
        "long": long["label"],
        "short": short["label"],
        "engine": long.get("engine"),
        "block": long.get("block"),
        "ntg_long": nl,
        "ntg_short": ns,
        "npl": npl,
        "steps": steps,
        "formula": "us_per_token = (total_ms[ntg_long] - total_ms[ntg_short]) * 1000 / ((ntg_long - ntg_short) * npl)",
        "total": total,
        "buckets": rows,
        "collapsed": bool(long.get("collapsed") or short.get("collapsed")),
    }


def _delta_row(bucket: str, hi: dict | None, lo: dict | None, steps: int, npl: int) -> dict:
    d_ms = (hi["total_ms"] if hi else 0.0) - (lo["total_ms"] if lo else 0.0)
    d_n = (hi["instances"] if hi else 0) - (lo["instances"] if lo else 0)
    return {
        "bucket": bucket,
        "delta_ms": round(d_ms, 6),
        "delta_launches": d_n,
        "ms_per_step": round(d_ms / steps, 6),
        "us_per_token": round(d_ms * 1000 / (steps * npl), 6),
        "launches_per_step": round(d_n / steps, 6),
        "ms_per_launch_delta": round(d_ms / d_n, 6) if d_n > 0 else None,
    }


def compare(a: dict, b: dict) -> dict:
    """Side by side: bucket totals and per-launch cost of two captures (e.g. two engines)."""
    ia = {r["bucket"]: r for r in a["buckets"]}
    ib = {r["bucket"]: r for r in b["buckets"]}
    names = [r["bucket"] for r in a["buckets"]] + [n for n in ib if n not in ia]
    rows = []
    for n in names:
        ra, rb = ia.get(n), ib.get(n)
        ams, bms = (ra["total_ms"] if ra else 0.0), (rb["total_ms"] if rb else 0.0)
        rows.append({
            "bucket": n, "a_ms": ams, "b_ms": bms, "delta_ms": round(bms - ams, 6), "ratio": round(bms / ams, 6) if ams else None,
            "a_instances": ra["instances"] if ra else 0, "b_instances": rb["instances"] if rb else 0,
            "a_ms_per_launch": ra["ms_per_launch"] if ra else None, "b_ms_per_launch": rb["ms_per_launch"] if rb else None,
            "a_share": ra["share"] if ra else 0.0, "b_share": rb["share"] if rb else 0.0,
        })  # fmt: skip
    return {"a": a["label"], "b": b["label"], "a_total_ms": a["total_ms"], "b_total_ms": b["total_ms"], "buckets": rows, "collapsed": bool(a.get("collapsed") or b.get("collapsed"))}


def build_doc(captures: list[dict], *, diff: list[dict] = (), comparison: dict | None = None, bucket_table: str = "") -> dict:
    collapsed = any(c.get("collapsed") for c in captures)
    doc = {
        "kind": "profile-analysis",
        "collapsed": collapsed,
        "bucket_table": bucket_table,
        "captures": captures,
        "difference": list(diff),  # one per engine with two ntg values (or the --diff pair)
        "comparison": comparison,
        "definitions": DEFINITIONS,
    }
    if collapsed:
        doc["note"] = COLLAPSED_NOTE
    return doc


def auto_differences(captures: list[dict]) -> list[dict]:
    """One difference per engine (and block, for a profile in blocks) that has captures at two or
    more ntg values (longest minus shortest)."""
    by_engine: dict = {}
    for c in captures:
        if c.get("ntg") is not None:
            by_engine.setdefault((c.get("engine"), c.get("block")), []).append(c)
    out = []
    for caps in by_engine.values():
        if len({c["ntg"] for c in caps}) >= 2:
            caps = sorted(caps, key=lambda c: c["ntg"])
            out.append(difference(caps[-1], caps[0]))
    return out


def write_outputs(directory: Path, doc: dict) -> dict:
    """profile/analysis.json + buckets.tsv (+ difference.tsv, comparison.tsv) under directory."""

    d = Path(directory)
    atomic_write_json(d / "analysis.json", doc)
    flag = "true" if doc.get("collapsed") else "false"
    lines = ["label\tengine\tntg\tcollapsed\tbucket\ttotal_ms\tshare\tinstances\tms_per_launch"]
    for c in doc["captures"]:
        for r in c["buckets"]:
            lines.append("\t".join(_s(v) for v in (c["label"], c.get("engine"), c.get("ntg"), "true" if c.get("collapsed") else "false", r["bucket"], r["total_ms"], r["share"], r["instances"], r["ms_per_launch"])))
    atomic_write_text(d / "buckets.tsv", "\n".join(lines) + "\n")
    files = {"analysis": str(d / "analysis.json"), "buckets": str(d / "buckets.tsv")}
    diffs = doc["difference"]
    if diffs:
        lines = ["engine\tlong\tshort\tntg_long\tntg_short\tnpl\tcollapsed\tbucket\tdelta_ms\tdelta_launches\tms_per_step\tus_per_token\tlaunches_per_step\tms_per_launch_delta"]
        for df in diffs:
            for r in [df["total"], *df["buckets"]]:
                lines.append("\t".join(_s(v) for v in (df.get("engine"), df["long"], df["short"], df["ntg_long"], df["ntg_short"], df["npl"], flag, r["bucket"], r["delta_ms"], r["delta_launches"], r["ms_per_step"], r["us_per_token"], r["launches_per_step"], r["ms_per_launch_delta"])))
        atomic_write_text(d / "difference.tsv", "\n".join(lines) + "\n")
        files["difference"] = str(d / "difference.tsv")
    cmp_ = doc.get("comparison")
    if cmp_:
        lines = ["a\tb\tbucket\ta_ms\tb_ms\tdelta_ms\tratio\ta_instances\tb_instances\ta_ms_per_launch\tb_ms_per_launch"]
        for r in cmp_["buckets"]:
            lines.append("\t".join(_s(v) for v in (cmp_["a"], cmp_["b"], r["bucket"], r["a_ms"], r["b_ms"], r["delta_ms"], r["ratio"], r["a_instances"], r["b_instances"], r["a_ms_per_launch"], r["b_ms_per_launch"])))
        atomic_write_text(d / "comparison.tsv", "\n".join(lines) + "\n")
        files["comparison"] = str(d / "comparison.tsv")
    return files


def _s(v) -> str:
    return "" if v is None else str(v)


_NTG = re.compile(r"ntg[-_]?(\d+)", re.I)


def ntg_from_name(path: str) -> int | None:
    m = _NTG.search(Path(path).name)
    return int(m.group(1)) if m else None


@dataclass
class AnalyzeRequest:
    """What `parity profile analyze` asks for: files, an optional second capture and a difference pair."""

    files: list[str]
    compare: str | None = None
    diff: tuple[str, str] | None = None  # (LONG, SHORT)
    ntg_long: int | None = None
    ntg_short: int | None = None
    npl: int | None = None
    window: str | None = None  # "A:B" ms after the first kernel
    after_nvtx: str | None = None
    buckets: str | None = None  # bucket table YAML
    collapsed: bool = False


def analyze(ctx, req: AnalyzeRequest) -> dict:
    """`parity profile analyze`: bucket existing captures into a new run directory's profile/."""

    p = ctx.profile.profiling
    table = load_table_file(req.buckets) if req.buckets else table_for(p)
    win = parse_window_spec(req.window)
    after_nvtx = req.after_nvtx or p.decode_after_nvtx
    diff, npl = req.diff, req.npl or p.npl
    paths = list(req.files)
    if req.compare:
        paths.append(req.compare)
    if diff:
        paths += [d for d in diff if d not in paths]
    for f in paths:
        if not Path(f).exists():
            raise UsageError(f"{f}: no such file")
    caps: dict[str, dict] = {}  # every capture read and bucketed before the run dir: a bad one leaves nothing behind
    for f in paths:
        n = req.ntg_long if diff and f == diff[0] and req.ntg_long else req.ntg_short if diff and f == diff[1] and req.ntg_short else ntg_from_name(f)
        caps[f] = analyze_file(f, table, label=Path(f).stem, ntg=n, npl=npl, top_unmatched=p.top_unmatched, window_ms=win,
                               after_nvtx=after_nvtx, runner=ctx.runner, nsys=p.nsys, collapsed=req.collapsed)  # fmt: skip
    d = [difference(caps[diff[0]], caps[diff[1]], npl)] if diff else []
    c = compare(caps[req.files[0]], caps[req.compare]) if req.compare else None
    doc = build_doc(list(caps.values()), diff=d, comparison=c, bucket_table=table.source)
    with run_session(ctx, "profile-analyze", "profile-analyze"):
        if req.collapsed:
            ctx.run.update(collapsed=True)
        doc["files"] = write_outputs(ctx.run.path / "profile", doc)
        return {"run_dir": str(ctx.run.path), **doc}
