"""Schema-faithful nsys SQLite exports for tests, the fake nsys and benchmarks.

nsys does not exist on the CI machines; the tables written here follow the
documented export schema (tests/data/profile/README.md lists the sources):
names live in StringIds and kernel rows refer to them by id; every kernel has
start/end in ns; a kernel that ran as a CUDA-graph node carries graphNodeId and
graphId (filled only when the capture used --cuda-graph-trace=node).  A
--cuda-graph-trace=graph capture has one CUPTI_ACTIVITY_KIND_GRAPH_TRACE row per
graph launch instead; name/value metadata tables record the capture options and
the exporting nsys (META_DATA_EXPORT, EXPORT_META_DATA in older versions).
"""

from __future__ import annotations


from parity.tracer.trace import short_name  # noqa: F401 (nsys's shortName, one definition)
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

STRINGS_DDL = "CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL)"

KERNEL_COLUMNS = [
    ("start", "INTEGER NOT NULL"),
    ("end", "INTEGER NOT NULL"),
    ("deviceId", "INTEGER NOT NULL"),
    ("contextId", "INTEGER NOT NULL"),
    ("streamId", "INTEGER NOT NULL"),
    ("correlationId", "INTEGER"),
    ("globalPid", "INTEGER"),
    ("demangledName", "INTEGER NOT NULL"),
    ("shortName", "INTEGER NOT NULL"),
    ("mangledName", "INTEGER"),
    ("launchType", "INTEGER"),
    ("cacheConfig", "INTEGER"),
    ("registersPerThread", "INTEGER NOT NULL"),
    ("gridX", "INTEGER NOT NULL"),
    ("gridY", "INTEGER NOT NULL"),
    ("gridZ", "INTEGER NOT NULL"),
    ("blockX", "INTEGER NOT NULL"),
    ("blockY", "INTEGER NOT NULL"),
    ("blockZ", "INTEGER NOT NULL"),
    ("staticSharedMemory", "INTEGER NOT NULL"),
    ("dynamicSharedMemory", "INTEGER NOT NULL"),
    ("localMemoryPerThread", "INTEGER NOT NULL"),
    ("localMemoryTotal", "INTEGER NOT NULL"),
    ("gridId", "INTEGER NOT NULL"),
    ("sharedMemoryExecuted", "INTEGER"),
    ("graphNodeId", "INTEGER"),
    ("graphId", "INTEGER"),
    ("sharedMemoryLimitConfig", "INTEGER"),
]
KERNEL_DDL = "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (" + ", ".join(f"{c} {t}" for c, t in KERNEL_COLUMNS) + ")"

NVTX_COLUMNS = [
    ("start", "INTEGER NOT NULL"),
    ("end", "INTEGER"),
    ("eventType", "INTEGER NOT NULL"),
    ("rangeId", "INTEGER"),
    ("category", "INTEGER"),
    ("color", "INTEGER"),
    ("text", "TEXT"),
    ("globalTid", "INTEGER"),
    ("endGlobalTid", "INTEGER"),
    ("textId", "INTEGER"),
    ("domainId", "INTEGER"),
]
NVTX_DDL = "CREATE TABLE NVTX_EVENTS (" + ", ".join(f"{c} {t}" for c, t in NVTX_COLUMNS) + ")"
NVTX_PUSH_POP_RANGE = 59  # ENUM_NSYS_EVENT_TYPE: NvtxPushPopRange

GRAPH_TRACE_COLUMNS = [
    ("start", "INTEGER NOT NULL"),
    ("end", "INTEGER NOT NULL"),
    ("deviceId", "INTEGER NOT NULL"),
    ("contextId", "INTEGER NOT NULL"),
    ("streamId", "INTEGER NOT NULL"),
    ("correlationId", "INTEGER"),
    ("globalPid", "INTEGER"),
    ("graphId", "INTEGER NOT NULL"),
    ("graphExecId", "INTEGER"),
]
GRAPH_TRACE_DDL = "CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (" + ", ".join(f"{c} {t}" for c, t in GRAPH_TRACE_COLUMNS) + ")"
META_DDL = "CREATE TABLE {} (name TEXT NOT NULL, value TEXT NOT NULL)"

_KERNEL_INSERT = f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({', '.join(c for c, _ in KERNEL_COLUMNS)}) VALUES ({', '.join('?' * len(KERNEL_COLUMNS))})"


@dataclass
class Kernel:
    name: str  # demangled name, e.g. "void k_get_rows_float<float, float>(...)"
    start: int  # ns
    end: int  # ns
    graph_node_id: int | None = None  # set when the kernel ran as a graph node under node tracing
    graph_id: int | None = None
    stream: int = 7
    correlation: int = 0




