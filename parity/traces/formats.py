"""The trace lines the users' series prints, one pure parse_*() per format, and the registry of
the envs that turn them on (TRACES).

Where each format comes from (`source`), and whether it was read (`verified`):
- a format string of a patch in the series (patches/paged/*.patch), copied as printed;
- a line the users captured and quoted in their docs (the fork's trace patches 0056-0064 are not
  in the series' patches/paged/: LLAMA_SERVING_TRACE, LLAMA_MOE_MMQ_SHAPE_TRACE, ...);
- an env the docs name with no line quoted (LLAMA_MUL_MAT_ROUTE_TRACE, ...): read by the series'
  convention, `[NAME]` or `[NAME less _TRACE]` then key=value fields, and marked unverified.
A value of "" or "0" turns a trace off (the patches' getenv: unset, "0" or atoi() == 0).
The exit-time [L5INSTR] counters are not env-gated: parity.gates.completion.series_counters
reads them (one parser for the md5 gate and the traces)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable

_FIELD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(\[[^\]]*\]|[^\s;,)]+)")
_HIST = re.compile(r"([^,:]+):(\d+)")

Parsed = tuple  # (tag, fields): the tag the line carried and its key=value fields


def value(text: str):
    """'40' -> 40, '0.97' -> 0.97; anything else (a tensor name, a route, a shape) as text."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        f = float(text)
    except ValueError:
        return text
    return f if math.isfinite(f) else text


def parse_fields(text: str) -> dict:
    """key=value tokens of a trace line ('type=40 moe=1 ne=[128,1,32,1]'), numbers as numbers."""
    return {k: value(v) for k, v in _FIELD.findall(text)}


def parse_tagged(line: str, tags: tuple[str, ...]) -> Parsed | None:
    """(tag, fields) of a line carrying one of the tags; a bare first word after the tag
    ('[LLAMA_BF16_STREAM] engaged seg=...', '[w4a16] engaged: ...') is its `event`."""
    for tag in tags:
        i = line.find(tag)
        if i < 0:
            continue
        rest = line[i + len(tag) :].strip()
        out = parse_fields(rest)
        head = rest.split(" ", 1)[0].rstrip(":") if rest else ""
        if head and "=" not in head:
            out = {"event": head, **out}
        return tag, out
    return None


def parse_hist(text: str) -> dict[str, int]:
    """'0:63,1-64:1,513+:12' -> {'0': 63, '1-64': 1, '513+': 12} (the admission trace's buckets)."""
    return {b: int(n) for b, n in _HIST.findall(text)}


# ---- one parser per format ---------------------------------------------------------------


def parse_serving_admission(line: str) -> Parsed | None:
    """LLAMA_SERVING_TRACE=1: one aggregate line when the server context is destroyed
    ('serving admission trace: steps=76 decode_only_steps=0 ... prompt_hist=0:63,1-64:1,513+:12
    decode_hist=... waiting_hist=...'); the *_hist fields are bucket -> steps."""
    tag = "serving admission trace:"
    i = line.find(tag)
    if i < 0:
        return None
    rest = line[i + len(tag) :]
    out = {}
    for k, v in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=(\S+)", rest):
        out[k] = parse_hist(v) if k.endswith("_hist") else value(v)
    return tag, out


def parse_mmq_shape(line: str) -> Parsed | None:
    """LLAMA_MOE_MMQ_SHAPE_TRACE=<n>: the grouped-MMQ selector's `[LLAMA_MOE_MMQ_SHAPE]` lines
    (type moe ncols_dst nchannels_x ncols_max n_active_est density mmq_x_max mmq_x_lim mmq_x_best
    mmq_y stream_k) and launch_mul_mat_q's `[LLAMA_MOE_MMQ_LAUNCH]` lines."""
    return parse_tagged(line, ("[LLAMA_MOE_MMQ_SHAPE]", "[LLAMA_MOE_MMQ_LAUNCH]"))


def parse_mmq_small_m(line: str) -> Parsed | None:
    """LLAMA_MOE_MMQ_SMALL_M_TRACE=<n>: `[LLAMA_MOE_MMQ_SMALL_M]` candidate lines."""
    return parse_tagged(line, ("[LLAMA_MOE_MMQ_SMALL_M]",))


def parse_spec_shape(line: str) -> Parsed | None:
    """LLAMA_SPEC_SHAPE_TRACE=1: 'spec shape: kind=verify batch_before=0 rows=4 outputs=4 draft=3 ...'."""
    return parse_tagged(line, ("spec shape:",))


