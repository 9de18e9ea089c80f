"""One probe: build a variant of the engine (cached per key; ccache makes a new prefix
incremental), then judge it against the good endpoint with the same gates and measurement
as a lever A/B: the greedy md5 of one path, test-backend-ops cases, or paired blocks of
llama-batched-bench with the verdict rule."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from parity import session
from parity.bisect.search import BAD, GOOD, UNDECIDED
from parity.errors import InfraError
from parity.bench.ab import Arm, block_order, paired_table
from parity.bench.batched_bench import argv, run_complete
from parity.engine.build import ensure_built
from parity.gates.checks import ERROR, FAIL, FLAKY, PASS
from parity.gates.common import path_env, resolve_model, save, tool
from parity.gates.md5 import greedy, md5_gate, run_problem
from parity.gates.oracle import op_gate
from parity.stats.paired import REGRESSED

TARGETS = {"md5": ["llama-completion"], "metric": ["llama-batched-bench"], "oracle": ["test-backend-ops"], "apply": [], "build": None}


@dataclass
class Judge:
    """How a probe is judged.  criterion: md5 | oracle | metric (apply/build: the build alone)."""

    criterion: str
    model: str | None = None
    path: str | None = None
    ops: list[str] = field(default_factory=list)
    backend: str | None = None
    metric: str = "s_tg"
    threshold_pct: float = 2.0
    blocks: int = 3  # blocks per probe before the first verdict
    max_blocks: int = 8  # an inconclusive probe gets blocks up to this, then it is undecided
    npp: list[int] | None = None
    ntg: list[int] | None = None
    npl: list[int] | None = None


def build(ctx, name: str, engine_cfg) -> dict:
    """Register the variant as engine `name` and build it: {key, cached, seconds} or {failed, seconds, error}."""

    ctx.profile.engines[name] = engine_cfg
    t0 = time.monotonic()
    try:
        r = ensure_built(ctx.profile, name, ctx.runner, ctx.out)
    except InfraError as e:
        return {"failed": True, "seconds": round(time.monotonic() - t0, 1), "error": str(e), "apply": getattr(e, "to_dict", lambda: None)()}
    return {"key": r.key, "cached": r.cached, "seconds": round(time.monotonic() - t0, 1), "tree_after": r.provenance.get("tree_after")}


class Reference:
    """The good endpoint's numbers every probe is compared with (its md5 / op results); the
    metric criterion measures the good endpoint again in every probe's blocks instead."""

    def __init__(self, ctx, engine: str, judge: Judge):
        self.ctx, self.engine, self.j = ctx, engine, judge
        self.md5 = None
        self.ops: dict[str, str] = {}
        if judge.criterion == "md5":
            self._md5()
        elif judge.criterion == "oracle":
            self.ops = {op: op_gate(ctx, op, judge.backend, engine, tag="reference-").status for op in judge.ops}

    def _md5(self) -> None:
        g = self.ctx.profile.gates
        _, model_file = resolve_model(self.ctx, self.j.model)
        run = greedy(self.ctx, self.engine, model_file, self.j.path, g.form, g.n_predict)
        if problem := run_problem(run, g.timeout_s):
            raise InfraError(f"the good endpoint cannot be gated: {problem}")
        self.md5 = run.md5
        save(self.ctx, f"gates/reference-md5-{self.j.model}-{self.j.path}.out", run.stdout)

    def result(self) -> str:
        if self.md5:
            return f"md5 {self.md5}"
        if self.ops:
            return ", ".join(f"{op} {s}" for op, s in self.ops.items())
        return "measured with every probe"


def judge(ctx, ref: Reference, name: str, tag: str) -> tuple[str, str, dict]:
    """(verdict, result in words, evidence) of the built variant `name`."""
    j = ref.j
    if j.criterion == "md5":
        c = md5_gate(ctx, j.model, j.path, engine=name, expect=ref.md5, tag=tag)
        ev = {"status": c.status, "expected": c.expected, "got": c.got, "detail": c.detail, "transcript": (c.data or {}).get("transcript")}
        if c.status == PASS:
            return GOOD, f"md5 {c.got} = reference", ev
        return BAD, f"md5 {c.got} != {c.expected}: {c.detail}" if c.got != "-" else f"{c.status}: {c.detail}", ev
    if j.criterion == "oracle":
        return _oracle(ctx, ref, name, tag)
    if j.criterion == "metric":
        return measure(ctx, ref.engine, name, j, tag)
    return GOOD, "built", {}


