"""prefill-under-decode: decode_streams streams decoding decode_gen tokens; once all of them
decode, long_prompts prompts of long_ptok tokens arrive every long_every_s.  The stall of
each: the decode gaps overlapping its admission (send -> its first token)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from parity.errors import ConfigError
from parity.loadgen.client import one_request, request_body
from parity.loadgen.http import Connection
from parity.loadgen.prompts import token_prompts
from parity.loadgen.record import RequestRecord
from parity.metrics import workload as workload_metrics
from parity.results.model import PointRow
from parity.workloads.base import Measured, Plot, WorkloadKind
from parity.workloads.plots import axes, num, save


def stall_distribution(rows: list[PointRow], path: Path) -> Path | None:
    """ECDF of the admission-overlapping decode gaps per engine (all valid repeats pooled),
    each engine's undisturbed median gap as a dotted line."""
    gaps: dict[str, list[float]] = {}
    base: dict[str, list[float]] = {}
    for r in rows:
        if r.valid and (stalls := r.info.get("stall_gaps_ms")):
            gaps.setdefault(r.engine, []).extend(g for g in stalls if num(g) and g > 0)
            if num(base_gap := r.metric("decode_gap_p50_ms")):
                base.setdefault(r.engine, []).append(base_gap)
    gaps = {e: sorted(v) for e, v in gaps.items() if v}
    if not gaps:
        return None
    fig, ax = axes()
    for eng, vals in sorted(gaps.items()):
        ys = [(i + 1) / len(vals) for i in range(len(vals))]
        (line,) = ax.step(vals, ys, where="post", label=f"{eng} ({len(vals)} gaps)")
        if base.get(eng):
            b = sorted(base[eng])[len(base[eng]) // 2]
            ax.axvline(b, color=line.get_color(), linestyle=":", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlabel("decode gap overlapping an admission (ms, log); dotted: undisturbed median")
    ax.set_ylabel("share of gaps <= x")
    ax.set_title("decode stalls while long prompts are admitted")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small", loc="lower right")
    return save(fig, path)


async def under_decode(t, decode_specs, long_specs, every_s: float, timeout: float) -> tuple[list[RequestRecord], list[RequestRecord]]:
    """The decode streams first; once every one of them has its first token (or ended), the
    long prompts at every_s apart, each on its own connection."""

    conns: list = []

    def start(spec) -> tuple[RequestRecord, asyncio.Task]:
        rec = RequestRecord(sent_prompt_tokens=spec.prompt_tokens or len(spec.prompt), expected_tokens=spec.gen)
        conn = Connection(t.host, t.port, min(timeout, 30.0))
        conns.append(conn)
        return rec, asyncio.ensure_future(one_request(conn, t, request_body(t, spec.prompt, spec.gen), rec, timeout))

    try:
        decode = [start(s) for s in decode_specs]
        deadline = time.perf_counter() + timeout
        while any(r.first is None and not task.done() for r, task in decode) and time.perf_counter() < deadline:
            await asyncio.sleep(0.005)
        first = time.perf_counter()
        long = []
        for i, spec in enumerate(long_specs):
            await asyncio.sleep(max(0.0, first + i * every_s - time.perf_counter()))
            long.append(start(spec))
        await asyncio.gather(*[task for _, task in decode + long])
        return [r for r, _ in decode], [r for r, _ in long]
    finally:
        for conn in conns:
            conn.close()


class PrefillUnderDecode(WorkloadKind):
    name = "prefill-under-decode"
    what = "decode streams running while long prompts arrive; the stall is the decode gaps overlapping each long prompt's admission (its send to its first token)"
    positive = ("decode_streams", "decode_gen", "long_prompts", "long_ptok")
    metrics = ("stall_max_ms", "stall_p99_ms", "decode_gap_p50_ms", "stall_ratio", "decode_tokens_per_chunk", "long_ttft_mean_ms", "long_ttft_max_ms")
    headline = ("stall_max_ms", "stall_p99_ms", "long_ttft_mean_ms")
    knob = "decode_gen"  # the decode streams' length sets how long its windows last
    shown = ("stall_max_ms", "stall_p99_ms", "decode_gap_p50_ms", "stall_ratio", "decode_tokens_per_chunk", "long_ttft_mean_ms", "long_ttft_max_ms", "decode_perseq_tps")
    params = ("decode_streams", "decode_gen", "long_prompts", "long_ptok", "long_every_s", "ptok", "gen")
    plots = (Plot("decode stall distribution", "workload_stalls.png", stall_distribution, "rows"),)

    def check(self, w, label: str, key: str) -> None:
        if w.long_every_s < 0:
            raise ConfigError(label, f"{key}.long_every_s", "must not be negative")

    def sized(self, gpu: bool, slot: int, par: int, s) -> dict:
        streams = max(1, min(4 if gpu else 2, par - 1))
        gen, ptok = min(s.gen, 64 if gpu else 32), min(s.ptok, 64)
        return {"decode_streams": streams, "long_prompts": max(1, min(2, par - streams)), "gen": gen, "ptok": ptok,
                "decode_gen": max(32, min(256 if gpu else 384, slot - ptok)), "long_ptok": max(32, min(1024 if gpu else 320, slot - gen)),
                "long_every_s": 1.0 if gpu else 0.5}  # fmt: skip

    def points(self, wl) -> list[tuple[float, str]]:
        c = wl.cfg
        return [(c.decode_streams, f"{c.decode_streams} streams + {c.long_prompts} x {c.long_ptok}-token prompts")]

    def concurrency(self, wl) -> int:
        return wl.cfg.decode_streams + wl.cfg.long_prompts

    def need(self, wl) -> int:
        return max(wl.ptok + wl.cfg.decode_gen, wl.cfg.long_ptok + wl.gen)

    def paced(self, records, decode):
        return decode

    def run(self, arm, wl):
        c, t = wl.cfg, arm.target
        ((key, label),) = self.points(wl)
        decode_specs = asyncio.run(token_prompts(t, c.decode_streams, wl.ptok, c.decode_gen))
        long_specs = asyncio.run(token_prompts(t, c.long_prompts, c.long_ptok, wl.gen))
        arm.fits(decode_specs + long_specs, f"{arm.engine} {wl.name}")
        arm.status(f"{wl.name}: {c.decode_streams} decode streams, then {c.long_prompts} long prompts every {c.long_every_s:g} s")
        before, _ = arm.scrape()
        decode, long = asyncio.run(under_decode(t, decode_specs, long_specs, c.long_every_s, arm.timeout))
        after, text = arm.scrape()
        yield Measured(key, label, decode + long, before, after, text, decode=decode, long=long,
                       extra={"decode_streams": c.decode_streams, "decode_gen": c.decode_gen, "long_prompts": c.long_prompts, "long_ptok": c.long_ptok, "long_every_s": c.long_every_s})  # fmt: skip

    def judge(self, row: dict, sample, cfg) -> list[str]:
        """Each long prompt's admission, the stall gaps, the undisturbed gaps' quantiles, and a
        note when the streams came too coarsely for their gaps to time decode steps."""
        problems = []
        try:
            row["long"] = workload_metrics.per_long(sample)
        except workload_metrics.NoValue as e:
            row["long"] = []
            problems.append(f"no stall measured: {e}")
        try:
            row["stall_gaps_ms"] = [round(g, 3) for g in workload_metrics.stall_gaps(sample)]
        except workload_metrics.NoValue:
            row["stall_gaps_ms"] = []
        for p in row["long"]:
            p.pop("gaps")
            if p.get("why"):
                problems.append(f"long prompt {p['index']}: {p['why']}")
        try:
            gaps = workload_metrics.baseline_gaps(sample)
            row["decode_gap_quantiles_ms"] = {f"p{q}": round(workload_metrics.percentile(gaps, q), 3) for q in (50, 90, 99, 100)}
        except workload_metrics.NoValue:
            row["decode_gap_quantiles_ms"] = None
        per_chunk = row.get("decode_tokens_per_chunk")
        if per_chunk is not None and per_chunk > workload_metrics.COARSE_TOKENS_PER_CHUNK:
            row["coarse_note"] = (f"the decode streams arrived {per_chunk:.1f} tokens per chunk: their gaps time the server's flushes, not decode steps, "
                                  "so this engine's stall figures compare only with an engine streaming as coarsely")  # fmt: skip
        return problems

    def tables(self, summary: dict, fmt) -> list[dict]:
        rows = []
        for r in summary.get("rows") or []:
            for p in r.get("long") or []:
                rows.append([r["engine"], r.get("repeat"), p.get("index"), fmt(p.get("ttft_ms")), p.get("streams_running", "-"), fmt(p.get("stall_max_ms")), fmt(p.get("stall_p99_ms")), p.get("why") or ""])
        return [{"title": "Each long prompt's admission", "head": ["engine", "repeat", "long prompt", "TTFT ms", "streams running", "stall max ms", "stall p99 ms", "note"], "rows": rows}]


KIND = PrefillUnderDecode()
