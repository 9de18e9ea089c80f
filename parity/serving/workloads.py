"""Workloads (`parity snapshot --workload NAME`): what the paged engine claims, measured by
parity's own load generator against any engine adapter, inside the snapshot's session
(same gates, lock, warmup, repeats and order, validity rules and summary).  Each arm runs
the workload's points instead of the closed N sweep; a point's row keeps "n" as its
numeric key (requests, rate or turn), a "point" label and the kind's own fields.

- shared-prefix: groups x group_size requests, each group sharing prefix_tokens (its own
  nonce first: groups share nothing), each request its own suffix.  With prime, one
  request per group runs first (its prefix computed and, where the engine caches it,
  kept); then the measured requests all go at once.  The server's /metrics around the
  measured requests give the prefix-cache hit rate next to TTFT and prefill throughput.
- prefill-under-decode: decode_streams streams decoding decode_gen tokens; once all of
  them decode, long_prompts prompts of long_ptok tokens arrive every long_every_s.  The
  stall of each: the decode gaps overlapping its admission (send -> its first token).
- open-loop: for each rate, requests_per_rate requests due at seeded gamma arrival times
  (parity.loadgen.arrivals; exact_rate: scaled so the schedule's mean rate is the
  requested one), sent whatever is in flight.  A load generator that fell
  behind makes the point invalid; a server that did not keep up makes it "not held".
- multi-turn: conversations in lockstep: turn k of every conversation goes at once, its
  prompt the conversation's history (earlier prompts + the responses' text, tokenized)
  plus a new user chunk of turn_tokens; one point per turn index (its /metrics show the
  history the server reused)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from parity.engines import kind_of
from parity.serving.point import check_fits, client_side, records_json, scrape_parsed
from parity.errors import InfraError, UsageError
from parity.loadgen.record import RequestRecord
from parity.artifacts import slugify
from parity.decode import from_dict
from parity.engines.server import died
from parity.loadgen import client as loadgen
from parity.loadgen.arrivals import open_loop_times
from parity.loadgen.client import RequestSpec, one_request, request_body, tokenize
from parity.loadgen.http import Connection
from parity.loadgen.prompts import shared_prefix_prompts, token_prompts
from parity.metrics import prometheus as server_metrics, validity, workload as workload_metrics
from parity.metrics.serving import compute
from parity.metrics.workload import HEADLINE
from parity.workloads.calibration import basis
from parity.workloads.defaults import BUILTIN, builtin, sized
from parity.workloads.spec import WorkloadConfig, check_workload



@dataclass
class Workload:
    name: str
    cfg: object  # parity.config.WorkloadConfig
    gen: int
    ptok: int
    builtin: bool = False  # one of the four kinds by name (parity.workloads.defaults)
    sized: tuple = ()  # the fields parity sized for the profile (not written in YAML or --workload-opt)

    @property
    def kind(self) -> str:
        return self.cfg.kind

    def points(self) -> list[tuple[float, str]]:
        """(numeric key, label) of each point, in run order."""
        c = self.cfg
        if self.kind == "shared-prefix":
            return [(c.groups * c.group_size, f"{c.groups}x{c.group_size} prefix {c.prefix_tokens} + suffix {c.suffix_tokens}")]
        if self.kind == "prefill-under-decode":
            return [(c.decode_streams, f"{c.decode_streams} streams + {c.long_prompts} x {c.long_ptok}-token prompts")]
        if self.kind == "open-loop":
            return [(r, f"{r:g} req/s") for r in c.rates]
        return [(k, f"turn {k}") for k in range(1, c.turns + 1)]

    def concurrency(self) -> int | None:
        """Requests in flight at once (None: open loop, as many as the schedule makes)."""
        c = self.cfg
        return {"shared-prefix": c.groups * c.group_size, "prefill-under-decode": c.decode_streams + c.long_prompts, "multi-turn": c.conversations}.get(self.kind)

    def need(self) -> int:
        """The most tokens one request takes (prompt + generated); multi-turn: a lower bound
        (responses are tokenized again as text, which may take more tokens)."""
        c = self.cfg
        if self.kind == "shared-prefix":
            return c.prefix_tokens + c.suffix_tokens + self.gen
        if self.kind == "prefill-under-decode":
            return max(self.ptok + c.decode_gen, c.long_ptok + self.gen)
        if self.kind == "open-loop":
            return self.ptok + self.gen
        return c.turns * (c.turn_tokens + self.gen)

    def describe(self) -> dict:
        import dataclasses

        return {**dataclasses.asdict(self.cfg), "name": self.name, "gen": self.gen, "ptok": self.ptok, "points": [label for _, label in self.points()]}


def resolve(ctx, spec, s, npl=None, options: dict | None = None) -> Workload:
    """A workload by name (a built-in kind, parity.workloads.defaults, or
    serving.workloads.NAME) or inline (a campaign step's mapping, with an optional name);
    options: --workload-opt overrides."""
    from dataclasses import replace

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
            cfg = builtin(spec, ctx.profile, s, declared, options)
            given = {*getattr(declared, "_given", ()), *options}
            made = {"builtin": True, "sized": tuple(k for k in sized(spec, ctx.profile, s) if k not in given)}
        else:
            cfg = replace(declared, **options) if options else declared
    else:
        known = ", ".join(s.workloads) or "none declared"
        raise UsageError(f"--workload {spec}: no such workload in profile {ctx.profile.name} (serving.workloads: {known}; built in: {', '.join(BUILTIN)})")
    if options and isinstance(spec, str):
        check_workload(cfg, "--workload-opt", spec)
    return Workload(name, cfg, cfg.gen or s.gen, cfg.ptok or s.ptok, **made)


def attach(ctx, plan, wl: Workload) -> None:
    """Make the plan run the workload's points; refuse what no engine can serve."""
    plan.workload = wl
    plan.npl = [k for k, _ in wl.points()]
    s = plan.shape
    width = wl.concurrency()
    for e in plan.engines:
        slots = kind_of(ctx.profile, e).queue_limit(ctx.profile.engine(e), s)
        if width and slots is not None and width > slots:
            raise UsageError(f"workload {wl.name}: {width} requests in flight exceed --parallel {s.parallel}: engine {e} would queue them; raise --parallel")
        limit = plan.limits.get(e)
        if limit and wl.need() > limit:
            raise UsageError(f"workload {wl.name}: a request needs {wl.need()} tokens (prompt + generated) but engine {e} gives {limit}: {plan.limit_what.get(e)}")


# ------------------------------------------------------------------ one arm


@dataclass
class Arm:
    """One engine's running server in one repeat, as the workload's points see it."""

    ctx: object
    plan: object
    la: object  # engines.Launch
    target: object  # loadgen.Target
    engine: str
    rep: int
    status: object  # callable(str)
    proc: object = None
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


@dataclass
class Measured:
    """One point's raw results, before the row is computed."""

    key: float
    label: str
    records: list[RequestRecord]
    before: dict | None = None
    after: dict | None = None
    metrics_text: str | None = None
    decode: list[RequestRecord] = field(default_factory=list)
    long: list[RequestRecord] = field(default_factory=list)
    prefix_tokens: int = 0
    extra: dict = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    side: dict = field(default_factory=dict)  # other requests kept beside the point (primers): name -> records


def run_points(ctx, plan, la, target, engine: str, rep: int, prog, task, proc=None, log: str = "") -> list[dict]:
    """Every point of plan.workload on this arm's server; one row per point."""
    wl = plan.workload
    arm = Arm(ctx, plan, la, target, engine, rep, lambda msg: prog.update(task, status=f"{engine} r{rep} {msg}"), proc, log)
    rows = []
    for m in RUNNERS[wl.kind](arm, wl):
        row = finish(arm, wl, m)
        rows.append(row)
        prog.advance(task)
        ctx.out.info(f"  {engine:>8} r{rep} {wl.name} {m.label}: " + ", ".join(f"{k} {row.get(k)}" for k in headline_of(wl.kind)) + f"  {verdict_text(row)}")
        arm.alive(m.label)
    return rows


def headline_of(kind: str) -> list[str]:
    return HEADLINE[kind]


def verdict_text(row: dict) -> str:
    text = "valid" if row["valid"] else "INVALID: " + "; ".join(row["invalid_reasons"])
    return text + (f"; {row['held_note']}" if row.get("held") is False else "")


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
    the valid ones, the kind's own metrics, and the point's verdict (pure: no server)."""

    for r in m.records:
        validity.check_request(r)
    metrics, why = compute([r for r in m.records if r.valid])
    sample = workload_metrics.Sample(m.records, decode=m.decode, long=m.long, slo=getattr(wl_cfg, "slo", None), server=server, prefix_tokens=m.prefix_tokens)
    wmetrics, wwhy = workload_metrics.compute(kind, sample)
    row = {"n": m.key, "point": m.label, **metrics, **wmetrics, "why": {**why, **wwhy}, **m.extra}
    row["calibration_basis"] = basis(kind, m.records, m.decode, workload_metrics.WINDOWS[kind])  # what a trial block's rows tell parity.workloads.calibration
    problems = validity.point_verdict(m.records, row, min_window_s, tolerance, workload_metrics.WINDOWS[kind]) + list(m.problems)
    if kind == "open-loop":
        problems += open_loop_problems(row, wl_cfg)
        row.update(held_verdict(row, wl_cfg))
    if kind == "prefill-under-decode":
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
    row.update(requests=len(m.records), valid_requests=sum(r.valid for r in m.records), invalid_requests=sum(not r.valid for r in m.records),
               valid=not problems, invalid_reasons=problems)  # fmt: skip
    return row


def open_loop_problems(row: dict, cfg) -> list[str]:
    """The load generator's self-check: late sends or a short send rate void the point."""
    out = []
    d = row.get("sched_delay_p99_ms")
    if d is None:
        out.append(f"no scheduling delay: {row['why'].get('sched_delay_p99_ms')}")
    elif d > cfg.max_delay_p99_ms:
        out.append(f"the load generator fell behind: scheduling delay p99 {d:g} ms > max_delay_p99_ms {cfg.max_delay_p99_ms:g}")
    share = row.get("achieved_share")
    if share is not None and share < cfg.min_achieved_share:
        out.append(f"the load generator sent at {row['achieved_rate']:g} req/s, {share:.1%} of the scheduled {row['scheduled_rate']:g} req/s (min_achieved_share {cfg.min_achieved_share:g})")
    return out


def held_verdict(row: dict, cfg) -> dict:
    """Did the server keep up with the rate?  Its completions must keep pace with the schedule."""
    share = row.get("served_share")
    if share is None:
        return {"held": None, "held_note": f"unknown: {row['why'].get('served_share')}"}
    if share >= cfg.min_achieved_share:
        return {"held": True, "held_note": f"held: served {row['served_rate']:g} req/s of the scheduled {row['scheduled_rate']:g} ({share:.1%})"}
    return {"held": False, "held_note": f"not held: the server completed {row['served_rate']:g} req/s of the scheduled {row['scheduled_rate']:g} ({share:.1%} < {cfg.min_achieved_share:g}); "
                                        "its queue grew, so latencies here depend on the run's length"}  # fmt: skip


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
            arm.ctx.out.warn(f"{arm.engine} r{arm.rep} {wl.name} {m.label}: server and client disagree on {text}")
    stem = f"{arm.engine}-r{arm.rep}-{slugify(wl.name)}-{slugify(m.label)}"
    arm.ctx.run.write_json(f"requests/{stem}.json", records_json(m.records))
    for name, recs in m.side.items():
        arm.ctx.run.write_json(f"requests/{stem}-{name}.json", records_json(recs))
    if m.metrics_text is not None:
        arm.ctx.run.write_text(f"servers/{stem}.metrics.txt", m.metrics_text)
    return row


# ------------------------------------------------------------------ the kinds


async def _batch(t, specs, timeout: float, keep_text: bool = False) -> list[tuple[RequestRecord, str | None]]:
    """Every spec at once, each on its own connection; (record, text when keep_text)."""

    async def one(spec):
        rec = RequestRecord(sent_prompt_tokens=spec.prompt_tokens or len(spec.prompt), expected_tokens=spec.gen)
        conn = Connection(t.host, t.port, min(timeout, 30.0))
        try:
            text = await one_request(conn, t, request_body(t, spec.prompt, spec.gen), rec, timeout, keep_text=keep_text)
        finally:
            conn.close()
        return rec, text

    return list(await asyncio.gather(*[one(s) for s in specs]))


def shared_prefix(arm: Arm, wl: Workload):
    c, t = wl.cfg, arm.target
    (key, label), = wl.points()
    per = c.group_size + (1 if c.prime else 0)
    specs = asyncio.run(shared_prefix_prompts(t, c.groups, per, c.prefix_tokens, c.suffix_tokens, wl.gen))
    arm.fits(specs, f"{arm.engine} {wl.name}")
    primers = [specs[g * per] for g in range(c.groups)] if c.prime else []
    measured = [sp for i, sp in enumerate(specs) if not (c.prime and i % per == 0)]
    problems, side = [], {}
    if primers:
        arm.status(f"{wl.name}: {len(primers)} primer(s), one per group")
        recs = loadgen.drive(t, primers, arm.timeout)
        side["primers"] = recs
        bad = [validity.reason(validity.check_request(r)) for r in recs if not r.valid]
        if bad:
            problems.append(f"{len(bad)}/{len(recs)} primer requests invalid (first: {bad[0]}): the groups' prefixes may not be cached")
    before, _ = arm.scrape()
    recs = loadgen.drive(t, measured, arm.timeout, arm.show(f"{wl.name} {label}"))
    after, text = arm.scrape()
    yield Measured(key, label, recs, before, after, text, prefix_tokens=c.prefix_tokens, problems=problems, side=side,
                   extra={"groups": c.groups, "group_size": c.group_size, "prefix_tokens": c.prefix_tokens, "suffix_tokens": c.suffix_tokens, "primed": c.prime})  # fmt: skip


async def _under_decode(t, decode_specs, long_specs, every_s: float, timeout: float) -> tuple[list[RequestRecord], list[RequestRecord]]:
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


def prefill_under_decode(arm: Arm, wl: Workload):
    c, t = wl.cfg, arm.target
    (key, label), = wl.points()
    decode_specs = asyncio.run(token_prompts(t, c.decode_streams, wl.ptok, c.decode_gen))
    long_specs = asyncio.run(token_prompts(t, c.long_prompts, c.long_ptok, wl.gen))
    arm.fits(decode_specs + long_specs, f"{arm.engine} {wl.name}")
    arm.status(f"{wl.name}: {c.decode_streams} decode streams, then {c.long_prompts} long prompts every {c.long_every_s:g} s")
    before, _ = arm.scrape()
    decode, long = asyncio.run(_under_decode(t, decode_specs, long_specs, c.long_every_s, arm.timeout))
    after, text = arm.scrape()
    yield Measured(key, label, decode + long, before, after, text, decode=decode, long=long,
                   extra={"decode_streams": c.decode_streams, "decode_gen": c.decode_gen, "long_prompts": c.long_prompts, "long_ptok": c.long_ptok, "long_every_s": c.long_every_s})  # fmt: skip


def open_loop(arm: Arm, wl: Workload):
    c, t = wl.cfg, arm.target
    for rate, label in wl.points():
        specs = asyncio.run(token_prompts(t, c.requests_per_rate, wl.ptok, wl.gen))
        arm.fits(specs, f"{arm.engine} {wl.name}")
        for spec, at in zip(specs, open_loop_times(len(specs), rate, c.burstiness, c.seed, exact=c.exact_rate)):
            spec.at = at
        before, _ = arm.scrape()
        recs = loadgen.drive(t, specs, arm.timeout, arm.show(f"{wl.name} {label}"), open_loop=True)
        after, text = arm.scrape()
        yield Measured(rate, label, recs, before, after, text,
                       extra={"requested_rate": rate, "burstiness": c.burstiness, "seed": c.seed, "exact_rate": c.exact_rate, "slo": {k: getattr(c.slo, k) for k in ("ttft_ms", "tpot_ms", "e2e_ms")}})  # fmt: skip


def multi_turn(arm: Arm, wl: Workload):
    c, t = wl.cfg, arm.target
    chunks = asyncio.run(token_prompts(t, c.conversations * c.turns, c.turn_tokens, wl.gen))
    history: list[list[int] | None] = [[] for _ in range(c.conversations)]
    for k, label in wl.points():
        alive = [i for i, h in enumerate(history) if h is not None]
        specs = []
        for i in alive:
            prompt = history[i] + chunks[i * c.turns + k - 1].prompt
            specs.append(RequestSpec(prompt, wl.gen, prompt_tokens=len(prompt), tag=f"c{i}"))
        arm.fits(specs, f"{arm.engine} {wl.name} {label} (the history grows each turn)")
        arm.status(f"{wl.name} {label}: {len(specs)} conversations")
        before, _ = arm.scrape()
        done = asyncio.run(_batch(t, specs, arm.timeout, keep_text=True))
        after, text = arm.scrape()
        for i, spec, (rec, reply) in zip(alive, specs, done):
            if rec.error is not None:
                history[i] = None
            else:
                history[i] = list(spec.prompt) + (asyncio.run(tokenize(t, reply)) if reply else [])
        problems = [f"{c.conversations - len(alive)} of {c.conversations} conversations ended before this turn (an earlier turn failed)"] if len(alive) < c.conversations else []
        yield Measured(k, label, [rec for rec, _ in done], before, after, text, problems=problems,
                       extra={"turn": k, "conversations": len(alive), "turn_tokens": c.turn_tokens})  # fmt: skip


RUNNERS = {"shared-prefix": shared_prefix, "prefill-under-decode": prefill_under_decode, "open-loop": open_loop, "multi-turn": multi_turn}
