"""One arm of a same-session sweep: one engine's server, started once per repeat,
warmed up, then every N; afterwards the memory it held must come back before the
next engine starts.

Per point: prompts (serving.prompt), the server's /metrics before and after, the
requests (closed loop, N at once), each request checked (parity.metrics.validity),
the users' metrics over the valid ones, the point's own verdict, and the server's
counters reconciled with the client's."""

from __future__ import annotations

import asyncio

from parity.context import Run
from parity.engines.server import died, serving
from parity.errors import InfraError
from parity.metrics import prometheus as server_metrics
from parity.metrics import validity
from parity.metrics.serving import gen_total, prompt_tok_total
from parity.results.model import PointRow
from parity.serving.point import build_specs, check_fits, client_side, records_json, scrape_parsed, slot_context
from parity.efficiency import memory as memtrack
from parity.gpu.memory import used_mib, wait_back
from parity.loadgen import client as loadgen
from parity.serving import crossover, rounds
from parity.serving.plan import SnapshotPlan
from parity.serving.output_probe import probe
from parity.ttft import llama_log, split as anatomy
from parity.serving.workloads import run_points
from parity.telemetry import affinity, watch


def warmup(run: Run, target, s, engine: str, rep: int, timeout: float, plan: SnapshotPlan) -> dict:
    """The harness's warmup: serving.warmup.requests requests of warmup.gen tokens, own nonces,
    discarded from every metric (kept in requests/<engine>-r<k>-warmup.json)."""

    w = s.warmup
    if w.requests <= 0:
        return {"requests": 0}
    specs = build_specs(target, s, w.requests, w.gen)
    check_fits(specs, plan.limits.get(engine), f"{engine} r{rep} warmup", plan.limit_what.get(engine, "the engine"))
    recs = loadgen.drive(target, specs, timeout)
    for r in recs:
        validity.check_request(r)
    run.dir.write_json(f"requests/{engine}-r{rep}-warmup.json", records_json(recs))
    bad = [validity.reason(r) for r in recs if not r.valid]
    if bad:
        run.out.warn(f"{engine} r{rep} warmup: {len(bad)}/{len(recs)} requests invalid (first: {bad[0]})")
    return {"requests": len(recs), "gen": w.gen, "valid": len(recs) - len(bad)}


def probe_outputs(run: Run, target, la, s, engine: str) -> list[dict]:
    """Greedy answers with top-k logprobs to serving.output_parity.prompts (outputs/<engine>.json)."""

    op = s.output_parity
    try:
        answers = asyncio.run(probe(target, op.prompts, op.gen, op.top_logprobs, la.probe_extra, s.request_timeout_s))
    except (OSError, asyncio.TimeoutError, ValueError, KeyError) as e:
        raise InfraError(f"{engine}: output-parity probe failed: {e}") from None
    run.dir.write_json(f"outputs/{engine}.json", answers)
    return answers


def point_warmup(target, s) -> dict:
    """serving.warmup.point_requests requests one after another before the point, discarded (its
    counters are read after them): the server's leftovers from the last point are paid here."""
    k = s.warmup.point_requests
    if k <= 0:
        return {"requests": 0}
    recs = [r for spec in build_specs(target, s, k, s.warmup.gen) for r in loadgen.drive(target, [spec], s.request_timeout_s)]
    for r in recs:
        validity.check_request(r)
    bad = [validity.reason(r) for r in recs if not r.valid]
    return {"requests": k, "gen": s.warmup.gen, **({"invalid": len(bad), "first_reason": bad[0]} if bad else {})}


