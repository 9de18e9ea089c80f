"""`parity bench --engines A,B`: the engine-level reference A/B (issue 23).

llama-batched-bench is the low-noise static number next to serving: no HTTP, no
scheduler, one process per run.  Blocks as in a serving A/B: each block runs the
tool once per arm, back to back (the arms' order rotated per block, ABBA by
default), with the same npp/ntg/npl; per arm x point (PP x TG x B) and metric
(S_TG = the users' decode_agg for batched-bench, S_PP, S) the per-block values,
each arm's median and CV, and the paired statistics B/A over the blocks
(parity.stats.paired) with the users' rule (parity.stats.compare_samples)
beside.  --until-ci adds blocks until every S_TG half-width is narrow enough
(parity.stats.adaptive.stop).  One arm with --repeat N gives the CV per point
(the noise floor) without pairing; --aa measures one build as two arms
(stock, stock#2), the A/A that shows what "no difference" looks like.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from parity import session
from parity.context import Run
from parity.engines import with_binaries
from parity.engines.bound import Engine, bind_all
from parity.errors import UsageError
from parity.options import check as check_options
from parity.results import write_bench
from parity.traces import summary as traces
from parity.stats import adaptive
from parity.stats.budget import StatsDefaults, resolve_budget
from parity.bench.batched_bench import argv, parse_header, run_complete, split_kv_problem
from parity.bench.table import HEADLINE
from parity.engines.envpolicy import check_bench_env
from parity.options import positive_int
from parity.stats import Rule, compare_samples, describe
from parity.stats.blocks import block_order as names_in_order, run_blocks as loop
from parity.stats.paired import by_sample

METRICS = ["s_tg", "s_pp", "s"]  # all throughputs: higher is better
POINT = ("pp", "tg", "b")
AA_SUFFIX = "#2"
ORDERS = ("abba", "abab")


@dataclass
class Arm:
    name: str  # as it appears in rows and logs (stock, stock#2)
    engine: str  # the profile's engine (its build and env)


# `parity bench --engines` asks with the same request as `parity bench` (engines resolved)
from parity.bench.request import BenchRequest as ABRequest  # noqa: E402


def arms_for(engines: list[str], aa: bool = False) -> list[Arm]:
    """The arms in the order given.  --aa: one engine measured as two arms (e, e#2)."""
    if aa:
        if len(set(engines)) != 1:
            raise UsageError(f"--aa measures one engine as two arms: give one engine (got {', '.join(engines) or 'none'})")
        e = engines[0]
        return [Arm(e, e), Arm(e + AA_SUFFIX, e)]
    if len(set(engines)) != len(engines):
        raise UsageError(f"--engines: an engine is listed twice ({', '.join(engines)}); for an A/A of one build use --aa --engines {engines[0]}")
    return [Arm(e, e) for e in engines]


def reference_arm(arms: list[Arm], reference_engine: str | None, aa: bool = False) -> str | None:
    """A: serving.reference_engine when it is among the arms, else the last one (snapshot's rule);
    an A/A's reference is its first arm.  One arm: none."""
    if len(arms) < 2:
        return None
    if aa:
        return arms[0].name
    names = [a.name for a in arms]
    return reference_engine if reference_engine in names else names[-1]


def block_order(arms: list[Arm], block: int, order: str = "abba") -> list[Arm]:
    """The arms of block `block` in run order (parity.stats.blocks.block_order: abba rotates
    them by the block, A B, B A, ...: cancels linear drift; abab keeps one order)."""

    if order not in ORDERS:
        raise UsageError(f"--order must be {' or '.join(ORDERS)}, got {order!r}")
    by_name = {a.name: a for a in arms}
    return [by_name[n] for n in names_in_order([a.name for a in arms], block, order)]


def point_of(r: dict) -> tuple:
    return tuple(r[k] for k in POINT)


def label(pt: tuple) -> str:
    return f"PP={pt[0]} TG={pt[1]} B={pt[2]}"


def paired_table(rows: list[dict], reference: str | None, threshold_pct: float = 2.0, confidence: float = 0.95, rule=None) -> list[dict]:
    """Per arm (other than the reference) x point x metric: parity.stats.paired.by_sample over the
    blocks, plus the users' rule (compare_samples on the same paired blocks) beside."""

    if not reference:
        return []
    rule = rule or Rule()
    out = []
    for pp, tg in sorted({(r["pp"], r["tg"]) for r in rows}):
        group = [r for r in rows if (r["pp"], r["tg"]) == (pp, tg)]
        samples = [(r["engine"], r["b"], r["repeat"], r) for r in group]
        for p in by_sample(samples, reference, METRICS, lambda m: "higher", threshold_pct, confidence, key="b"):
            cell = lambda e: {r["repeat"]: r[p["metric"]] for r in group if r["engine"] == e and r["b"] == p["b"]}  # noqa: E731
            users = compare_samples(cell(reference), cell(p["engine"]), rule, "higher", paired=True)
            p = {"pp": pp, "tg": tg, **p, "users_rule": {k: getattr(users, k) for k in ("verdict", "delta_pct", "threshold_pct", "stdev_pct", "consistent", "reason")}}
            out.append(p)
    return out


def half_widths(paired_rows: list[dict]) -> dict:
    """{'<arm> PP=.. TG=.. B=..': stop half-width % of S_TG} for adaptive.stop."""
    return {f"{p['engine']} {label((p['pp'], p['tg'], p['b']))}": p["stop_half_width_pct"] for p in paired_rows if p["metric"] == HEADLINE}


def per_arm(rows: list[dict], arms: list[Arm]) -> list[dict]:
    """Per arm x point: median and CV % of every metric over the blocks (the noise figure)."""

    out = []
    for a in arms:
        mine = [r for r in rows if r["engine"] == a.name]
        for pt in sorted({point_of(r) for r in mine}):
            vals = [r for r in mine if point_of(r) == pt]
            d = {"engine": a.name, "build": a.engine, **dict(zip(POINT, pt)), "blocks": len(vals)}
            for m in METRICS:
                s = describe([r[m] for r in vals])
                d[m] = {"median": s.median, "cv_pct": None if s.cv_pct is None else round(s.cv_pct, 3), "min": s.min, "max": s.max, "values": [r[m] for r in vals]}
            out.append(d)
    return out


def run_blocks(arms: list[Arm], run_one, budget: adaptive.Budget, order: str = "abba", reference: str | None = None,
               threshold_pct: float = 2.0, confidence: float = 0.95, clock=time.monotonic, on_block=None) -> dict:
    """The block loop (parity.stats.blocks.run_blocks, the snapshot's too), pure but for
    run_one(arm, block) -> the tool's table rows (parse()).  Every block runs each arm once
    in block_order; after each block the stop rule decides (with >= 2 arms on S_TG's paired
    half-widths at every point; one arm: a fixed count).
    Returns {rows, blocks, order (per block), stop: {rule, why, blocks, elapsed_s}}."""

    rows: list[dict] = []
    orders: list[list[str]] = []

    def run_block(block: int) -> None:
        seq = block_order(arms, block, order)
        orders.append([a.name for a in seq])
        for slot, a in enumerate(seq):
            for r in run_one(a, block):
                rows.append({"engine": a.name, "build": a.engine, "repeat": block, "slot": slot, **r})

    def widths() -> dict:
        return half_widths(paired_table(rows, reference, threshold_pct, confidence)) if reference else {}

    def report(block, counted, hw, decision) -> None:
        if on_block:
            on_block(counted, hw)

    rule, why, blocks, elapsed = loop(budget, run_block, widths, report, clock)
    return {"rows": rows, "blocks": blocks, "order": orders, "stop": {"rule": rule, "why": why, "blocks": blocks, "elapsed_s": round(elapsed, 3), "budget": budget.describe(), "half_widths": widths()}}


def budget_for(req: ABRequest, stats_cfg, n_arms: int) -> adaptive.Budget:
    """--repeat N: N blocks (with --until-ci: at least N).  --until-ci / --max-repeats / --budget-s
    default to the profile's stats.until_ci_pct (or its s_tg target) / max_repeats / budget_s where it
    has them (an A/B without --repeat only)."""
    check_options(repeat=req.repeat)
    return resolve_budget(
        req.until_ci, req.max_repeats, req.budget_s, req.repeat or adaptive.Budget.min_blocks,
        StatsDefaults.of(stats_cfg), watched=(HEADLINE,), one=True, use_defaults=req.repeat is None and n_arms >= 2,
        unwatched=f"--until-ci: {{metric}} is not what llama-batched-bench's stop rule watches ({HEADLINE})",
        too_few="--repeat {lo} (the minimum with --until-ci) exceeds --max-repeats {hi}",
        refusals=["--until-ci needs two arms (an A/B, or --aa): one engine has no paired interval; use --repeat N "
                  "for its CV"] if n_arms < 2 else [])


@dataclass
class ABPlan:
    """The A/B as checked (every check before a run dir, a build or the lock): its arms, their order, the stop rule, the shape."""

    arms: list[Arm]
    engines: list[str]
    order: str
    budget: adaptive.Budget
    npp: list[int]
    ntg: list[int]
    npl: list[int]
    envs: dict[str, dict]
    model: str
    reference: str | None
    bound: dict[str, Engine] = field(default_factory=dict)  # engines, resolved once
    aa: bool = False
    settings: Any = None  # serving.bench (config.BenchConfig): the tool's timeout, retries, flags
    stats: Any = None  # config.StatsConfig: threshold, confidence, the users' rule


def plan_ab(profile, req: ABRequest) -> ABPlan:
    """Every check of an A/B's request, touching nothing: arms, order, stop rule, shape, env
    policy, model.  The dry run and the real run both start here."""
    s, st = profile.serving, profile.stats
    b = s.bench
    arms = arms_for(list(req.engines), req.aa)
    for a in arms:
        if a.engine not in with_binaries(profile, [a.engine]):
            raise UsageError(f"engine {a.engine} is {profile.engine(a.engine).kind}: llama-batched-bench needs an engine with llama.cpp binaries")
    check_options(order=req.order)
    order = req.order or "abba"
    if order not in ORDERS:
        raise UsageError(f"--order {order}: blocks of llama-batched-bench run {' or '.join(ORDERS)} (aabb has no blocks)")
    budget = budget_for(req, st, len(arms))
    npp, ntg, npl = req.npp or b.npp, req.ntg or b.ntg, req.npl or b.npl
    for name, vals in (("--npp", npp), ("--ntg", ntg), ("--npl", npl)):
        if not vals or not all(map(positive_int, vals)):
            raise UsageError(f"{name}: expected positive integers, got {vals!r}")
    if problem := split_kv_problem(npp, ntg, npl, b):
        raise UsageError(problem)
    engines = list(dict.fromkeys(a.engine for a in arms))
    bound = bind_all(profile, engines)
    envs = {e: bound[e].env() for e in engines}
    for e in engines:
        check_bench_env(envs[e], profile.policy, req.allow_env)
    model = req.model or s.model
    session.check_model(profile, model)
    return ABPlan(arms, engines, order, budget, npp, ntg, npl, envs, model, reference_arm(arms, s.reference_engine, req.aa), bound, req.aa, b, st)


def run_ab(run: Run, p: ABPlan, model_file: str, locked) -> dict:
    """Blocks of llama-batched-bench over the arms under one lock (locked: session.measuring of
    p.engines; the caller prepared the builds and model_file before it); bench.json + bench_ab.tsv."""
    b, st = p.settings, p.stats
    arms, order, budget, npp, ntg, npl, engines, envs, model = p.arms, p.order, p.budget, p.npp, p.ntg, p.npl, p.engines, p.envs, p.model
    cmds = {e: argv(p.bound[e].tool_path("llama-batched-bench", run.runner, run.out), model_file, npp, ntg, npl, b) for e in engines}
    reference = p.reference
    threshold, confidence = st.min_delta_pct, st.confidence
    headers: dict = {}
    retried: list[str] = []

    def run_one(a: Arm, block: int) -> list[dict]:
        def log(attempt, res):
            run.dir.write_text(f"bench-{a.name}-b{block}{f'-retry{attempt}' if attempt else ''}.log", res.stdout + "\n" + res.stderr)

        res, rows, again = run_complete(run.runner, cmds[a.engine], envs[a.engine], b, npp, ntg, npl, log, run.out.warn)
        headers.setdefault(a.name, parse_header(res.stdout))
        retried.extend(f"{a.name} block {block}: {r}" for r in again)
        return rows

    def on_block(k, hw):
        wide = ", ".join(f"{lbl} +-{v:.2f}%" if v is not None else f"{lbl} n/a" for lbl, v in sorted(hw.items()))
        run.out.info(f"[bench] {k} block(s) done" + (f"; S_TG stop half-widths: {wide}" if wide else ""))

    run.out.info(f"[bench] arms {', '.join(a.name for a in arms)} (reference {reference or 'none'}), order {order}; {budget.describe()}")
    with locked:
        res = run_blocks(arms, run_one, budget, order, reference, threshold, confidence, on_block=on_block)
    paired = paired_table(res["rows"], reference, threshold, confidence, Rule.from_config(st))
    doc = {
        "kind": "bench", "mode": "ab" if reference else "repeat", "engine": reference or arms[0].name,
        "arms": [{"name": a.name, "engine": a.engine} for a in arms], "engines": [a.name for a in arms], "reference": reference, "aa": p.aa,
        "model": model, "npp": npp, "ntg": ntg, "npl": npl, "order_rule": order, "order": res["order"], "blocks": res["blocks"],
        "commands": cmds, "command": cmds[arms[0].engine], "env": envs, "header": headers, "retried": retried,
        "metrics": METRICS, "headline": HEADLINE, "threshold_pct": threshold, "confidence": confidence,
        "rows": res["rows"], "per_engine": per_arm(res["rows"], arms), "paired": paired, "stop": res["stop"],
    }  # fmt: skip
    if found := traces.for_bench(run.dir.path, [a.name for a in arms], {a.name: envs[a.engine] for a in arms}):
        doc["traces"] = found  # the trace envs the arms' env turns on, and the series' counters (parity.traces)
    write_bench(run.dir, doc)
    run.dir.write_text("bench_ab.tsv", tsv(doc))
    return doc


TSV_COLS = ["kind", "engine", "reference", "build", "repeat", "slot", "pp", "tg", "b", "metric", "value", "median", "cv_pct", "ratio", "low", "high", "n_blocks", "outcome", "users_verdict"]


def tsv(doc: dict) -> str:
    """One table: kind=row (a block's value), kind=arm (median, CV), kind=paired (B/A, interval, outcome)."""

    def line(**kw):
        return "\t".join("" if kw.get(c) is None else str(kw.get(c)) for c in TSV_COLS)

    out = ["\t".join(TSV_COLS)]
    for r in doc["rows"]:
        for m in METRICS:
            out.append(line(kind="row", engine=r["engine"], build=r["build"], repeat=r["repeat"], slot=r["slot"], pp=r["pp"], tg=r["tg"], b=r["b"], metric=m, value=r[m]))
    for a in doc["per_engine"]:
        for m in METRICS:
            out.append(line(kind="arm", engine=a["engine"], build=a["build"], pp=a["pp"], tg=a["tg"], b=a["b"], metric=m, median=a[m]["median"], cv_pct=a[m]["cv_pct"], n_blocks=a["blocks"]))
    for p in doc["paired"]:
        out.append(line(kind="paired", engine=p["engine"], reference=p["reference"], pp=p["pp"], tg=p["tg"], b=p["b"], metric=p["metric"], ratio=p["ratio"], low=p["low"], high=p["high"],
                        n_blocks=p["n_blocks"], outcome=p["outcome"], users_verdict=p["users_rule"]["verdict"]))  # fmt: skip
    return "\n".join(out) + "\n"


def campaign_options(options: dict) -> ABRequest:
    """A campaign bench step's options -> ABRequest (engines: a list or 'A,B')."""
    eng = options.get("engines")
    engines = [x.strip() for x in eng.split(",") if x.strip()] if isinstance(eng, str) else list(eng or [])
    return ABRequest(engines=engines, aa=bool(options.get("aa", False)), repeat=options.get("repeat"), until_ci=options.get("until_ci"), max_repeats=options.get("max_repeats"),
                     budget_s=options.get("budget_s"), order=options.get("order"), model=options.get("model"), npp=options.get("npp"), ntg=options.get("ntg"), npl=options.get("npl"),
                     allow_env=list(options.get("allow_env") or []))  # fmt: skip
