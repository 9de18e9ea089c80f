"""Kernel buckets: an ordered regex table, first match wins, the rest is `other`.

Classification runs over the distinct kernel names (a few thousand), never over
rows: nsys.read_kernel_groups has already summed time and launches per name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from parity.paths import DEFAULTS_DIR
from parity.decode import read_utf8
from parity.errors import ConfigError
from parity.options import positive_int
from parity.tracer import TRACERS
from parity.yamlload import TooBig, safe_load

OTHER = "other"
DEFAULT_TABLE = DEFAULTS_DIR / "buckets.yaml"


class BucketRule(msgspec.Struct):
    name: str
    pattern: str  # regex searched in the demangled kernel name; first matching rule wins
    group: str | None = None  # macro bucket (GDN, MoE/FFN-GEMM, ...); None = the name


class ProfilingConfig(msgspec.Struct):
    nsys: str = "nsys"
    trace: str = "cuda,nvtx"
    ntg: list[int] = msgspec.field(default_factory=lambda: [64, 16])
    npl: int = 128
    npp: int = 128
    extra_args: list[str] = msgspec.field(default_factory=list)
    buckets: list[BucketRule] = msgspec.field(default_factory=list)  # empty = the shipped default table (parity/defaults/buckets.yaml)
    top_unmatched: int = 10
    decode_after_nvtx: str | None = None  # regex: analyze only kernels after the last matching NVTX range
    timeout_s: float = 3600.0  # one capture (nsys + workload)
    tracer: str = "auto"  # nsys | cupti | auto (nsys where it is installed and runs, else parity's CUPTI tracer)
    cupti: str | None = None  # a CUPTI root (include/, lib/); default: the toolkit's extras/CUPTI, else the nvidia-cuda-cupti wheel
    blocks: int = 3  # blocks per profile: each runs every arm traced (every ntg) and untraced, for the tracer's cost and paired buckets


def check_profiling(pr: ProfilingConfig, label: str, key: str) -> None:
    """profiling: every bucket pattern a regex, a known tracer, a positive number of blocks."""
    for i, b in enumerate(pr.buckets):
        try:
            re.compile(b.pattern)
        except re.error as err:
            raise ConfigError(label, f"{key}.buckets[{i}].pattern", f"bad regex: {err}") from None
    if pr.tracer not in TRACERS:
        raise ConfigError(label, f"{key}.tracer", f"must be auto, cupti or nsys, got {pr.tracer!r}")
    if not positive_int(pr.blocks):
        raise ConfigError(label, f"{key}.blocks", "must be a positive integer")


@dataclass
class BucketTable:
    rules: list[BucketRule]
    source: str = ""
    _compiled: list[tuple[str, re.Pattern]] = field(default_factory=list, repr=False)

    def __post_init__(self):
        self._compiled = []
        for i, r in enumerate(self.rules):
            if r.name == OTHER:
                raise ConfigError(self.source, f"buckets[{i}].name", f"{OTHER!r} is reserved for unmatched kernels")
            try:
                self._compiled.append((r.name, re.compile(r.pattern)))
            except re.error as e:
                raise ConfigError(self.source, f"buckets[{i}].pattern", f"bad regex {r.pattern!r}: {e}") from None

    def classify(self, name: str) -> str:
        for bucket, rx in self._compiled:
            if rx.search(name):
                return bucket
        return OTHER

    def order(self) -> list[str]:
        seen: list[str] = []
        for r in self.rules:
            if r.name not in seen:
                seen.append(r.name)
        return seen + [OTHER]

    def groups(self) -> dict[str, str]:
        out = {r.name: (r.group or r.name) for r in self.rules}
        out[OTHER] = OTHER
        return out


def load_table_file(path: str | Path) -> BucketTable:
    import yaml

    label = str(path)
    text = read_utf8(Path(path), label, missing="bucket table not found")  # bounded; unreadable: one line
    try:
        data = safe_load(text)
    except yaml.YAMLError as e:
        said = getattr(e, "problem", e)
        raise ConfigError(label, "", said if isinstance(e, TooBig) else f"YAML syntax error: {said}") from None
    raw = data.get("buckets") if isinstance(data, dict) else data
    if not isinstance(raw, list) or not raw:
        raise ConfigError(label, "buckets", "must be a non-empty list of {name, pattern[, group]}")
    rules = []
    for i, r in enumerate(raw):
        if not isinstance(r, dict) or not isinstance(r.get("name"), str) or not isinstance(r.get("pattern"), str):
            raise ConfigError(label, f"buckets[{i}]", "each rule needs a name and a pattern (strings)")
        unknown = set(r) - {"name", "pattern", "group"}
        if unknown:
            raise ConfigError(label, f"buckets[{i}].{sorted(unknown)[0]}", "unknown key")
        rules.append(BucketRule(r["name"], r["pattern"], r.get("group")))
    return BucketTable(rules, label)


def default_table() -> BucketTable:
    return load_table_file(DEFAULT_TABLE)


def table_for(profiling) -> BucketTable:
    """The profile's profiling.buckets, or the shipped default table when empty."""
    if profiling.buckets:
        return BucketTable(list(profiling.buckets), "profiling.buckets")
    return default_table()


def attribute(groups, table: BucketTable, top_unmatched: int = 10) -> dict:
    """Per-bucket totals from kernel groups (nsys.KernelGroup).

    total_ms: sum of kernel durations (end - start) in the bucket;
    share: total_ms / all kernels' total_ms; instances: kernel launches
    (graph-node executions count one each); ms_per_launch: total_ms / instances.
    """
    per: dict[str, list] = {}
    unmatched = []
    total_ns = 0
    node_instances = 0
    for g in groups:
        b = table.classify(g.name)
        acc = per.setdefault(b, [0, 0])
        acc[0] += g.total_ns
        acc[1] += g.instances
        total_ns += g.total_ns
        node_instances += g.graph_node_instances
        if b == OTHER:
            unmatched.append(g)
    rows = []
    for b in table.order():
        if b not in per:
            continue
        ns, n = per[b]
        rows.append(bucket_row(b, ns, n, total_ns))
    rows.sort(key=lambda r: -r["total_ms"])
    unmatched.sort(key=lambda g: -g.total_ns)
    top = [{"name": g.name, "total_ms": round(g.total_ns / 1e6, 6), "instances": g.instances, "share": round(g.total_ns / total_ns, 6) if total_ns else 0.0} for g in unmatched[:top_unmatched]]
    group_of = table.groups()
    macro: dict[str, list] = {}
    for b, (ns, n) in per.items():
        acc = macro.setdefault(group_of.get(b, b), [0, 0])
        acc[0] += ns
        acc[1] += n
    groups_rows = sorted((bucket_row(m, ns, n, total_ns) for m, (ns, n) in macro.items()), key=lambda r: -r["total_ms"])
    return {
        "total_ms": round(total_ns / 1e6, 6),
        "kernels": sum(g.instances for g in groups),
        "distinct_names": len(groups),
        "graph_node_kernels": node_instances,
        "buckets": rows,
        "groups": groups_rows,
        "unmatched_top": top,
        "unmatched_ms": round(per.get(OTHER, [0, 0])[0] / 1e6, 6),
    }


def bucket_row(name: str, ns: int, n: int, total_ns: int) -> dict:
    ms = ns / 1e6
    return {
        "bucket": name,
        "total_ms": round(ms, 6),
        "share": round(ns / total_ns, 6) if total_ns else 0.0,
        "instances": n,
        "ms_per_launch": round(ms / n, 6) if n else None,
    }