def run_point(run: Run, plan: SnapshotPlan, la, target, engine: str, rep: int, n: int, show,
              server_pid: int | None = None, affinity: dict | None = None, log: str | None = None,
              gpu: int | None = None) -> PointRow:
    """One N of the arm: its typed row (its keys assembled flat first: validity, telemetry and
    energy write into them).  gpu: a crossover arm's, the one GPU its telemetry samples (None: every GPU)."""
    s = plan.shape
    label = f"{engine} r{rep} N={n}"
    k = rounds.count(n, s.min_requests)  # rounds of N at once, back to back (parity.serving.rounds)
    specs = build_specs(target, s, n * k, s.gen)
    check_fits(specs, plan.limits.get(engine), label, plan.limit_what.get(engine, "the engine"))
    settle = point_warmup(target, s)
    before, _ = scrape_parsed(la)
    offset = llama_log.size(log)  # the server's log lines of this point follow (parity.ttft)
    gpus = None if gpu is None else [gpu]  # a crossover arm samples its own GPU alone
    with watch.point(run.runner, s.telemetry, server_pid, affinity, gpus) as tel:  # GPU + host samples, client pinned
        batches = [loadgen.drive(target, chunk, s.request_timeout_s, show) for chunk in rounds.split(specs, n)]
    recs = [r for b in batches for r in b]
    after, text = scrape_parsed(la)
    for r in recs:
        validity.check_request(r)
    metrics, why = rounds.metrics(batches)
    row = {"engine": engine, "n": n, "repeat": rep, "rounds": k, **metrics, "why": why, "point_warmup": settle}
    if settle.get("invalid"):
        run.out.warn(f"{label}: {settle['invalid']}/{settle['requests']} warmup requests before the point invalid ({settle['first_reason']})")
    # the calibration's evidence that the decode window is a pace, not a burst (parity.stats.calibrate)
    row["decode_window_reads"] = rounds.window_reads(batches)
    row["ttft_anatomy"] = anatomy.of_point(recs, log, offset, la.family, before, after)
    if row["ttft_anatomy"].get("flag"):
        run.out.info(f"  {label} TTFT: {row['ttft_anatomy']['flag']}")
    problems = validity.point_verdict(recs, row, s.min_window_s, s.invalid_tolerance)
    problems += tel.finish(run.dir, row, recs, la.family, before, after, f"telemetry/{engine}-r{rep}-n{n}.json")
    row.update(
        requests=len(recs),
        valid_requests=sum(r.valid for r in recs),
        invalid_requests=sum(not r.valid for r in recs),
        prompt=s.prompt,
        valid=not problems,
        invalid_reasons=problems,
    )
    if before is not None and after is not None:
        server = server_metrics.deltas(la.family, before, after)
        ok = [r for r in recs if r.valid]  # the point's totals: a row holds one round's (parity.serving.rounds)
        totals = {"prompt_tok_total": prompt_tok_total(ok), "gen_total": gen_total(ok)}
        recon = server_metrics.reconcile(server, client_side(recs, {**row, **totals}))
        row["server"], row["reconciliation"] = server, recon
        for m in server_metrics.mismatches(recon):
            run.out.warn(f"{label}: server and client disagree on {m}")
    run.dir.write_json(f"requests/{engine}-r{rep}-n{n}.json", records_json(recs))
    if text is not None:
        run.dir.write_text(f"servers/{engine}-r{rep}-n{n}.metrics.txt", text)
    return PointRow.of(row)


def point_line(row: PointRow) -> str:
    """The console's line of one N: its rates, TTFT, windows and verdict."""
    m = row.metric
    verdict = "valid" if row.valid else "INVALID: " + "; ".join(row.invalid_reasons)
    verdict += "".join(f"  [{f}]" for f in row.info.get("flags") or [])
    rates = f"decode_agg {m('decode_agg_tps')} perseq {m('decode_perseq_tps')} agg {m('agg_tps')} tok/s"
    times = f"ttft {m('ttft_mean_ms')} ms  windows {m('wall_s')}/{m('decode_window_s')} s"
    return f"  {row.engine:>8} r{row.repeat} N={row.n:<4} {rates}  {times}  {verdict}"


def cpu_plan(runner, s) -> dict:
    """Which cores the server and the client get (parity.telemetry.affinity; serving.telemetry.pin_cpus)."""

    return affinity.plan(s.telemetry, runner)