class _Strings:
    def __init__(self):
        self.ids: dict[str, int] = {}

    def id(self, value: str) -> int:
        if value not in self.ids:
            self.ids[value] = len(self.ids) + 1
        return self.ids[value]


def _row(k: Kernel, strings: _Strings, grid_id: int) -> tuple:
    return (
        k.start, k.end, 0, 1, k.stream, k.correlation, 4242, strings.id(k.name), strings.id(short_name(k.name)), None,
        0, 0, 32, 64, 1, 1, 128, 1, 1, 0, 0, 0, 0, grid_id, 0, k.graph_node_id, k.graph_id, 0,
    )  # fmt: skip


def write_export(path: str | Path, kernels: Iterable[Kernel], nvtx: Iterable[tuple[str, int, int | None]] = (), *,
                 graph_launches: Iterable[tuple[int, int, int]] = (), capture_meta: dict | None = None,
                 export_meta: tuple[str, dict] | None = None, kernel_table: bool = True) -> Path:  # fmt: skip
    """Write a new export: kernels (any order), NVTX ranges (text, start, end), whole-graph
    launches (start, end, graphId; a graph-mode capture), META_DATA_CAPTURE rows and
    (table, rows) of the export metadata; kernel_table=False is what an nsys whose analysis
    failed leaves behind."""
    path = Path(path)
    if path.exists():
        path.unlink()
    strings = _Strings()
    conn = sqlite3.connect(path)
    try:
        conn.execute(STRINGS_DDL)
        if kernel_table:
            conn.execute(KERNEL_DDL)
            conn.executemany(_KERNEL_INSERT, (_row(k, strings, i + 1) for i, k in enumerate(kernels)))
        conn.execute(NVTX_DDL)
        launches = list(graph_launches)
        if launches:  # tables are created lazily: only when there are rows
            conn.execute(GRAPH_TRACE_DDL)
            conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES (?, ?, 0, 1, 7, ?, 4242, ?, ?)",
                             [(s, e, 100000 + i, g, g) for i, (s, e, g) in enumerate(launches)])  # fmt: skip
        for table, rows in ([("META_DATA_CAPTURE", capture_meta)] if capture_meta else []) + ([export_meta] if export_meta else []):
            conn.execute(META_DDL.format(table))
            conn.executemany(f"INSERT INTO {table} VALUES (?, ?)", [(str(k), str(v)) for k, v in rows.items()])
        conn.executemany(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, rangeId, text, globalTid, textId, domainId) VALUES (?, ?, ?, ?, NULL, 1, ?, 0)",
            [(s, e, NVTX_PUSH_POP_RANGE, i + 1, strings.id(t)) for i, (t, s, e) in enumerate(nvtx)],
        )
        conn.executemany("INSERT INTO StringIds (id, value) VALUES (?, ?)", [(i, v) for v, i in strings.ids.items()])
        conn.commit()
    finally:
        conn.close()
    return path


def scale_kernels(rows: int, names: int = 2000, seed: int = 0) -> Iterable[Kernel]:
    """`rows` graph-node kernels over `names` distinct llama.cpp/vLLM-like names."""
    import random

    rnd = random.Random(seed)
    bases = [
        "void gated_delta_net_cuda<128, false, true>(float const*, float*, int)",
        "void mul_mat_q<(ggml_type)40, 128, false, (ggml_prec)0>(char const*, int const*, float*)",
        "void quantize_mmq_nvfp4<(mmq_q8_1_ds_layout)0>(float const*, void*, long)",
        "void flash_attn_ext_f16<128, 128, 4, 1, false, false>(char const*, char const*, float*)",
        "void k_get_rows_float<float, float>(float const*, int const*, float*, long)",
        "void k_bin_bcast<&op_add, float, float, float>(float const*, float const*, float*, int)",
        "void concat_f32_dim1(float const*, float const*, float*, int, int)",
        "nvjet_sm121_tst_128x64_64x6_2x1_v_bz_TNT",
        "void rms_norm_f32<1024, true, false>(float const*, float*, int, long)",
        "triton_poi_fused_add_mul_0",
    ]
    table = [f"{bases[i % len(bases)][:-1]}, int /*v{i}*/)" if i >= len(bases) else bases[i] for i in range(names)]
    t = 1_000_000
    for i in range(rows):
        dur = rnd.randint(1_000, 20_000)
        yield Kernel(table[rnd.randrange(names)], t, t + dur, graph_node_id=i % 5000 + 1, graph_id=1, correlation=i + 1)
        t += dur + 200
