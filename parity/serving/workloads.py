"""Workloads (`parity snapshot --workload NAME`): what the paged engine claims, measured by
parity's own load generator against any engine adapter, inside the snapshot's session
(same gates, lock, warmup, repeats and order, validity rules and summary).  Each arm runs
the workload's points instead of the closed N sweep; a point's row keeps "n" as its
numeric key (requests, rate or turn), a "point" label and the kind's own fields.  What each
kind sends and measures is its own file under parity/workloads/ (registered in WORKLOADS);
here: the workload resolved for a profile, the arm its runner drives, and the point's row."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Iterator

from parity.artifacts import slugify
from parity.decode import from_dict, replace
from parity.context import Run
from parity.engines.base import Launch
from parity.engines.server import External, died
from parity.errors import UsageError
from parity.metrics import prometheus as server_metrics, validity, workload as workload_metrics
from parity.loadgen.client import Target
from parity.metrics.serving import compute
from parity.results.model import PointRow
from parity.runners.base import Process
from parity.serving.plan import SnapshotPlan
from parity.serving.point import check_fits, client_side, records_json, scrape_parsed
from parity.telemetry import watch
from parity.telemetry.watch import Watch
from parity.workloads import WORKLOADS, WorkloadKind
from parity.workloads.base import Measured
from parity.workloads.calibration import basis
from parity.workloads.defaults import BUILTIN, builtin, sized
from parity.workloads.spec import WorkloadConfig, check_workload


@dataclass
class Workload:
    name: str
    cfg: WorkloadConfig
    gen: int
    ptok: int
    builtin: bool = False  # a kind run by its name, sized for the profile (parity.workloads.defaults)
    sized: tuple = ()  # the fields parity sized for the profile (not written in YAML or --workload-opt)

    @property
    def kind(self) -> str:
        return self.cfg.kind

    @property
    def kind_obj(self) -> WorkloadKind:
        return WORKLOADS[self.cfg.kind]

    def points(self) -> list[tuple[float, str]]:
        """(numeric key, label) of each point, in run order."""
        return self.kind_obj.points(self)

    def concurrency(self) -> int | None:
        """Requests in flight at once (None: open loop, as many as the schedule makes)."""
        return self.kind_obj.concurrency(self)

    def need(self) -> int:
        """The most tokens one request takes (prompt + generated); multi-turn: a lower bound
        (responses are tokenized again as text, which may take more tokens)."""
        return self.kind_obj.need(self)

    def describe(self) -> dict:
        return {**dataclasses.asdict(self.cfg), "name": self.name, "gen": self.gen, "ptok": self.ptok, "points": [label for _, label in self.points()]}


def resolve(profile, spec, s, npl=None, options: dict | None = None) -> Workload:
    """A workload by name (a built-in kind, parity.workloads.defaults, or
    serving.workloads.NAME) or inline (a campaign step's mapping, with an optional name);
    options: --workload-opt overrides."""

    options = options or {}
    made: dict = {}  # a built-in's: what parity sized (parity.workloads.calibration may raise it)

    if npl:
        raise UsageError("--npl does not apply to a workload run: its points are the workload's own (rates, turns, ...)")

    if isinstance(spec, dict):
        spec = dict(spec)
        name = str(spec.pop("name", None) or f"inline-{spec.get('kind', 'workload')}")
        cfg = from_dict(WorkloadConfig, spec, "campaign", "with.workload")
        check_workload(cfg, "campaign", "with.workload")
    elif isinstance(spec, str) and (spec in BUILTIN or spec in s.workloads):
        declared = s.workloads.get(spec)
        name = spec
        if spec in BUILTIN and (declared is None or hasattr(declared, "_given")):
            cfg = builtin(spec, profile, s, declared, options)
            given = {*getattr(declared, "_given", ()), *options}
            made = {"builtin": True, "sized": tuple(k for k in sized(spec, profile, s) if k not in given)}
        else:
            cfg = replace(declared, **options) if options else declared
    else:
        known = ", ".join(s.workloads) or "none declared"
        raise UsageError(f"--workload {spec}: no such workload in profile {profile.name} (serving.workloads: {known}; built in: {', '.join(BUILTIN)})")
    if options and isinstance(spec, str):
        check_workload(cfg, "--workload-opt", spec)
    return Workload(name, cfg, cfg.gen or s.gen, cfg.ptok or s.ptok, **made)


def attach(plan: SnapshotPlan, wl: Workload) -> None:
    """Make the plan run the workload's points; refuse what no engine can serve."""
    plan.workload = wl
    plan.npl = [k for k, _ in wl.points()]
    s = plan.shape
    width = wl.concurrency()
    for e in plan.engines:
        slots = plan.bound[e].queue_limit(s)
        if width and slots is not None and width > slots:
            raise UsageError(f"workload {wl.name}: {width} requests in flight exceed --parallel {s.parallel}: engine {e} would queue them; raise --parallel")
        limit = plan.limits.get(e)
        if limit and wl.need() > limit:
            raise UsageError(f"workload {wl.name}: a request needs {wl.need()} tokens (prompt + generated) but engine {e} gives {limit}: {plan.limit_what.get(e)}")


# ------------------------------------------------------------------ one arm


@dataclass
class Arm:
    """One engine's running server in one repeat, as the workload's points see it."""

    run: Run
    plan: SnapshotPlan
    la: Launch
    target: Target
    engine: str
    rep: int
    status: Callable[[str], None]  # the progress line's status
    proc: Process | External | None = None  # the server (External: one parity did not start)
    log: str = ""

    @property
    def shape(self):
        return self.plan.shape

    @property
    def timeout(self) -> float:
        return self.plan.shape.request_timeout_s

    def scrape(self) -> tuple[dict | None, str | None]:
        return scrape_parsed(self.la)

    def fits(self, specs, label: str) -> None:
        check_fits(specs, self.plan.limits.get(self.engine), label, self.plan.limit_what.get(self.engine, "the engine"))

    def show(self, label: str):
        return lambda p: self.status(f"{label}: {p.done}/{p.requests} requests, {p.tokens} tokens, {p.tps():.1f} tok/s")

    def alive(self, label: str) -> None:
        if self.proc is not None and (rc := self.proc.poll()) is not None:
            raise died(self.engine, rc, self.log, label)


def run_points(run: Run, plan: SnapshotPlan, la: Launch, target: Target, engine: str, rep: int, prog, task,
               proc=None, log: str = "", gpu: int | None = None, pin: dict | None = None, sync=None) -> list[PointRow]:
    """Every point of plan.workload on this arm's server; one typed row per point.  A crossover arm
    (gpu: its GPU, parity.serving.crossover) meets the other arm before every point (sync), as the
    N sweep's do, its client on its own cores (pin) and its telemetry sampling its GPU alone; its
    rows carry gpu."""
    wl = plan.workload
    arm = Arm(run, plan, la, target, engine, rep, lambda msg: prog.update(task, status=f"{engine} r{rep} {msg}"), proc, log)
    rows = []
    for m, tel in measured(arm, wl, gpu, pin, sync):
        row = finish(arm, wl, m)
        if tel is not None:
            watched(arm, wl, m, tel, row)
            if gpu is not None:
                row["gpu"] = gpu
        row = PointRow.of(row)
        rows.append(row)
        prog.advance(task)
        figures = ", ".join(f"{k} {row.metric(k)}" for k in wl.kind_obj.headline)
        run.out.info(f"  {engine:>8} r{rep} {wl.name} {m.label}: {figures}  {verdict_text(row)}")
        arm.alive(m.label)
    return rows


def measured(arm: Arm, wl: Workload, gpu: int | None, pin: dict | None,
             sync) -> Iterator[tuple[Measured, Watch | None]]:
    """The kind's points, each with its telemetry window: a crossover arm's each after the barrier, the
    point's whole run inside the window (its client thread pinned there), sampling its GPU alone; an
    arm in turn on one GPU the same for the kinds whose point is one measured run (`one_run_points`:
    a trace replay, so its energy per token is the replay's), every GPU sampled; the other kinds none
    (their points hold primers and turns the window would count)."""
    points = wl.kind_obj.run(arm, wl)
    if gpu is None and not wl.kind_obj.one_run_points:
        yield from ((m, None) for m in points)
        return
    for _, label in wl.points():
        if sync is not None:
            sync(f"{arm.engine} r{arm.rep} {wl.name} {label}")
        gpus = None if gpu is None else [gpu]
        with watch.point(arm.run.runner, arm.shape.telemetry, getattr(arm.proc, "pid", None), pin, gpus) as tel:
            m = next(points, None)
        if m is None:
            return
        yield m, tel


def watched(arm: Arm, wl: Workload, m: Measured, tel: Watch, row: dict) -> None:
    """The point's telemetry file and row fields (parity.telemetry.watch); its problems void the point."""
    path = f"telemetry/{stem(arm, wl, m)}.json"
    problems = tel.finish(arm.run.dir, row, m.records, arm.la.family, m.before, m.after, path)
    row["invalid_reasons"] = row["invalid_reasons"] + problems
    row["valid"] = not row["invalid_reasons"]


def verdict_text(row: PointRow) -> str:
    text = "valid" if row.valid else "INVALID: " + "; ".join(row.invalid_reasons)
    return text + (f"; {row.info.get('held_note')}" if row.info.get("held") is False else "")


# ------------------------------------------------------------------ rows


def server_deltas(family, before: dict | None, after: dict | None) -> dict | None:
    """The point's server figures under the engine's /metrics family (its kind's)."""

    if before is None or after is None:
        return None
    d = server_metrics.deltas(family, before, after)
    name = family.prompt_computed
    d["prompt_tokens_computed"] = after[name] - before.get(name, 0.0) if name and name in after else None
    return d


def point_row(kind: str, wl_cfg, m: Measured, server: dict | None, min_window_s: float, tolerance: float) -> dict:
    """The point's row from its records: validity of each request, the serving metrics over
    the valid ones, the kind's own metrics, and the point's verdict: the common one and the
    kind's (pure: no server)."""

    k = WORKLOADS[kind]
    for r in m.records:
        validity.check_request(r)
    metrics, why = compute([r for r in m.records if r.valid])
    sample = workload_metrics.Sample(m.records, decode=m.decode, long=m.long, slo=getattr(wl_cfg, "slo", None), server=server,
                                      prefix_tokens=m.prefix_tokens, extra=m.extra)
    wmetrics, wwhy = workload_metrics.compute(k.metrics, sample)
    row = {"n": m.key, "point": m.label, **metrics, **wmetrics, "why": {**why, **wwhy}, **m.extra}
    row["calibration_basis"] = basis(kind, m.records, m.decode, k.windows)  # what a trial block's rows tell parity.workloads.calibration
    problems = validity.point_verdict(m.records, row, min_window_s, tolerance, k.windows) + list(m.problems)
    problems += k.judge(row, sample, wl_cfg)
    row.update(requests=len(m.records), valid_requests=sum(r.valid for r in m.records), invalid_requests=sum(not r.valid for r in m.records),
               valid=not problems, invalid_reasons=problems)  # fmt: skip
    return row


def finish(arm: Arm, wl: Workload, m: Measured) -> dict:
    """Row + files of one measured point (requests/, servers/), server reconciled."""

    s = arm.shape
    server = server_deltas(arm.la.family, m.before, m.after)
    row = {"engine": arm.engine, "repeat": arm.rep, "workload": wl.name, "kind": wl.kind,
           **point_row(wl.kind, wl.cfg, m, server, s.min_window_s, s.invalid_tolerance), "prompt": "tokens"}  # fmt: skip
    if server is not None:
        recon = server_metrics.reconcile(server, client_side(m.records, row))
        row["server"], row["reconciliation"] = server, recon
        for text in server_metrics.mismatches(recon):
            arm.run.out.warn(f"{arm.engine} r{arm.rep} {wl.name} {m.label}: server and client disagree on {text}")
    name = stem(arm, wl, m)
    arm.run.dir.write_json(f"requests/{name}.json", records_json(m.records))
    for side, recs in m.side.items():
        arm.run.dir.write_json(f"requests/{name}-{side}.json", records_json(recs))
    if m.metrics_text is not None:
        arm.run.dir.write_text(f"servers/{name}.metrics.txt", m.metrics_text)
    return row


def stem(arm: Arm, wl: Workload, m: Measured) -> str:
    """A point's file name under requests/, servers/ and telemetry/."""
    return f"{arm.engine}-r{arm.rep}-{slugify(wl.name)}-{slugify(m.label)}"
