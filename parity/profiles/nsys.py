"""The nsys tool: command lines, export through a Runner, and parsing.

Parsing reads the SQLite export (CUPTI_ACTIVITY_KIND_KERNEL joined to
StringIds), never screen output.  Kernels are aggregated in SQL per name id
first, so a 2M-row export costs one GROUP BY and a few thousand names in Python.
A `cuda_gpu_kern_sum` CSV (nsys stats) is accepted too: it has totals and
instances but no timestamps, so no window can be applied to it.

Other versions: a capture traced with --cuda-graph-trace=graph (nsys's default)
puts each graph launch in CUPTI_ACTIVITY_KIND_GRAPH_TRACE and none of its kernels
in the kernel table; newer exports record the mode in META_DATA_CAPTURE
(CUDA_GRAPH_TRACE_OPTIONS:MODE) and their own version in META_DATA_EXPORT, which
older ones call EXPORT_META_DATA.  nsys can exit 0 after its analysis failed
("Analysis failed", "Unknown runtime API function index"): analysis_failure()
finds that in its log, so an incomplete report is not blamed on the capture flags.
"""

from __future__ import annotations

import csv
import io
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from parity.errors import InfraError, UsageError

GRAPH_NODE_FLAG = "--cuda-graph-trace=node"
GRAPH_TRACE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
EXPORT_META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")  # newer, older
GRAPH_MODE_KEY = "CUDA_GRAPH_TRACE_OPTIONS:MODE"
# nsys's words for a post-processing failure it does not report in its exit code
_ANALYSIS_FAILED = re.compile(r"Analysis failed|TargetProfilingFailed|Unknown (?:runtime|driver) API function index|ProcessEventsError")
KERN_SUM_HEADER = ["Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)", "Name"]


@dataclass
class KernelGroup:
    name: str  # demangled name
    total_ns: int
    instances: int
    graph_node_instances: int = 0  # rows that carry a graphNodeId (ran as a CUDA-graph node)


@dataclass
class Window:
    """Restrict to kernels whose start lies in [start_ns, end_ns) (absolute ns)."""

    start_ns: int | None = None
    end_ns: int | None = None
    why: str = ""


# --------------------------------------------------------------------------- commands


def profile_argv(nsys: str, out_base: str, workload: list[str], *, graph_node: bool, trace: str = "cuda,nvtx", extra: list[str] = (), fork: bool = False) -> list[str]:
    argv = [nsys, "profile"]
    if graph_node:
        argv.append(GRAPH_NODE_FLAG)
    argv += [f"--trace={trace}", "-o", out_base, "--force-overwrite", "true"]
    if fork:  # vLLM runs its engine in a forked child
        argv.append("--trace-fork-before-exec=true")
    return argv + list(extra) + list(workload)


def export_argv(nsys: str, report: str, sqlite_out: str) -> list[str]:
    return [nsys, "export", "--type", "sqlite", "--output", sqlite_out, "--force-overwrite", "true", report]


def export_sqlite(runner, nsys: str, report: str, sqlite_out: str | None = None, timeout: float = 1800) -> str:
    """`nsys export --type sqlite` through the runner; returns the .sqlite path."""
    if not Path(report).is_file():
        raise UsageError(f"{report}: no such report")
    binary = runner.which(nsys) if "/" not in nsys else (nsys if Path(nsys).is_file() else None)
    if not binary:
        raise UsageError(f"{report}: a .nsys-rep must be exported to SQLite with nsys, and nsys ({nsys}) is not on PATH (set profiling.nsys or export it elsewhere with: nsys export --type sqlite {report})")
    out = sqlite_out or str(Path(report).with_suffix(".sqlite"))
    res = runner.run(export_argv(binary, report, out), timeout=timeout)
    if not res.ok or not Path(out).is_file():
        raise InfraError(f"nsys export of {report} failed (exit {res.rc}): {res.tail(3)}")
    return out


def analysis_failure(text: str) -> str | None:
    """The first line of an nsys log that says its analysis failed (nsys still exits 0), else None."""
    for line in text.splitlines():
        if _ANALYSIS_FAILED.search(line):
            return line.strip().lstrip("*").strip()
    return None


# --------------------------------------------------------------------------- parsing


