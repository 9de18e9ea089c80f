"""The CUPTI tracer's trace files -> the tables of an nsys SQLite export.

The injection library (cupti/parity_cupti.cpp, its header comment defines the lines) writes
one tab-separated file per process.  convert() streams them into an SQLite file with nsys's
table and column names (StringIds, CUPTI_ACTIVITY_KIND_KERNEL / _MEMCPY / _MEMSET,
META_DATA_EXPORT, META_DATA_CAPTURE), so parity.profiles reads a CUPTI trace exactly as it
reads `nsys export --type sqlite`: buckets, windows, the difference method, per-launch
normalization.  Kernel names are stored demangled (demangledName), mangled (mangledName) and
short (shortName), as nsys does; a graph-node id or graph id of 0 (not a graph node) is NULL.

What parity adds in tables of its own: PARITY_CUPTI_PROCESSES (one row per traced process:
complete, dropped records, buffers refused), PARITY_CUPTI_GRAPHS (instantiated graphs with their
node and kernel-node counts) and PARITY_CUPTI_GRAPH_LAUNCHES (one row per cuGraphLaunch)."""

from __future__ import annotations

import glob
import os
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from parity.errors import InfraError, UsageError

FORMAT = 1
MODE_KEY = "CUDA_GRAPH_TRACE_OPTIONS:MODE"  # as nsys records the graph trace mode in META_DATA_CAPTURE
NODE_RULE = ("a graph launch matches when its kernels (one correlation id) number the kernel nodes of the executable graph it launched "
             "(cuGraphGetNodes at instantiation) and no graph node ran twice in it")  # fmt: skip

