"""`parity ab`: one lever, two arms, one session, one verdict.

Order of work: derive the arms (arms.py) and check the lever map (a closed lever stops here
unless --reopen); build both arms BEFORE the GPU lock; under the lock: hardware.txt, gate
both arms (gates.py), measure both in paired blocks (llama-batched-bench by default,
the serving sweep with --serving), gate both again; decide; write summary.json, the phase
report (report.py) and the lever map row (map.py).

Verdict (decide()), on the headline metric (S_TG for batched-bench, the first of
stats.metrics for serving) at every point, B/A paired over the blocks:
- NO-GO when a gate is red (bit-exact lever: an md5 differs or a run failed; lossy: out of
  the KL band), whatever the numbers, or when any point regressed;
- GO when a point improved and none regressed;
- FLAT only when every point is equivalent (the whole interval inside +-stats.min_delta_pct);
- INCONCLUSIVE otherwise: the interval cannot tell noise from a change, never called FLAT;
- NOT ENGAGED, whatever the numbers (a red gate aside), when arm B shows no sign of the lever
  (engagement.py: its env name in no file of the build stops the A/B before the lock; an asked
  --marker absent from arm B's logs after it).
Exit: 0 with a verdict, 3 when a gate is red (the measurement is still written), 8 NOT ENGAGED."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from parity import session
from parity.engines import kind_of
from parity.errors import UsageError
from parity.options import check as check_options
from parity.artifacts import slugify
from parity.bench.ab import ABPlan, budget_for, plan_ab, run_ab
from parity.bench.batched_bench import argv
from parity.bench.request import BenchRequest
from parity.context import Run, run_session
from parity.llamacpp import patches
from parity.llamacpp.build import plan
from parity.engines.bound import bind, bind_all
from parity.gpu.hardware import inventory
from parity.gpu.lock import effective_dir, preflight
from parity.levers import arms as armsmod, engagement, gates as gatesmod, map as levermap
from parity.levers.map import describe
from parity.levers.report import write_report
from parity.optime import measure as opmeasure, plan as opplan, stats as opstats
from parity.optime.table import op_lines
from parity.results import plain
from parity.gates.base import GateInputs
from parity.gates.prepost import binary_gates
from parity.serving.plan import SnapshotPlan
from parity.serving.snapshot import SnapshotRequest, check_env, make_plan, sweep_all, write_summary as snapshot_summary
from parity.stats import Rule, family
from parity.results import write_summary

GO, NO_GO, FLAT, INCONCLUSIVE = "GO", "NO-GO", "FLAT", "INCONCLUSIVE"
BENCH_HEADLINE = "s_tg"


@dataclass
class ABRequest:
    """What `parity ab` asks for."""

    engine: str | None = None  # the base engine (arm A); None: gates.engine, else the first llama engine
    env: list[str] = field(default_factory=list)  # NAME=VALUE: runtime lever
    server_args: list[str] = field(default_factory=list)  # "--flag value": runtime lever on the server's arguments (with serving)
    series_without: list[str] = field(default_factory=list)  # build lever
    series_until: str | None = None
    series: str | None = None
    pin: str | None = None  # build lever: arm B at another llama.cpp commit
    repo: str | None = None
    name: str | None = None
    reopen: str | None = None
    lossy: bool = False
    serving: bool = False
    model: str | None = None
    npl: list[int] | None = None
    npp: list[int] | None = None
    ntg: list[int] | None = None
    repeat: int | None = None
    until_ci: float | str | None = None  # PCT, or METRIC=PCT,... (serving) / s_tg=PCT
    max_repeats: int | None = None
    budget_s: float | None = None
    order: str | None = None
    gate_models: list[str] | None = None  # None: gates.models
    gate_paths: list[str] | None = None  # None: gates.paths, else the engine's paths
    post_gates: bool = True
    map: str | None = None  # None: levers.map, else <artifacts>/lever_map.yaml
    dry_run: bool = False
    aa: bool = False  # the arms are identical on purpose (an A/A of this setup)
    markers: list[str] = field(default_factory=list)  # --marker REGEX: a line arm B's logs must hold, else NOT ENGAGED
    ops: list[str] | str | None = None  # test-backend-ops perf of these ops (parity.optime) instead of batched-bench
    ops_backend: str | None = None  # None: gates.op_backend
    ops_params: str | None = None  # test-backend-ops -p REGEX
    metric: str | None = None  # --serving: the metric the verdict reads (None: stats.metrics[0]; a TTFT lever: ttft_mean_ms)


def base_engine(profile, engine: str | None) -> str:
    if engine:
        profile.engine(engine)
        return engine
    cands = [profile.gates.engine] if profile.gates.engine else []
    cands += [n for n in profile.engines if kind_of(profile, n).variants]
    if not cands:
        raise UsageError(f"profile {profile.name} has no llama engine to take as arm A (--engine)")
    return cands[0]


def gate_plan(profile, arm: str, req: ABRequest) -> tuple[list[str], list[str | None]]:
    g = profile.gates
    models = req.gate_models or g.models or [req.model or profile.serving.model]
    models = [m for m in models if m]
    if not models:
        raise UsageError("no model to gate (gates.models, --gate-models or serving.model)")
    for m in models:
        profile.model(m)
    e = profile.engine(arm)
    paths = req.gate_paths or [p for p in g.paths if not e.paths or p in e.paths] or list(e.paths) or [None]
    for p in paths:
        if p is not None and e.paths and p not in e.paths:
            raise UsageError(f"--gate-paths: engine {arm} has no path {p!r} (paths: {', '.join(e.paths)})")
    return models, paths


def context_facts(profile, arm_a: str, runner) -> dict:
    """hardware class (this machine's), pin and series digest of arm A: the map's identity of a row."""

    facts = {"hardware_class": inventory(runner)["hardware_class"], "pin": None, "series_digest": None}
    eng = bind(profile, arm_a)
    try:
        p = plan(eng)
        facts["pin"] = p.source.info.get("pin") or p.source.identity
        facts["series_digest"] = patches.digest_of(p.series) if p.series_dir else None
    except UsageError:
        e = eng.section
        facts["pin"] = f"prebuilt:{e.bin_dir}" if e.bin_dir else None
    return facts


def measure_cells(doc: dict, serving: bool, headline: str) -> list[dict]:
    """The headline's paired rows B/A, one per point, in point order: {point, ratio, low, high, outcome, ...}."""
    if serving:
        rows = [p for p in doc.get("paired") or [] if p["metric"] == headline]
        rows.sort(key=lambda p: p.get("n") or 0)
        return [{**p, "point": f"N={p.get('n')}"} for p in rows]
    rows = [p for p in doc.get("paired") or [] if p["metric"] == BENCH_HEADLINE]
    rows.sort(key=lambda p: (p["pp"], p["tg"], p["b"]))
    return [{**p, "point": f"PP={p['pp']} TG={p['tg']} B={p['b']}"} for p in rows]


def expected_points(doc: dict, serving: bool) -> list[str]:
    """Every point either arm measured (and, serving, every planned N): each needs a B/A."""
    rows = [r for r in doc.get("rows") or [] if isinstance(r, dict)]
    if serving:
        return [f"N={n}" for n in sorted({r.get("n") for r in rows} | set((doc.get("shape") or {}).get("npl") or []), key=str)]
    return [f"PP={p} TG={t} B={b}" for p, t, b in sorted({(r.get("pp"), r.get("tg"), r.get("b")) for r in rows}, key=str)]


def holes(cells: list[dict], expected: list[str], metric: str) -> list[str]:
    """The points without a B/A of metric, each named (a missing number is never FLAT or GO)."""
    if not cells and not expected:
        return [f"no {metric} B/A at any point: nothing was measured (zero rows, zero blocks)"]
    have = {c["point"] for c in cells}
    out = [f"{c['point']}: no {metric} B/A ({c.get('reason') or 'no block with both arms'})" for c in cells if c.get("ratio") is None]
    return out + [f"{p}: no {metric} B/A (B or A has no valid row there)" for p in expected if p not in have]


def decide(gate: dict | None, cells: list[dict], metric: str, expected: list[str] | None = None) -> dict:
    """GO / NO-GO / FLAT / INCONCLUSIVE with the key cell and why (pure: unit-tested).  A point of
    `expected` without a ratio makes it INCONCLUSIVE ("missing" names it) unless a gate or a point says NO-GO."""
    gaps = holes(cells, expected or [], metric)
    dec = _decide(gate, [c for c in cells if c.get("ratio") is not None] if gaps else cells, metric)
    if gaps and dec["verdict"] != NO_GO:
        dec = {**dec, "verdict": INCONCLUSIVE, "why": f"no verdict where a number is missing: {'; '.join(gaps)}"}
    return {**dec, "missing": gaps}


def verdict_metric(stats, req: ABRequest) -> str:
    """The serving verdict's metric: --metric, one of the paired headline metrics (stats.metrics),
    else the first of them (stats: the profile's stats section)."""
    if req.metric is None:
        return stats.metrics[0]
    if not req.serving:
        raise UsageError("--metric names the serving verdict's metric: use it with --serving")
    if req.metric not in stats.metrics:
        raise UsageError(f"--metric {req.metric}: not a paired headline metric of this profile "
                         f"(stats.metrics: {', '.join(stats.metrics)})")
    return req.metric


def _decide(gate: dict | None, cells: list[dict], metric: str) -> dict:

    def key_of(c: dict | None) -> dict:
        if not c or c.get("ratio") is None or c.get("low") is None:
            return {"metric": metric, "point": c.get("point") if c else None, "ratio": None, "low": None, "high": None, "n_blocks": c.get("n_blocks") if c else 0,
                    "text": f"{metric.upper()} B/A " + (f"{c['ratio']:.4f} " if c and c.get("ratio") is not None else "") + "(no interval: fewer than 2 blocks with both arms)" + (f" at {c['point']}" if c else "")}  # fmt: skip
        return {"metric": metric, "point": c["point"], "ratio": c["ratio"], "low": c["low"], "high": c["high"], "n_blocks": c.get("n_blocks"), "outcome": c.get("outcome"),
                "text": f"{metric.upper()} B/A {c['ratio']:.4f} [{c['low']:.4f}, {c['high']:.4f}] at {c['point']} ({c.get('n_blocks')} blocks)"}  # fmt: skip

    outs = [c.get("outcome") for c in cells]
    largest = cells[-1] if cells else None
    gain = lambda c: 1 / c["ratio"] if c.get("better") == "lower" else c["ratio"]  # noqa: E731  (time: lower is better)
    regressed = [c for c in cells if c.get("outcome") == "regressed"]
    improved = [c for c in cells if c.get("outcome") == "improved"]
    if gate is not None and not gate["ok"]:
        worst = min(regressed, key=gain) if regressed else largest
        return {"verdict": NO_GO, "why": f"gate red: {gate['problem']}", "key": key_of(worst)}
    if not cells:
        return {"verdict": INCONCLUSIVE, "why": "no paired measurement", "key": key_of(None)}
    if regressed:
        worst = min(regressed, key=gain)
        return {"verdict": NO_GO, "why": f"{metric} regressed at {', '.join(c['point'] for c in regressed)}", "key": key_of(worst)}
    if improved:
        best = max(improved, key=gain)
        return {"verdict": GO, "why": f"{metric} improved at {', '.join(c['point'] for c in improved)}, no point regressed", "key": key_of(best)}
    if all(o == "equivalent" for o in outs):
        return {"verdict": FLAT, "why": f"{metric} equivalent at every point (each interval inside +-threshold)", "key": key_of(largest)}
    undecided = [c for c in cells if c.get("outcome") != "equivalent"]
    need = [c.get("blocks_needed") for c in undecided if c.get("blocks_needed")]
    more = f"; about {max(need)} blocks would settle it at the observed spread" if need else ""
    return {"verdict": INCONCLUSIVE, "why": f"the interval at {', '.join(c['point'] for c in undecided)} holds 1 and reaches past the threshold: noise cannot be told from a change{more}",
            "key": key_of(undecided[-1])}  # fmt: skip


def prepare(profile, runner, out, artifacts_root, req: ABRequest) -> dict:
    """The A/B's plan, everything checked before a run dir exists: the lever, the arms (a copy of
    the profile with arm B, "profile"; both arms bound, "engines"), builds planned (unknown patch
    numbers fail here), gates, map row.  Raises UsageError."""

    check_options(repeat=req.repeat, until_ci=req.until_ci, max_repeats=req.max_repeats, budget_s=req.budget_s, order=req.order)
    if req.reopen is not None and not req.reopen.strip():
        raise UsageError("--reopen: give the reason this closed lever is measured again (it is recorded in the map)")
    engagement.check_markers(req.markers)
    lever = armsmod.make_lever(req.env, req.series_without, req.series_until, req.series, req.name, req.pin, req.repo, req.server_args)
    if lever.server_args and not req.serving:
        raise UsageError("--server-arg changes llama-server's arguments: measure it with --serving (llama-batched-bench starts no server)")
    verdict_metric(profile.stats, req)
    base = base_engine(profile, req.engine)
    armsmod.resolve_pin(profile, base, lever, runner, out)
    prof, arm_a, arm_b = armsmod.derive(profile, base, lever)
    if req.lossy:
        gatesmod.check_lossy(prof)
    if req.model:
        prof.model(req.model)
    builds = {arm: armsmod.check_build(prof, arm) for arm in (arm_a, arm_b)}
    same = armsmod.identical(prof, arm_a, arm_b, builds)
    if same and not req.aa:
        raise UsageError(f"{lever.derived_name()}: {same}; for an A/A on purpose (the noise floor of this setup) give --aa")
    if not same and req.aa:
        raise UsageError(f"--aa: the arms differ ({lever.changes(arm_a)}): an A/A needs a lever that leaves arm B equal to arm A")
    models, paths = gate_plan(prof, arm_a, req)
    measure_plan(prof, req, arm_a, arm_b, lever)  # the measurement's own checks (order, stop rule, shape), as the real run makes them
    facts = context_facts(prof, arm_a, runner)
    map_path = levermap.default_path(prof, artifacts_root) if not req.map else Path(os.path.expanduser(req.map))
    rows = levermap.load(map_path)
    levermap.check_writable(map_path)  # the row lands after the measurement: find out now, not then
    name = lever.label() if lever.name or not req.aa else f"{lever.label()} (A/A)"  # an A/A row never closes the real lever
    same = levermap.matching(rows, name, facts["hardware_class"], facts["pin"])
    closed = levermap.closing_row(rows, name, facts["hardware_class"], facts["pin"])
    return {"lever": lever, "name": name, "arm_a": arm_a, "arm_b": arm_b, "builds": builds, "gate_models": models, "gate_paths": paths, "facts": facts,
            "map_path": map_path, "map_rows": rows, "earlier": same[-1] if same else None, "closed": closed,
            "profile": prof, "engines": bind_all(prof, [arm_a, arm_b]), "stats": prof.stats,
            "policy": prof.policy}  # fmt: skip


def dry_run(runner, out, req: ABRequest, p: dict) -> dict:
    """What a real run would build, gate, measure, lock and check in the map; starts nothing."""

    prof, eng = p["profile"], p["engines"]
    a, b = p["arm_a"], p["arm_b"]
    bench = prof.serving.bench
    model = req.model or prof.serving.model
    mf = prof.model(model).path if model in prof.models else model
    npp, ntg, npl = req.npp or bench.npp, req.ntg or bench.ntg, req.npl or (prof.serving.npl if req.serving else bench.npl)
    if req.ops is not None:
        op = opplan.plan(prof, ops_request(prof, req, a, b, p["lever"]))
        bins = {e: eng[e].tool_path(opplan.TOOL, runner, out, dry=True) for e in op.engines}
        # the real run asks the built tools which output they offer
        fmt = opmeasure.probe_output(runner, bins, op.envs) if all(map(os.path.isfile, bins.values())) else None
        cmds = opplan.commands(op, bins, fmt or "console")
        measure = {"kind": "ops", "model": f"{op.backend} ({', '.join(op.ops)})", "ops": op.ops, "backend": op.backend,
                   "reference": a, "metric": opplan.HEADLINE, "output": opplan.describe(op, bins, fmt)["output"],
                   "commands": {f"{e} {o}": {"env": op.envs[e], "argv": v}
                                for e in op.engines for o, v in zip(op.ops, cmds[e])}}
    elif req.serving:
        measure = {"kind": "serving", "engines": [a, b], "model": model, "npl": npl, "reference": a, "metric": verdict_metric(prof.stats, req)}
    else:
        measure = {"kind": "batched-bench", "model": model, "npp": npp, "ntg": ntg, "npl": npl, "reference": a, "metric": BENCH_HEADLINE,
                   "commands": {arm: {"env": eng[arm].path_env(), "argv": argv(eng[arm].tool_path("llama-batched-bench", runner, out, dry=True), mf, npp, ntg, npl, bench)} for arm in (a, b)}}  # fmt: skip

    measure["blocks"] = blocks_plan(req, p, op if req.ops is not None else None).describe()
    closed = p["closed"]
    refusal = None
    if closed is not None:
        refusal = f"closed by {levermap_describe(closed)}" + (f"; --reopen {req.reopen!r} reopens it" if req.reopen else ": a real run stops here (exit 2) without --reopen REASON")
    return {
        "dry_run": True, "lever": p["name"], "kind": p["lever"].kind, "changes": p["lever"].changes(a), "arms": {"A": a, "B": b},
        "env": {"A": eng[a].path_env(), "B": eng[b].path_env()}, "builds": p["builds"],
        "gates": {"kind": "KL" if req.lossy else "BE", "models": p["gate_models"], "paths": p["gate_paths"], "phases": ["pre", "post"] if req.post_gates else ["pre"],
                  "kl": {"reference": prof.gates.kl.reference, "candidate": prof.gates.kl.candidate} if req.lossy else None},
        "measure": measure, "lock": {"dir": str(effective_dir(prof.lock)), "preflight": preflight(runner, prof.lock)},
        "map": {"path": str(p["map_path"]), "rows": len(p["map_rows"]), "identity": {"lever": p["name"], **p["facts"]}, "earlier": p["earlier"], "refusal": refusal},
        "engagement": engagement.planned(p["lever"].env, req.markers, p["lever"].builds()),
        "markers": req.markers,
    }  # fmt: skip


def blocks_plan(req: ABRequest, p: dict, op=None):
    """The stop rule the measurement will run, from its own validator: --until-ci names serving
    metrics with --serving (the snapshot's plan), s_tg for batched-bench."""
    if op is not None:
        return op.budget
    if req.serving:
        sreq, _ = measure_requests(p["profile"], req, p["arm_a"], p["arm_b"], p["lever"])
        return make_plan(p["profile"], sreq).budget
    return budget_for(BenchRequest(repeat=req.repeat, until_ci=req.until_ci, max_repeats=req.max_repeats, budget_s=req.budget_s), p["stats"], 2)


def levermap_describe(row: dict) -> str:
    return describe(row)


def run(ctx, req: ABRequest) -> dict:
    """`parity ab`: the plan (--dry-run) or a run directory with the gated, measured lever."""

    p = prepare(ctx.profile, ctx.runner, ctx.out, ctx.artifacts_root, req)
    ctx.profile = p["profile"]  # the copy with arm B: what the session builds, gates and measures
    if req.dry_run:
        return dry_run(ctx.runner, ctx.out, req, p)
    levermap.refuse_if_closed(p["map_rows"], p["name"], p["facts"]["hardware_class"], p["facts"]["pin"], req.reopen, p["map_path"])

    with run_session(ctx, "ab", f"ab-{slugify(p['name'])[:40]}"):
        a, b = p["arm_a"], p["arm_b"]
        ctx.out.info(f"[ab] lever {p['name']}: A = {a}, B = {b} ({p['lever'].changes(a)})")
        measured_model = [] if req.ops is not None else [req.model or ctx.profile.serving.model]  # --ops reads no model
        models = [*gatesmod.arm_models(ctx.profile, p["gate_models"], req.lossy), *measured_model]
        p["built"] = session.prepare(ctx, [a, b], models)  # builds and model files, before the shared GPU is taken
        # planned again with the model made: a serving plan's request limits read its file
        p["measurement"] = mp = measure_plan(ctx.profile, req, a, b, p["lever"])
        p["model_file"] = session.model_file(ctx.profile, mp.model) if isinstance(mp, ABPlan) else None
        measuring = lambda engines: session.measuring(ctx, engines)  # noqa: E731  (hardware.txt, builds.json, the lock)
        return measure_lever(ctx.as_run(), req, p, session.gate_inputs(ctx), measuring)


def measure_lever(run: Run, req: ABRequest, p: dict, inputs: GateInputs, measuring) -> dict:
    """The lever's session after its builds and models (p["built"]): the static engagement, then
    under the GPU lock (measuring(engines): session.measuring, hardware and builds.json) both arms
    gated, measured (p["measurement"]) and gated again; the verdict, report, summary and map row."""
    a, b = p["arm_a"], p["arm_b"]
    lever, built = p["lever"], p["built"]
    for arm in (a, b):
        bld = built[arm]
        run.out.info(f"[ab] {arm}: " + (f"prebuilt {bld['prebuilt']}" if "prebuilt" in bld else f"build {bld.get('key')} ({'cached' if bld.get('cached') else 'built now'})"))
    series_b = p["builds"][b].get("series_dir")
    static = engagement.static_evidence(lever.env, lever.server_args, lever.builds(), built, series_b, a, b, run.runner)
    run.out.info(f"[ab] engagement: {static['why']}")
    phases, measured, hw = [], {}, {"hardware_class": p["facts"]["hardware_class"]}
    if static["engaged"]:  # else nothing is gated or measured: the lever cannot have engaged
        with measuring([a, b]) as hw:
            phases.append(gatesmod.run_gates(inputs, run, a, b, p["gate_models"], p["gate_paths"], req.lossy, "pre-"))
            # kept if the measurement fails or is interrupted; replaced by the verdict below
            write_summary(run.dir, {"kind": "lever-ab", "lever": p["name"], "arms": {"A": a, "B": b}, "verdict": None, "state": "measuring",
                                    "gates": {**gatesmod.verdict(phases, req.lossy), "phases": phases}})  # fmt: skip
            measured = measure(run, req, p, inputs, measuring)
            if req.post_gates:
                phases.append(gatesmod.run_gates(inputs, run, a, b, p["gate_models"], p["gate_paths"], req.lossy,
                                                 "post-"))  # fmt: skip
    gate = gatesmod.verdict(phases, req.lossy) if phases else engagement.not_gated(gatesmod.lever_kind(req.lossy))
    ops = req.ops is not None  # --ops: the cases test-backend-ops perf timed are the points (parity.optime)
    metric = opplan.HEADLINE if ops else BENCH_HEADLINE if not req.serving else verdict_metric(p["stats"], req)
    # the verdict reads every point: Holm over them keeps an A/A's chance of any claim at alpha
    raw = [] if not measured else opstats.lever_cells(measured) if ops else measure_cells(measured, req.serving, metric)
    cells = family.adjust(raw, 1 - p["stats"].confidence)
    expected = opstats.expected_points(measured) if ops else expected_points(measured, req.serving)
    expected = expected if measured else []
    dec = decide(gate, cells, metric, expected)
    masks = tuple(str(built[arm].get("bin_dir") or built[arm].get("prebuilt") or "") for arm in (a, b))
    eng = engagement.judge(static, engagement.from_run(run.dir.path, a, b, req.markers, masks) if measured else None)
    dec = engagement.overrule(dec, eng, gate)
    if measured.get("invalid_points"):  # left out of the paired statistics (parity.serving.summary), said beside the verdict
        dec["why"] += f"; {len(measured['invalid_points'])} invalid serving point(s) left out, first: {measured['invalid_points'][0]}"
    facts = {**p["facts"], "hardware_class": hw["hardware_class"]}
    run_dir = str(run.dir.path)
    doc = {
        "kind": "lever-ab", "lever": p["name"], "lever_kind": lever.kind, "changes": lever.changes(a), "arms": {"A": a, "B": b},
        "engine": a, "env": lever.env, "series_without": lever.series_without, "series_until": lever.series_until, "series": lever.series,
        **facts, "builds": {arm: built[arm] for arm in (a, b)}, "verdict": dec["verdict"], "why": dec["why"], "key": dec["key"], "missing": dec["missing"],
        "gates": {**gate, "phases": [{k: v for k, v in ph.items()} for ph in phases]}, "lossy": req.lossy,
        "engagement": eng, "markers": req.markers,
        "measurement": {"kind": "ops" if ops else "serving" if req.serving else "batched-bench", "metric": metric,
                        "points": [_cell(c) for c in cells], **({"ops": op_lines(measured)} if ops else {}),
                        "family": {"method": family.METHOD, "line": family.family_line(cells, f"{metric} at every point")},
                        "blocks": measured.get("blocks"), "stop": measured.get("stop"), "order": measured.get("order"),
                        "file": "ops.json" if ops else "serving_summary.json" if req.serving else "bench.json",
                        "invalid_points": measured.get("invalid_points") or []},
        "reopen": req.reopen, "reopens": levermap.describe(p["closed"]) if p["closed"] else None, "map": str(p["map_path"]), "run_dir": run_dir,
        **({"traces": measured["traces"]} if measured.get("traces") else {}),  # the arms' trace envs read back (parity.traces)
    }  # fmt: skip
    doc["report"] = write_report(run.dir.path, doc, measured, req.serving)
    write_summary(run.dir, doc)
    row = {"lever": p["name"], "kind": lever.kind, "engine": a, "changes": doc["changes"], "hardware_class": facts["hardware_class"], "pin": facts["pin"],
           "series_digest": facts["series_digest"], "verdict": dec["verdict"], "key_number": dec["key"]["text"], "metric": metric, "point": dec["key"]["point"],
           "ratio": dec["key"]["ratio"], "low": dec["key"]["low"], "high": dec["key"]["high"], "gates": gate["summary"], "gate_kind": gate["kind"], "engaged": engagement.line(eng),
           "artifact": run_dir, "report": doc["report"], "date": levermap.today(), "reopen": req.reopen, "reopens": doc["reopens"]}  # fmt: skip
    levermap.append(p["map_path"], row, markdown=True)
    doc["map_markdown"] = str(levermap.markdown_path(p["map_path"]))
    write_summary(run.dir, doc)
    run.out.info(f"[ab] {dec['verdict']}: {dec['key']['text']}; {dec['why']}")
    return doc


def _cell(c: dict) -> dict:
    keep = ("point", "ratio", "low", "high", "outcome", "n_blocks", "ratios", "blocks", "half_width_pct", "blocks_needed", "reason", "threshold_pct", "family")
    return {k: c.get(k) for k in keep}


def allowed_env(policy, lever) -> list[str]:
    """The forbidden bench knobs the lever sets: its own env is the point of arm B, not a knob to refuse."""
    return [k for k in lever.env if k in policy.forbidden_bench_env]


def measure_requests(profile, req: ABRequest, a: str, b: str, lever):
    """(serving request, bench request) of the measurement, one of them None: what measure() runs."""
    allow = allowed_env(profile.policy, lever)
    if req.serving:
        return SnapshotRequest(npl=req.npl, engines=[a, b], model=req.model, repeat=req.repeat, order=req.order, gates=False, allow_env=allow,
                               until_ci=req.until_ci, max_repeats=req.max_repeats, budget_s=req.budget_s), None  # fmt: skip
    return None, BenchRequest(engines=[a, b], model=req.model, npp=req.npp, ntg=req.ntg, npl=req.npl, allow_env=allow, repeat=req.repeat, until_ci=req.until_ci,
                              max_repeats=req.max_repeats, budget_s=req.budget_s, order=req.order)  # fmt: skip


def measure_plan(profile, req: ABRequest, a: str, b: str, lever):
    """The measurement's plan, with every check it makes before anything runs: the op timing's
    (OpsPlan), the serving sweep's (SnapshotPlan) or the bench A/B's (ABPlan)."""
    if req.ops is not None:
        return opplan.plan(profile, ops_request(profile, req, a, b, lever))
    sreq, breq = measure_requests(profile, req, a, b, lever)
    if sreq is None:
        return plan_ab(profile, breq)
    plan = make_plan(profile, sreq)
    if plan.gpus:  # its arms' lock and host check are parity snapshot's (parity.serving.crossover)
        raise UsageError(f"parity ab --serving runs its arms one after another on one GPU; serving.gpus "
                         f"({','.join(map(str, plan.gpus))}) is for parity snapshot --gpus: set serving.gpus: [] "
                         "in the profile for the lever A/B")
    return plan


def measure(run: Run, req: ABRequest, p: dict, inputs: GateInputs, measuring) -> dict:
    """Both arms in paired blocks under the held lock (p["measurement"]): batched-bench
    (parity.bench.ab, reading p["model_file"]) or the serving sweep (parity.serving.snapshot, no
    gates of its own: the arms' gates are ours), or with --ops test-backend-ops perf per op
    (parity.optime: ops.json, ops.tsv)."""
    mp = p["measurement"]
    if isinstance(mp, opplan.OpsPlan):
        bins = {e: p["engines"][e].tool_path(opplan.TOOL, run.runner, run.out) for e in mp.engines}
        fmt, rule = opmeasure.probe_output(run.runner, bins, mp.envs), Rule.from_config(p["stats"])
        doc = opmeasure.measure(mp, bins, fmt, run.runner, run.dir, run.out.info, rule)
        run.dir.write_json("ops.json", plain(doc))
        run.dir.write_text("ops.tsv", opstats.tsv(doc))
        return doc
    if isinstance(mp, SnapshotPlan):
        check_env(mp, p["policy"], allowed_env(p["policy"], p["lever"]))
        with measuring(mp.engines):  # the sweep's own hardware.txt and builds.json, under the lock held
            arms = sweep_all(mp, run)
        doc = snapshot_summary(mp, run, arms, binary_gates(inputs, mp.engines, None))
        src = run.dir.file("summary.json")
        if src.exists():
            src.replace(run.dir.file("serving_summary.json"))  # summary.json is the lever's
        return doc
    return run_ab(run, mp, p["model_file"], measuring(mp.engines))


def ops_request(profile, req: ABRequest, a: str, b: str, lever) -> opplan.OpsRequest:
    """The op timing of the lever's arms: A then B, A the reference (UsageError for a batched-bench
    or serving option beside --ops)."""
    if req.serving:
        raise UsageError("--ops and --serving are two measurements: give one")
    if given := [f for f in ("npp", "ntg", "npl", "model") if getattr(req, f) is not None]:
        raise UsageError(f"--{given[0]} is llama-batched-bench's; --ops times test-backend-ops perf (no model)")
    allow = allowed_env(profile.policy, lever)
    return opplan.OpsRequest(req.ops, [a, b], a, False, req.ops_backend, req.ops_params, req.repeat, req.until_ci,
                             req.max_repeats, req.budget_s, req.order, allow)