def parse_quant_trace(line: str) -> Parsed | None:
    """LLAMA_QUANT_TRACE=<n> (patch 0052, mmq.cu): '[LLAMA_QUANT_TRACE] route=%s src0=%s src0_type=%s
    src1=%s src1_type=%s dst=%s dst_type=%s ids=%s native_fp4=%d dedup=%d gathered=%d K= Kpad= rows=
    ne12= experts='."""
    return parse_tagged(line, ("[LLAMA_QUANT_TRACE]",))


def parse_whole_pattern(line: str) -> Parsed | None:
    """LLAMA_MOE_WHOLE_PATTERN_TRACE=<n> (patch 0052, ggml-cuda.cu): '[LLAMA_MOE_WHOLE_PATTERN]
    supported=%d gate_up=%s ... view_pair=%d ids_match=%d swiglu=%d'."""
    return parse_tagged(line, ("[LLAMA_MOE_WHOLE_PATTERN]",))


def parse_whole_pattern_early(line: str) -> Parsed | None:
    """LLAMA_MOE_WHOLE_PATTERN_EARLY_TRACE=<n> (patch 0052): '[LLAMA_MOE_WHOLE_PATTERN_EARLY] ...'."""
    return parse_tagged(line, ("[LLAMA_MOE_WHOLE_PATTERN_EARLY]",))


def parse_whole_pattern_exec(line: str) -> Parsed | None:
    """LLAMA_MOE_WHOLE_PATTERN_EXEC_TRACE=<n> (patch 0052): '[LLAMA_MOE_WHOLE_PATTERN_EXEC] skip=4 ...'."""
    return parse_tagged(line, ("[LLAMA_MOE_WHOLE_PATTERN_EXEC]",))


def parse_bf16_stream(line: str) -> Parsed | None:
    """LLAMA_BF16_STREAM_TRACE=<n> (patch 0053): '[LLAMA_BF16_STREAM] engaged seg=%s node=%d ...' and
    '[LLAMA_BF16_STREAM] miss seg=%s ... reason=%s miss_node=%d miss_op=%s' (event engaged | miss)."""
    return parse_tagged(line, ("[LLAMA_BF16_STREAM]",))


def parse_w4a16(line: str) -> Parsed | None:
    """LLAMA_W4A16_DEBUG (patch 0035): '[w4a16] engaged: total_rows=%lld n_experts=%lld K= N= n_tiles=
    max_tpe= multi_tile_experts='."""
    return parse_tagged(line, ("[w4a16]",))


_DISPATCH = re.compile(r"\[paged\] decode src\[5\] set -> routing to (\S+) \(Q ne=\[([0-9,\s-]*)\]\)")


def parse_paged_dispatch(line: str) -> Parsed | None:
    """LLAMA_KV_PAGED_DISPATCH_LOG (patch 0010, once): '[paged] decode src[5] set -> routing to VEC
    (Q ne=[128,1,32,1])' -> {route, q_ne}."""
    m = _DISPATCH.search(line)
    if m is None:
        return None
    return "[paged] decode", {"route": m[1], "q_ne": m[2].replace(" ", "")}


_PLACED = re.compile(r"\[paged\] (?:seq|stream (-?\d+)) placed (\d+) tok at cells:")


def parse_paged_debug(line: str) -> Parsed | None:
    """LLAMA_KV_PAGED_DEBUG (patches 0002-0004): '[paged] seq placed %u tok at cells: ... (k= nblk= base=)',
    '[paged] stream %d placed ...', '[paged-attn] gather n_stream= n_kv= n_gather=', '[paged-alloc] ...'."""
    m = _PLACED.search(line)
    if m is not None:
        tail = line[m.end() :]
        out = {"tokens": int(m[2]), **parse_fields(tail[tail.find("(") + 1 :] if "(" in tail else "")}
        if m[1] is not None:
            out["stream"] = int(m[1])
        return "[paged] placed", out
    return parse_tagged(line, ("[paged-attn]", "[paged-alloc]"))


def parse_gdn_fla(line: str) -> Parsed | None:
    """LLAMA_GDN_FLA_TRACE: '[gdn-fla] engage H=32 n_seqs=N ...' (quoted in part in the docs)."""
    return parse_tagged(line, ("[gdn-fla]",))


# ---- the registry ------------------------------------------------------------------------------


@dataclass(frozen=True)
class TraceFormat:
    env: str
    parse: Callable[[str], Parsed | None]
    source: str  # where the format was read
    verified: bool = True  # False: the docs name the env and what it counts, no line of it is quoted
    once: bool = False  # one aggregate line at exit (its last line is the summary), not one per event

    def describe(self) -> dict:
        return {"env": self.env, "source": self.source, "verified": self.verified, "once": self.once}


DOCS = "docs/GB10_PARITY_PHASE0_RESULTS.md"