def run_arm(run: Run, plan: SnapshotPlan, engine: str, rep: int, prog, task,
            port: int | None = None, gpu: int | None = None, sync=None, pin: dict | None = None) -> dict:
    """Start the engine's server, warm it up, run every N, stop it, wait for its memory.
    A crossover arm (parity.serving.crossover) has its own port, GPU and cores (pin: its affinity
    plan), calls sync(label) before every point (the other arm meets it there) and leaves the
    memory wait to its block."""

    s = plan.shape
    eng = plan.bound[engine]
    e = eng.section
    port = s.port if port is None else port
    la = eng.launch(plan.model_files[engine], port, s, model=plan.model, out=run.out)
    if gpu is not None:
        la = crossover.pinned(la, gpu)  # CUDA_VISIBLE_DEVICES=<gpu> in its env (and in servers/<arm>.json)
    pin = cpu_plan(run.runner, s) if pin is None else pin
    la = affinity.wrap(la, pin)  # taskset -c <server cores> in the recorded argv when the box has enough cores
    log = str(run.dir.file(f"servers/{engine}-r{rep}.log"))
    run.dir.write_json(f"servers/{engine}-r{rep}.json", {"argv": la.argv, "env": la.env, "unset": la.unset, "served_name": la.served_name, "count": la.count, "request_extra": la.request_extra, "affinity": pin,
                                                      **({} if la.spawned else {"started_by_parity": False, "address": f"http://{la.host}:{la.port}", "start": la.start, "stop": la.stop})})  # fmt: skip
    mem_before, mem_source = used_mib(gpu)
    rows: list[PointRow] = []
    arm = {"engine": engine, "repeat": rep, "affinity": pin,
           **({} if gpu is None else {"gpu": gpu, "port": port, "cpus": crossover.cores(pin)})}
    prog.update(task, status=f"{engine} r{rep}: starting server (budget {e.ready_timeout_s:g} s)")
    with serving(run, la, port, log, e.ready_timeout_s, e.ready_probe_timeout_s, e.stop_grace_s) as (proc, ready_s):
        arm["ready_s"] = round(ready_s, 2)
        mem = memtrack.start(mem_before, mem_source, proc, eng.kind.memory_note, gpu)  # memory per engine (parity.efficiency.memory)
        target = loadgen.Target(la.host, la.port, la.served_name, la.tokenize, count=la.count, extra=la.request_extra)
        real = slot_context(la)
        if real is not None:  # what the server really gives a slot (it caps at the model's training context)
            arm["slot_ctx"] = real
            if real != plan.limits.get(engine):
                plan.limits[engine] = real
                plan.limit_what[engine] = f"{engine}'s slots (GET /props n_ctx {real}, planned {plan.limit_what.get(engine)})"
        prog.update(task, status=f"{engine} r{rep}: warmup")
        arm["warmup"] = warmup(run, target, s, engine, rep, s.request_timeout_s, plan)
        if s.output_parity.enabled and plan.workload is None and rep == min(r for r, e in plan.order if e == engine):
            prog.update(task, status=f"{engine} r{rep}: output-parity probe")
            arm["outputs"] = probe_outputs(run, target, la, s, engine)
        if plan.workload is not None:  # workload hook: its own points (parity.serving.workloads) instead of every N

            rows += run_points(run, plan, la, target, engine, rep, prog, task, proc, log, gpu, pin, sync)
        for n in [] if plan.workload is not None else plan.npl:

            def show(p, label=f"{engine} r{rep} N={n}", n=n):
                prog.update(task, status=f"{label}: {p.done}/{n} requests, {p.tokens} tokens, {p.tps():.1f} tok/s")

            if sync is not None:
                sync(f"{engine} r{rep} N={n}")
            row = run_point(run, plan, la, target, engine, rep, n, show, proc.pid, pin, log, gpu)
            row.put("server_ready_s", arm["ready_s"])
            if gpu is not None:
                row.put("gpu", gpu)
            rows.append(row)
            mem.sample(f"N={n}")
            prog.advance(task)
            run.out.info(point_line(row))
            if (rc := proc.poll()) is not None:
                raise died(engine, rc, log, f"N={n}")
        arm["memory"] = mem.result()
    arm["rows"] = rows
    if gpu is not None:
        return arm
    prog.update(task, status=f"{engine} r{rep}: waiting for its memory to come back")
    arm["settle"] = wait_back(mem_before, mem_source, s.settle_s, s.settle_timeout_s, s.settle_tolerance_mib, f"{engine} r{rep}")
    return arm