# nsys export column names (tests/data/profile/kernel-columns.txt lists the documented ones)
KERNEL_COLUMNS = [
    "start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "demangledName", "shortName", "mangledName",
    "launchType", "cacheConfig", "registersPerThread", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ", "staticSharedMemory",
    "dynamicSharedMemory", "localMemoryPerThread", "localMemoryTotal", "gridId", "sharedMemoryExecuted", "graphNodeId", "graphId",
    "sharedMemoryLimitConfig",
]  # fmt: skip
MEMCPY_COLUMNS = ["start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "bytes", "copyKind", "srcKind", "dstKind", "graphNodeId", "graphId"]
MEMSET_COLUMNS = ["start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "value", "bytes", "memKind", "graphNodeId", "graphId"]
_NOT_NULL = {"start", "end", "deviceId", "contextId", "streamId", "demangledName", "shortName", "registersPerThread", "gridX", "gridY", "gridZ",
             "blockX", "blockY", "blockZ", "staticSharedMemory", "dynamicSharedMemory", "localMemoryPerThread", "localMemoryTotal", "gridId", "bytes"}  # fmt: skip
_K_FIELDS = 21  # K + 20 values
_M_FIELDS = 13
_S_FIELDS = 12


def _ddl(table: str, cols: list[str]) -> str:
    return f"CREATE TABLE {table} (" + ", ".join(f"{c} INTEGER{' NOT NULL' if c in _NOT_NULL else ''}" for c in cols) + ")"


@dataclass
class Process:
    """What one trace file says about its process, beside the records."""

    path: str
    pid: int | None = None
    format: int | None = None
    cupti_version: int | None = None
    complete: bool = False  # "# end" seen: the process exited normally and flushed
    dropped: int | None = None  # records CUPTI dropped (no buffer to put them in)
    buffers_requested: int | None = None
    buffers_refused: int | None = None
    declared: dict = field(default_factory=dict)  # "# records" counts: kernels, memcpys, memsets, launches
    counted: dict = field(default_factory=lambda: {"kernels": 0, "memcpys": 0, "memsets": 0, "launches": 0, "graphs": 0})
    errors: list[str] = field(default_factory=list)
    bad_lines: int = 0
    first_bad: str | None = None


def short_name(demangled: str) -> str:
    """nsys's shortName: the function name without return type, template arguments or parameters."""
    s = re.sub(r"^void\s+", "", demangled.strip())
    depth, out = 0, []
    for ch in s:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            break
        elif depth == 0:
            out.append(ch)
    return "".join(out).split("::")[-1].strip() or demangled


def records(lines: Iterable[str], proc: Process) -> Iterator[tuple[str, list]]:
    """(kind, values) per record line; header and footer lines fill proc.  Kinds: N (name),
    K (kernel), M (memcpy), S (memset), G (instantiated graph), L (graph launch)."""
    want = {"N": 4, "K": _K_FIELDS, "M": _M_FIELDS, "S": _S_FIELDS, "G": 5, "L": 4}
    for raw in lines:
        line = raw.rstrip("\n")
        if not line:
            continue
        if line.startswith("#"):
            _footer(line, proc)
            continue
        parts = line.split("\t")
        kind = parts[0]
        if kind not in want or len(parts) != want[kind]:
            proc.bad_lines += 1
            proc.first_bad = proc.first_bad or line[:200]
            continue
        if kind == "N":
            try:
                yield kind, [int(parts[1]), parts[2], parts[3]]
            except ValueError:
                proc.bad_lines += 1
                proc.first_bad = proc.first_bad or line[:200]
            continue
        try:
            vals = [int(x) for x in parts[1:]]
        except ValueError:
            proc.bad_lines += 1
            proc.first_bad = proc.first_bad or line[:200]
            continue
        key = {"K": "kernels", "M": "memcpys", "S": "memsets", "L": "launches", "G": "graphs"}[kind]
        proc.counted[key] += 1
        yield kind, vals


def _footer(line: str, proc: Process) -> None:
    words = line[1:].split()
    if not words:
        return
    head, rest = words[0], words[1:]
    num = lambda i: int(rest[i]) if len(rest) > i and rest[i].lstrip("-").isdigit() else None  # noqa: E731
    if head == "parity-cupti":
        proc.format = num(0)
    elif head == "cupti_version":
        proc.cupti_version = num(0)
    elif head == "pid":
        proc.pid = num(0)
    elif head == "dropped":
        proc.dropped = num(0)
    elif head == "buffers":
        proc.buffers_requested, proc.buffers_refused = num(0), num(1)
    elif head == "records":
        proc.declared = dict(zip(("kernels", "memcpys", "memsets", "launches"), (num(i) for i in range(4))))
    elif head == "error":
        proc.errors.append(" ".join(rest))
    elif head == "end":
        proc.complete = True


def trace_files(pattern: str) -> list[str]:
    """The files of one capture: PARITY_CUPTI_OUT with %p (one per process) or a plain path."""
    return sorted(glob.glob(pattern.replace("%p", "*"))) if "%p" in pattern else ([pattern] if os.path.isfile(pattern) else [])


def convert(files: list[str], sqlite_out: str | Path, *, chunk: int = 20000) -> dict:
    """Stream trace files into a new nsys-shaped SQLite export; returns the summary (processes,
    graphs, per-launch node check, graph mode seen) that check() judges."""
    if not files:
        raise UsageError("no CUPTI trace file to convert")
    out = Path(sqlite_out)
    tmp = out.with_name(out.name + ".tmp")
    tmp.unlink(missing_ok=True)
    conn = sqlite3.connect(tmp)
    procs: list[Process] = []
    try:
        conn.execute("CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute(_ddl("CUPTI_ACTIVITY_KIND_KERNEL", KERNEL_COLUMNS))
        conn.execute(_ddl("CUPTI_ACTIVITY_KIND_MEMCPY", MEMCPY_COLUMNS))
        conn.execute(_ddl("CUPTI_ACTIVITY_KIND_MEMSET", MEMSET_COLUMNS))
        conn.execute("CREATE TABLE PARITY_CUPTI_GRAPHS (globalPid INTEGER, graphId INTEGER, graphExecId INTEGER, nodes INTEGER, kernelNodes INTEGER)")
        conn.execute("CREATE TABLE PARITY_CUPTI_GRAPH_LAUNCHES (globalPid INTEGER, correlationId INTEGER, graphExecId INTEGER, graphId INTEGER)")
        strings: dict[str, int] = {}

        def sid(value: str) -> int:
            if value not in strings:
                strings[value] = len(strings) + 1
            return strings[value]

        k_ins = f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({', '.join(KERNEL_COLUMNS)}) VALUES ({', '.join('?' * len(KERNEL_COLUMNS))})"
        m_ins = f"INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY ({', '.join(MEMCPY_COLUMNS)}) VALUES ({', '.join('?' * len(MEMCPY_COLUMNS))})"
        s_ins = f"INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET ({', '.join(MEMSET_COLUMNS)}) VALUES ({', '.join('?' * len(MEMSET_COLUMNS))})"
        for path in files:
            proc = Process(path)
            procs.append(proc)
            m = re.search(r"(\d+)(?:\.\w+)?$", Path(path).name)
            fallback_pid = int(m.group(1)) if m else len(procs)
            names: dict[int, tuple[int, int, int]] = {}
            batch: dict[str, list] = {"K": [], "M": [], "S": [], "G": [], "L": []}

            def flush() -> None:
                conn.executemany(k_ins, batch["K"])
                conn.executemany(m_ins, batch["M"])
                conn.executemany(s_ins, batch["S"])
                conn.executemany("INSERT INTO PARITY_CUPTI_GRAPHS VALUES (?, ?, ?, ?, ?)", batch["G"])
                conn.executemany("INSERT INTO PARITY_CUPTI_GRAPH_LAUNCHES VALUES (?, ?, ?, ?)", batch["L"])
                for v in batch.values():
                    v.clear()

            with open(path, errors="replace") as f:
                n = 0
                for kind, v in records(f, proc):
                    pid = proc.pid if proc.pid is not None else fallback_pid
                    nz = lambda x: x or None  # noqa: E731  (CUPTI's 0 = not a graph node; nsys exports NULL)
                    if kind == "N":
                        names[v[0]] = (sid(v[2]), sid(short_name(v[2])), sid(v[1]))
                    elif kind == "K":
                        start, end, dev, ctx, stream, corr, gid, node, gx, gy, gz, bx, by, bz, regs, ssm, dsm, lmem, ltype, name = v
                        if name not in names:
                            proc.bad_lines += 1
                            proc.first_bad = proc.first_bad or f"kernel with unknown name id {name}"
                            continue
                        dem, short, mangled = names[name]
                        batch["K"].append((start, end, dev, ctx, stream, corr, pid, dem, short, mangled, ltype, 0, regs, gx, gy, gz, bx, by, bz, ssm, dsm, lmem, 0, 0, 0, nz(node), nz(gid), 0))
                    elif kind == "M":
                        start, end, dev, ctx, stream, corr, gid, node, ck, sk, dk, nbytes = v
                        batch["M"].append((start, end, dev, ctx, stream, corr, pid, nbytes, ck, sk, dk, nz(node), nz(gid)))
                    elif kind == "S":
                        start, end, dev, ctx, stream, corr, gid, node, value, nbytes, mk = v
                        batch["S"].append((start, end, dev, ctx, stream, corr, pid, value, nbytes, mk, nz(node), nz(gid)))
                    elif kind == "G":
                        batch["G"].append((pid, v[0], v[1], None if v[2] < 0 else v[2], None if v[3] < 0 else v[3]))
                    elif kind == "L":
                        batch["L"].append((pid, v[0], v[1], None if v[2] < 0 else v[2]))
                    n += 1
                    if n % chunk == 0:
                        flush()
                flush()
            if proc.pid is None:
                proc.pid = fallback_pid
        conn.executemany("INSERT INTO StringIds (id, value) VALUES (?, ?)", [(i, s) for s, i in strings.items()])
        summary = _summarize(conn, procs)
        meta_export = {"EXPORTER": "parity-cupti", "PARITY_CUPTI_FORMAT": str(FORMAT), "CUPTI_VERSION": ",".join(sorted({str(p.cupti_version) for p in procs}))}
        conn.execute("CREATE TABLE META_DATA_EXPORT (name TEXT NOT NULL, value TEXT NOT NULL)")
        conn.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)", list(meta_export.items()))
        if summary["graph_trace_mode"]:
            conn.execute("CREATE TABLE META_DATA_CAPTURE (name TEXT NOT NULL, value TEXT NOT NULL)")
            conn.execute("INSERT INTO META_DATA_CAPTURE VALUES (?, ?)", (MODE_KEY, summary["graph_trace_mode"]))
        conn.execute("CREATE TABLE PARITY_CUPTI_PROCESSES (globalPid INTEGER, path TEXT, complete INTEGER, dropped INTEGER, buffersRequested INTEGER, buffersRefused INTEGER, "
                     "kernels INTEGER, memcpys INTEGER, memsets INTEGER, launches INTEGER, cuptiVersion INTEGER, errors TEXT)")  # fmt: skip
        conn.executemany("INSERT INTO PARITY_CUPTI_PROCESSES VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         [(p.pid, p.path, int(p.complete), p.dropped, p.buffers_requested, p.buffers_refused, p.counted["kernels"], p.counted["memcpys"],
                           p.counted["memsets"], p.counted["launches"], p.cupti_version, "; ".join(p.errors)) for p in procs])  # fmt: skip
        conn.commit()
    finally:
        conn.close()
    os.replace(tmp, out)
    summary["sqlite"] = str(out)
    return summary


