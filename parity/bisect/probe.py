"""One probe: build a variant of the engine (cached per key; ccache makes a new prefix
incremental), then judge it against the good endpoint with the same gates and measurement
as a lever A/B: a gate kind of parity.gates.kinds.GATES (md5: the greedy md5 of one path;
oracle: test-backend-ops cases), or paired blocks of llama-batched-bench with the verdict rule."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from parity.bisect.search import BAD, GOOD, UNDECIDED
from parity.errors import InfraError
from parity.bench.ab import Arm, block_order, paired_table
from parity.bench.batched_bench import argv, run_complete
from parity.context import Run
from parity.llamacpp.build import ensure_built
from parity.engines.bound import Engine, bind
from parity.gates.base import GateInputs, Target
from parity.gates.checks import ERROR, FAIL, FLAKY, PASS, Check
from parity.gates.kinds import GATES
from parity.gates.prepost import GateSpec
from parity.stats.paired import REGRESSED

TARGETS = {"md5": ["llama-completion"], "metric": ["llama-batched-bench"], "oracle": ["test-backend-ops"], "apply": [], "build": None}
GATE_OF = {"md5": "md5", "oracle": "op"}  # a criterion judged by a gate kind (its checks, on one engine)


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


def build(profile, name: str, engine_cfg, runner, out) -> dict:
    """Register the variant as the profile's engine `name` and build it: {key, cached, seconds} or
    {failed, seconds, error}."""

    profile.engines[name] = engine_cfg
    t0 = time.monotonic()
    try:
        r = ensure_built(bind(profile, name), runner, out)
    except InfraError as e:
        return {"failed": True, "seconds": round(time.monotonic() - t0, 1), "error": str(e), "apply": getattr(e, "to_dict", lambda: None)()}
    return {"key": r.key, "cached": r.cached, "seconds": round(time.monotonic() - t0, 1), "tree_after": r.provenance.get("tree_after")}


def gate_checks(inputs: GateInputs, run: Run, j: Judge, engine: str, tag: str, expect: str | None = None,
                observe: bool = False) -> list[tuple[Target, Check]]:  # fmt: skip
    """The criterion's gate kind run on engine (bound in inputs): the judge's model and path (md5)
    or ops (oracle); observe: each check on its own terms, expecting nothing (the good endpoint's
    reference)."""
    kind = GATES[GATE_OF[j.criterion]]
    spec = GateSpec(models=[j.model] if j.model else [], paths=[j.path] if j.path else [], ops=list(j.ops), backend=j.backend, engine=engine, expect=expect)
    check = kind.observe if observe else kind.run
    return [(t, check(inputs, run, spec, t, tag)) for t in kind.expand(inputs, spec, engine)]


class Reference:
    """The good endpoint's numbers every probe is compared with (its md5 / op results); the
    metric criterion measures the good endpoint again in every probe's blocks instead, with what
    those read: the model file, serving.bench and stats.confidence."""

    def __init__(self, inputs: GateInputs, run: Run, engine: str, judge: Judge, model_file: str | None = None,
                 bench=None, confidence: float | None = None):  # fmt: skip
        self.run, self.engine, self.j = run, engine, judge
        self.model_file, self.bench, self.confidence = model_file, bench, confidence
        self.md5 = None
        self.ops: dict[str, str] = {}
        if judge.criterion not in GATE_OF:
            return
        checks = gate_checks(inputs, run, judge, engine, "reference-", observe=True)
        if judge.criterion == "md5":
            bad = [c for _, c in checks if c.status != PASS]
            if bad or not checks:
                raise InfraError(f"the good endpoint cannot be gated: {bad[0].detail if bad else 'no md5 check'}")
            self.md5 = checks[0][1].got
        else:
            self.ops = {t.op: c.status for t, c in checks}

    def result(self) -> str:
        if self.md5:
            return f"md5 {self.md5}"
        if self.ops:
            return ", ".join(f"{op} {s}" for op, s in self.ops.items())
        return "measured with every probe"


def judge(ref: Reference, inputs: GateInputs, probe: str, tag: str) -> tuple[str, str, dict]:
    """(verdict, result in words, evidence) of the built variant `probe` (inputs: the gate inputs
    with it bound)."""
    j = ref.j
    if j.criterion == "md5":
        ((_, c),) = gate_checks(inputs, ref.run, j, probe, tag, expect=ref.md5)
        ev = {"status": c.status, "expected": c.expected, "got": c.got, "detail": c.detail, "transcript": (c.data or {}).get("transcript")}
        if c.status == PASS:
            return GOOD, f"md5 {c.got} = reference", ev
        return BAD, f"md5 {c.got} != {c.expected}: {c.detail}" if c.got != "-" else f"{c.status}: {c.detail}", ev
    if j.criterion == "oracle":
        return _oracle(ref, inputs, probe, tag)
    if j.criterion == "metric":
        good, bad = inputs.engine(ref.engine), inputs.engine(probe)
        return measure(ref.run, good, bad, j, tag, ref.model_file, ref.bench, ref.confidence)
    return GOOD, "built", {}


def _oracle(ref: Reference, inputs: GateInputs, probe: str, tag: str) -> tuple[str, str, dict]:
    """Bad: a case fails (or passes only on a retry); an op the good endpoint could not run is not
    watched; one it passed that now errors is undecided."""

    checks = {t.op: c for t, c in gate_checks(inputs, ref.run, ref.j, probe, tag)}
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


def measure(run: Run, good: Engine, probe: Engine, j: Judge, tag: str, model_file: str, bench,
            confidence: float) -> tuple[str, str, dict]:  # fmt: skip
    """Paired blocks (good, probe) of llama-batched-bench, the arms' order rotated per block (ABBA),
    probe/good per block on `metric` at every point (parity.stats.paired): regressed at any point
    (the interval below 1, the estimate beyond the threshold) = bad; at every point not slower
    than the threshold (the interval's low end >= 1/(1 + t): a non-inferiority claim, since a
    regression bisection does not ask whether a probe is faster) = good; else more blocks, up to
    max_blocks, then undecided.  The caller holds the GPU lock (one hold per probe); model_file was
    made with the reference, before it; bench: serving.bench, confidence: stats.confidence."""

    b = bench
    npp, ntg, npl = j.npp or b.npp, j.ntg or b.ntg, j.npl or b.npl
    engines = {"good": good, "probe": probe}
    arms = [Arm(name, e.name) for name, e in engines.items()]
    cmds = {a.name: argv(engines[a.name].tool_path("llama-batched-bench", run.runner, run.out), model_file, npp, ntg, npl, b)
            for a in arms}  # fmt: skip
    envs = {a.name: engines[a.name].path_env(j.path) for a in arms}
    rows: list[dict] = []
    verdict, points = UNDECIDED, []
    floor = 1 / (1 + j.threshold_pct / 100)  # not slower than the threshold
    for block in range(j.max_blocks):
        for a in block_order(arms, block, "abba"):
            def log(attempt, res, a=a, block=block):
                run.dir.write_text(f"bench/{tag}{a.name}-b{block}{f'-retry{attempt}' if attempt else ''}.log", res.stdout + "\n" + res.stderr)

            _, got, _ = run_complete(run.runner, cmds[a.name], envs[a.name], b, npp, ntg, npl, log, run.out.warn)
            rows += [{"engine": a.name, "build": a.engine, "repeat": block, **r} for r in got]
        if block + 1 < max(2, j.blocks):
            continue
        points = [p for p in paired_table(rows, "good", j.threshold_pct, confidence) if p["metric"] == j.metric]
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