def _oracle(ctx, ref: Reference, name: str, tag: str) -> tuple[str, str, dict]:
    """Bad: a case fails (or passes only on a retry); an op the good endpoint could not run is not
    watched; one it passed that now errors is undecided."""

    checks = {op: op_gate(ctx, op, ref.j.backend, name, tag=tag) for op in ref.j.ops}
    ev = {op: {"status": c.status, "got": c.got, "detail": c.detail, "reference": ref.ops.get(op)} for op, c in checks.items()}
    bad = [op for op, c in checks.items() if c.status in (FAIL, FLAKY)]
    if bad:
        return BAD, "; ".join(f"{op} {checks[op].status} {checks[op].got}: {checks[op].detail}" for op in bad), ev
    unknown = [op for op, c in checks.items() if c.status == ERROR and ref.ops.get(op) == PASS]
    if unknown:
        return UNDECIDED, "; ".join(f"{op} error: {checks[op].detail}" for op in unknown), ev
    return GOOD, ", ".join(f"{op} {c.got}" for op, c in checks.items() if c.status == PASS) or "no op ran at both states", ev


def metric_verdict(points: list[dict], threshold_pct: float) -> str:
    """bad: regressed at any point; good: not slower than 1/(1 + t) at every point (the paired
    interval's low end); else undecided (more blocks)."""

    floor = 1 / (1 + threshold_pct / 100)
    if any(p["outcome"] == REGRESSED for p in points):
        return BAD
    if points and all(p.get("low") is not None and p["low"] >= floor for p in points):
        return GOOD
    return UNDECIDED


def measure(ctx, good: str, probe: str, j: Judge, tag: str) -> tuple[str, str, dict]:
    """Paired blocks (good, probe) of llama-batched-bench, the arms' order rotated per block (ABBA),
    probe/good per block on `metric` at every point (parity.stats.paired): regressed at any point
    (the interval below 1, the estimate beyond the threshold) = bad; at every point not slower
    than the threshold (the interval's low end >= 1/(1 + t): a non-inferiority claim, since a
    regression bisection does not ask whether a probe is faster) = good; else more blocks, up to
    max_blocks, then undecided."""

    b = ctx.profile.serving.bench
    npp, ntg, npl = j.npp or b.npp, j.ntg or b.ntg, j.npl or b.npl
    model_file = session.model_file(ctx, j.model or ctx.profile.serving.model)  # prepared with the reference, before the lock
    arms = [Arm("good", good), Arm("probe", probe)]
    cmds = {a.name: argv(tool(ctx, a.engine, "llama-batched-bench"), model_file, npp, ntg, npl, b) for a in arms}
    envs = {a.name: path_env(ctx, a.engine, j.path) for a in arms}
    rows: list[dict] = []
    verdict, points = UNDECIDED, []
    floor = 1 / (1 + j.threshold_pct / 100)  # not slower than the threshold
    with session.locked(ctx):  # the caller holds it: one hold per probe
        for block in range(j.max_blocks):
            for a in block_order(arms, block, "abba"):
                def log(attempt, res, a=a, block=block):
                    if ctx.run:
                        ctx.run.write_text(f"bench/{tag}{a.name}-b{block}{f'-retry{attempt}' if attempt else ''}.log", res.stdout + "\n" + res.stderr)

                _, got, _ = run_complete(ctx.runner, cmds[a.name], envs[a.name], b, npp, ntg, npl, log, ctx.out.warn)
                rows += [{"engine": a.name, "build": a.engine, "repeat": block, **r} for r in got]
            if block + 1 < max(2, j.blocks):
                continue
            points = [p for p in paired_table(rows, "good", j.threshold_pct, ctx.profile.stats.confidence) if p["metric"] == j.metric]
            verdict = metric_verdict(points, j.threshold_pct)
            if verdict != UNDECIDED:
                break
    words = "; ".join(f"B={p['b']} {j.metric.upper()} {p['ratio']:.3f} [{p['low']:.3f}, {p['high']:.3f}] " + ("regressed" if p["outcome"] == REGRESSED else f"not slower (low >= {floor:.3f})" if p["low"] >= floor else p["outcome"])
                      for p in points if p.get("low") is not None)  # fmt: skip
    n = rows[-1]["repeat"] + 1 if rows else 0
    result = f"{words} ({n} blocks, threshold {j.threshold_pct:g}%)" + ("" if verdict != UNDECIDED else f"; inconclusive after {j.max_blocks} blocks")
    ev = {"blocks": n, "threshold_pct": j.threshold_pct, "good_floor": round(floor, 6), "metric": j.metric, "paired": [{k: p.get(k) for k in ("pp", "tg", "b", "ratio", "low", "high", "outcome", "reason")} for p in points],
          "rows": rows, "commands": cmds, "env": envs}  # fmt: skip
    return verdict, result, ev