def _summarize(conn, procs: list[Process]) -> dict:
    """Processes, graphs and the per-launch check: the kernels of each graph launch (one
    correlation id) against the kernel-node count of the executable graph it launched.

    Which graph a launch ran: its cuGraphLaunch line (L) names the executable graph's CUPTI id;
    without one, the kernels' graphId is taken as that id.  On CUPTI 13.0 (H100 captures in
    tests/data/profile/cupti) a kernel record's graphId is the executable graph's id
    (cuptiGetGraphExecId), not the id of the graph it was instantiated from (cuptiGetGraphId),
    and the high 32 bits of its graphNodeId are that id too; the kernel-node count comes from
    the G line of that executable graph (cuGraphGetNodes at instantiation)."""
    q = lambda sql: conn.execute(sql).fetchall()  # noqa: E731
    kernels, graph_kernels, node_kernels = q("SELECT COUNT(*), SUM(graphId IS NOT NULL), SUM(graphNodeId IS NOT NULL) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0]
    launches_l = q("SELECT COUNT(*) FROM PARITY_CUPTI_GRAPH_LAUNCHES")[0][0]
    execs = {(pid, eid): (gid, nodes, k) for pid, gid, eid, nodes, k in q("SELECT globalPid, graphId, graphExecId, nodes, kernelNodes FROM PARITY_CUPTI_GRAPHS")}
    launched = {(pid, corr): eid for pid, corr, eid in q("SELECT globalPid, correlationId, graphExecId FROM PARITY_CUPTI_GRAPH_LAUNCHES")}
    per_launch = q("SELECT globalPid, graphId, correlationId, COUNT(*), COUNT(DISTINCT graphNodeId) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphId IS NOT NULL "
                   "GROUP BY globalPid, graphId, correlationId")  # fmt: skip
    node_ids = {(pid, gid): n for pid, gid, n in q("SELECT globalPid, graphId, COUNT(DISTINCT graphNodeId) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphId IS NOT NULL GROUP BY globalPid, graphId")}
    matched = unknown = by_launch_line = 0
    mismatched: list[dict] = []
    counts: dict = {}
    graph_of: dict = {}  # (pid, kernels' graphId) -> the executable graph's G row key
    for pid, gid, corr, n, distinct in per_launch:
        counts.setdefault((pid, gid), {}).setdefault(n, 0)
        counts[(pid, gid)][n] += 1
        eid = launched.get((pid, corr))
        by_launch_line += eid is not None
        key = (pid, gid if eid is None else eid)
        g = execs.get(key)
        if g is not None:
            graph_of[(pid, gid)] = key
        want = None if g is None else g[2]
        if want is None:
            unknown += 1
        elif n == want and distinct == n:
            matched += 1
        else:
            mismatched.append({"pid": pid, "graph_id": gid, "exec_id": key[1], "correlation_id": corr, "kernels": n, "distinct_nodes": distinct, "kernel_nodes": want})
    graphs = []
    for (pid, gid), c in sorted(counts.items()):
        g = execs.get(graph_of.get((pid, gid), (pid, gid)))
        graphs.append({"pid": pid, "graph_id": gid, "source_graph_id": None if g is None else g[0], "nodes": None if g is None else g[1],
                       "kernel_nodes": None if g is None else g[2], "distinct_node_ids": node_ids.get((pid, gid)),
                       "kernels_per_launch": {str(k): v for k, v in sorted(c.items())}})  # fmt: skip
    mode = trace_mode(int(node_kernels or 0), int(graph_kernels or 0), int(launches_l), len(execs))
    return {
        "processes": [p.__dict__ | {} for p in procs],
        "kernels": int(kernels or 0),
        "graph_kernels": int(graph_kernels or 0),
        "graph_node_kernels": int(node_kernels or 0),
        "graph_launches_seen": int(launches_l),
        "graph_launches_traced": len(per_launch),
        "node_check": {"launches": len(per_launch), "matched": matched, "mismatched": len(mismatched), "unknown": unknown, "by_launch_line": by_launch_line,
                       "rule": NODE_RULE, "examples": mismatched[:5]},  # fmt: skip
        "graphs": graphs,
        "graph_trace_mode": mode,
    }


def trace_mode(node_kernels: int, graph_kernels: int, launches: int, graphs: int) -> str:
    """The graph trace mode the export records, as nsys's META_DATA_CAPTURE does: "node" when
    kernels carry graph-node ids, and also when no graph was instantiated or launched at all
    (the library records every graph at node level; nothing ran in one), "graph" when graphs ran
    but no kernel has a node id (collapsed)."""
    if node_kernels:
        return "node"
    return "graph" if (launches or graph_kernels or graphs) else "node"


def problems(summary: dict, allow_collapsed: bool = False) -> list[str]:
    """Why this trace cannot be trusted, one line each (empty: it can).  A process without its end
    line, dropped records, CUPTI errors, unreadable lines, a kernel count that is not the one the
    library counted, and a collapsed trace (graphs launched, no kernel with a graph-node id)."""
    out = []
    for p in summary["processes"]:
        who = f"pid {p['pid']} ({p['path']})"
        if p["format"] != FORMAT:
            out.append(f"{who}: trace format {p['format']}, this parity reads {FORMAT}: rebuild the tracer")
        if not p["complete"]:
            out.append(f"{who}: no end line: the process did not exit normally (killed or crashed), its last buffers are lost")
        if p["dropped"]:
            out.append(f"{who}: CUPTI dropped {p['dropped']} records ({p['buffers_refused']} buffer requests refused): raise PARITY_CUPTI_MAX_BUFFERS / PARITY_CUPTI_BUFFER_KB")
        for e in p["errors"]:
            out.append(f"{who}: CUPTI error: {e}")
        if p["bad_lines"]:
            out.append(f"{who}: {p['bad_lines']} unreadable lines (first: {p['first_bad']!r})")
        for what, word in (("kernels", "kernel records"), ("launches", "graph launches")):
            decl = p["declared"].get(what)
            if p["complete"] and decl is not None and decl != p["counted"][what]:
                out.append(f"{who}: the library wrote {decl} {word}, the file holds {p['counted'][what]}")
    if not allow_collapsed and summary["graph_trace_mode"] == "graph":
        out.append(f"collapsed trace: {summary['graph_launches_seen']} CUDA-graph launches but no kernel carries a graph-node id, so each replay is one opaque "
                   "launch and per-kernel attribution of decode would be wrong (this CUPTI does not resolve graph nodes)")  # fmt: skip
    nc = summary["node_check"]
    if nc["mismatched"]:
        ex = nc["examples"][0] if nc["examples"] else {}
        out.append(f"{nc['mismatched']} of {nc['launches']} graph launches ran a kernel count that is not their graph's kernel-node count "
                   f"(e.g. graph {ex.get('graph_id')}: {ex.get('kernels')} kernels on {ex.get('distinct_nodes')} distinct nodes, "
                   f"{ex.get('kernel_nodes')} kernel nodes): records were lost or merged")  # fmt: skip
    return out


def require_clean(summary: dict, allow_collapsed: bool = False) -> None:
    bad = problems(summary, allow_collapsed)
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise InfraError(f"CUPTI trace refused: {bad[0]}{more}")