def parse_kern_sum_csv(text: str) -> list[KernelGroup]:
    """`nsys stats --report cuda_gpu_kern_sum --format csv` output -> groups (preamble skipped)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if '"Total Time (ns)"' in line or line.startswith("Time (%)")), None)
    if start is None:
        raise UsageError("not a cuda_gpu_kern_sum CSV: no header with \"Total Time (ns)\"")
    reader = csv.DictReader(io.StringIO("\n".join(lines[start:])))
    missing = {"Total Time (ns)", "Instances", "Name"} - set(reader.fieldnames or [])
    if missing:
        raise UsageError(f"cuda_gpu_kern_sum CSV lacks column(s): {', '.join(sorted(missing))}")
    num = lambda s: int(float(str(s).replace(",", "")))  # noqa: E731
    out = []
    for row in reader:
        if not row.get("Name"):
            continue
        out.append(KernelGroup(row["Name"], num(row["Total Time (ns)"]), num(row["Instances"])))
    return out


def _connect(path: str) -> sqlite3.Connection:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{path}: no such file")
    try:
        conn = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
        conn.execute("SELECT name FROM sqlite_master LIMIT 1").fetchall()
    except sqlite3.DatabaseError as e:
        raise UsageError(f"{path}: not an SQLite export ({e})") from None
    return conn


def _tables(conn) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _columns(conn, table: str) -> set[str]:
    return {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}


def _name_values(conn, table: str) -> dict[str, str]:
    """A name/value metadata table (columns `name`, `value`; else its first two)."""
    cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
    if len(cols) < 2:
        return {}
    k, v = ("name", "value") if {"name", "value"} <= set(cols) else (cols[0], cols[1])
    return {str(a): str(b) for a, b in conn.execute(f'SELECT "{k}", "{v}" FROM {table}')}


def export_metadata(path: str) -> dict:
    """{"table": META_DATA_EXPORT | EXPORT_META_DATA | None, "export": {...}, "capture": {...},
    "graph_trace_mode": "node" | "graph" | None (None: this export does not record it)}."""
    conn = _connect(path)
    try:
        tables = _tables(conn)
        table = next((t for t in EXPORT_META_TABLES if t in tables), None)
        export = _name_values(conn, table) if table else {}
        capture = _name_values(conn, "META_DATA_CAPTURE") if "META_DATA_CAPTURE" in tables else {}
    finally:
        conn.close()
    mode = capture.get(GRAPH_MODE_KEY)
    return {"table": table, "export": export, "capture": capture, "graph_trace_mode": mode.strip().lower() if mode else None}


def graph_launches(path: str, window: Window | None = None) -> dict | None:
    """Whole-graph launches of a --cuda-graph-trace=graph capture: {"launches", "total_ns"}
    (None when the export has no CUPTI_ACTIVITY_KIND_GRAPH_TRACE table)."""
    conn = _connect(path)
    try:
        if GRAPH_TRACE not in _tables(conn):
            return None
        where, args = _window_sql(window)
        n, total = conn.execute(f"SELECT COUNT(*), SUM(end - start) FROM {GRAPH_TRACE} {where}", args).fetchone()
        return {"launches": int(n), "total_ns": int(total or 0)}
    finally:
        conn.close()


def _window_sql(window: Window | None) -> tuple[str, list]:
    where, args = [], []
    if window and window.start_ns is not None:
        where.append("start >= ?")
        args.append(window.start_ns)
    if window and window.end_ns is not None:
        where.append("start < ?")
        args.append(window.end_ns)
    return ("WHERE " + " AND ".join(where) if where else ""), args


def read_kernel_groups(path: str, window: Window | None = None) -> list[KernelGroup]:
    """Per-name totals from an export: GROUP BY the name id in SQL, then join names."""
    conn = _connect(path)
    try:
        tables = _tables(conn)
        if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
            if GRAPH_TRACE in tables and conn.execute(f"SELECT COUNT(*) FROM {GRAPH_TRACE}").fetchone()[0]:
                raise UsageError(f"{path}: only whole CUDA-graph launches in this export ({GRAPH_TRACE}), no kernel rows: the capture traced graphs as one launch each "
                                 f"(--cuda-graph-trace=graph, nsys's default); capture again with {GRAPH_NODE_FLAG}")  # fmt: skip
            raise UsageError(f"{path}: no CUDA kernels in this export (table CUPTI_ACTIVITY_KIND_KERNEL missing): either nsys's analysis failed "
                             "(its log says 'Analysis failed' or 'Unknown runtime API function index': an nsys older than the CUDA runtime), "
                             "or the capture did not trace CUDA on a GPU (--trace=cuda)")  # fmt: skip
        cols = _columns(conn, "CUPTI_ACTIVITY_KIND_KERNEL")
        name_col = "demangledName" if "demangledName" in cols else "shortName" if "shortName" in cols else None
        if name_col is None:
            raise UsageError(f"{path}: CUPTI_ACTIVITY_KIND_KERNEL has neither demangledName nor shortName")
        node = "SUM(graphNodeId IS NOT NULL AND graphNodeId != 0)" if "graphNodeId" in cols else "0"
        where, args = _window_sql(window)
        sql = (
            f"SELECT s.value, g.total, g.n, g.nodes FROM (SELECT {name_col} AS sid, SUM(end - start) AS total, COUNT(*) AS n, {node} AS nodes "
            f"FROM CUPTI_ACTIVITY_KIND_KERNEL {where} GROUP BY {name_col}) g "
            "LEFT JOIN StringIds s ON s.id = g.sid"
        )
        return [KernelGroup(name if name is not None else "<string id missing>", int(total or 0), int(n), int(nodes or 0)) for name, total, n, nodes in conn.execute(sql, args)]
    finally:
        conn.close()


def kernel_time_span(path: str) -> tuple[int, int] | None:
    conn = _connect(path)
    try:
        row = conn.execute("SELECT MIN(start), MAX(end) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
        return None if row is None or row[0] is None else (int(row[0]), int(row[1]))
    finally:
        conn.close()


def nvtx_ranges(path: str, pattern: str) -> list[tuple[str, int, int]]:
    """NVTX ranges (text, start, end) whose text matches the regex, in start order."""
    conn = _connect(path)
    try:
        if "NVTX_EVENTS" not in _tables(conn):
            return []
        cols = _columns(conn, "NVTX_EVENTS")
        text = "COALESCE(n.text, s.value)" if "textId" in cols else "n.text"
        join = "LEFT JOIN StringIds s ON s.id = n.textId" if "textId" in cols else ""
        rows = conn.execute(f"SELECT {text}, n.start, n.end FROM NVTX_EVENTS n {join} WHERE n.end IS NOT NULL ORDER BY n.start").fetchall()
    finally:
        conn.close()
    rx = re.compile(pattern)
    return [(t, int(s), int(e)) for t, s, e in rows if t is not None and rx.search(t)]


def decode_window(path: str, *, after_nvtx: str | None = None, window_ms: tuple[float, float | None] | None = None) -> Window | None:
    """A decode-only window: after the end of the last NVTX range matching
    `after_nvtx` (e.g. the last prefill range), or [a, b) ms after the first kernel."""
    if after_nvtx:
        ranges = nvtx_ranges(path, after_nvtx)
        if not ranges:
            raise UsageError(f"{path}: no NVTX range matches {after_nvtx!r} (was the capture traced with nvtx and does the engine emit such ranges?)")
        last = max(ranges, key=lambda r: r[2])
        return Window(last[2], None, f"after the last NVTX range matching {after_nvtx!r} ({last[0]!r} ended at {last[2]} ns)")
    if window_ms:
        span = kernel_time_span(path)
        if span is None:
            return Window(None, None, "empty export")
        a, b = window_ms
        return Window(span[0] + int(a * 1e6), None if b is None else span[0] + int(b * 1e6), f"kernels starting {a}..{'end' if b is None else b} ms after the first kernel")
    return None


def parse_window_spec(spec: str | None) -> tuple[float, float | None] | None:
    """'A:B' or 'A:' (ms after the first kernel) -> (A, B|None)."""
    if not spec:
        return None
    m = re.fullmatch(r"\s*([0-9.]+)\s*:\s*([0-9.]*)\s*", spec)
    if not m:
        raise UsageError(f"--window {spec!r}: expected START_MS:END_MS or START_MS: (ms after the first kernel)")
    a, b = float(m.group(1)), (float(m.group(2)) if m.group(2) else None)
    if b is not None and b <= a:
        raise UsageError(f"--window {spec!r}: end must be after start")
    return a, b