def by_convention(env: str, source: str = "") -> TraceFormat:
    """A trace env with no line quoted anywhere: `[NAME]` or `[NAME less _TRACE]`, then key=value
    fields, as every tagged trace of the series prints (patches 0052, 0053)."""
    base = env[: -len("_TRACE")] if env.endswith("_TRACE") else env
    tags = tuple(dict.fromkeys((f"[{base}]", f"[{env}]")))
    why = source or "no line of it is quoted in the series or its docs"
    how = f"{why}; read by the series' convention {' or '.join(tags)} + key=value"
    return TraceFormat(env, lambda line: parse_tagged(line, tags), how, verified=False)


PATCH_CUDA = "ggml/src/ggml-cuda/ggml-cuda.cu format string"
TRACES: dict[str, TraceFormat] = {
    f.env: f
    for f in (
        TraceFormat(
            "LLAMA_SERVING_TRACE",
            parse_serving_admission,
            f"{DOCS} Phase 54 (captured lines; fork commit c6cb8460e, not in patches/paged)",
            once=True,
        ),
        TraceFormat(
            "LLAMA_MOE_MMQ_SHAPE_TRACE",
            parse_mmq_shape,
            f"{DOCS} Phase 29 (a captured [LLAMA_MOE_MMQ_SHAPE] line); "
            "[LLAMA_MOE_MMQ_LAUNCH] as README row 0057 names it",
        ),
        TraceFormat(
            "LLAMA_MOE_MMQ_SMALL_M_TRACE",
            parse_mmq_small_m,
            f"{DOCS} Phase 32 names the [LLAMA_MOE_MMQ_SMALL_M] tag; no field is quoted",
            verified=False,
        ),
        TraceFormat("LLAMA_SPEC_SHAPE_TRACE", parse_spec_shape, f"{DOCS} Phase 18 (captured 'spec shape:' lines)"),
        TraceFormat("LLAMA_QUANT_TRACE", parse_quant_trace, "patch 0052 (ggml/src/ggml-cuda/mmq.cu format string)"),
        TraceFormat("LLAMA_MOE_WHOLE_PATTERN_TRACE", parse_whole_pattern, f"patch 0052 ({PATCH_CUDA})"),
        TraceFormat("LLAMA_MOE_WHOLE_PATTERN_EARLY_TRACE", parse_whole_pattern_early, f"patch 0052 ({PATCH_CUDA})"),
        TraceFormat("LLAMA_MOE_WHOLE_PATTERN_EXEC_TRACE", parse_whole_pattern_exec, f"patch 0052 ({PATCH_CUDA})"),
        TraceFormat("LLAMA_BF16_STREAM_TRACE", parse_bf16_stream, f"patch 0053 ({PATCH_CUDA}s)"),
        TraceFormat("LLAMA_W4A16_DEBUG", parse_w4a16, "patch 0035 (format string)"),
        TraceFormat("LLAMA_KV_PAGED_DEBUG", parse_paged_debug, "patches 0002-0004 (format strings)"),
        TraceFormat("LLAMA_KV_PAGED_DISPATCH_LOG", parse_paged_dispatch, "patch 0010 (format string)"),
        TraceFormat(
            "LLAMA_GDN_FLA_TRACE",
            parse_gdn_fla,
            "docs/EXECUTION_REARCH_SCOPE.md quotes '[gdn-fla] engage H=32 n_seqs=N' in part",
            verified=False,
        ),
        by_convention(
            "LLAMA_MUL_MAT_ROUTE_TRACE",
            "README row 0061 names the env and its routes (vec_f, mat_f, vec_q, mmq, ...), no line",
        ),
        by_convention(
            "LLAMA_MOE_MMID_ROUTE_TRACE",
            "README row 0060 names the env and its routes (mmvq, mmvf, mmq, mmf, fallback), no line",
        ),
        by_convention("LLAMA_CUBLAS_ROUTE_TRACE", "README rows 0062/0063 name the env and its subroutes, no line"),
    )
}


def is_on(value: str | None) -> bool:
    """The patches read unset, "" and "0" as off (atoi() == 0 for a number)."""
    if value is None or not value.strip():
        return False
    v = value.strip()
    return not (v.lstrip("+-").isdigit() and int(v) == 0)


def trace_envs(env: dict[str, str]) -> dict[str, TraceFormat]:
    """The trace formats an env turns on: every registered trace env set on, and any other
    *_TRACE name by the convention (sorted by name)."""
    out = {}
    for name in sorted(env):
        if not is_on(env[name]):
            continue
        if name in TRACES:
            out[name] = TRACES[name]
        elif name.endswith("_TRACE"):
            out[name] = by_convention(name)
    return out
