"""parity snapshot / parity bench -> parity.serving.snapshot.snapshot / parity.bench.run.bench"""

from typing import List, Optional

import typer

from parity.cli.common import JsonOpt, ProfileOpt, flag


def register(app: typer.Typer) -> None:
    @app.command("snapshot")
    def snapshot(
        npl: Optional[str] = typer.Option(None, "--npl", metavar="N,...", help="Concurrency levels (default: serving.npl)."),
        ptok: Optional[int] = typer.Option(None, "--ptok", help="Prompt tokens per request."),
        gen: Optional[int] = typer.Option(None, "--gen", help="Generated tokens per request."),
        parallel: Optional[int] = typer.Option(None, "--parallel", help="llama-server --parallel."),
        ctx_len: Optional[int] = typer.Option(None, "--ctx", help="llama-server -c."),
        engines: Optional[str] = typer.Option(None, "--engines", metavar="A,B", help="Engines in session order (default: serving.engines)."),
        model: Optional[str] = typer.Option(None, "--model", "-m", help="Model name (default: serving.model)."),
        repeat: Optional[int] = flag("repeat"),
        order: Optional[str] = flag("order"),
        until_ci: Optional[str] = flag("until_ci"),
        max_repeats: Optional[int] = flag("max_repeats"),
        budget_s: Optional[float] = flag("budget_s"),
        no_gates: bool = typer.Option(False, "--no-gates", help="Skip pre/post gates (the run is marked ungated)."),
        allow_env: Optional[List[str]] = typer.Option(None, "--allow-env", metavar="NAME", help="Allow a forbidden bench env knob."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Print every resolved command, env and the preflight; start nothing."),
        workload: Optional[str] = typer.Option(None, "--workload", "-w", metavar="NAME", help="Run a workload instead of the N sweep: a built-in kind (shared-prefix, prefill-under-decode, open-loop, multi-turn, prefill-curve, trace: --trace FILE; sized for the profile, no YAML needed; block 0 calibrates its gen, or prefill-under-decode's decode_gen, unless given) or serving.workloads.NAME."),
        workload_opt: Optional[List[str]] = typer.Option(None, "--workload-opt", metavar="KEY=VALUE", help="Override one field of the workload (repeatable), e.g. groups=2, rates=[1,2]."),
        trace: Optional[str] = typer.Option(None, "--trace", metavar="FILE", help="Replay this request trace (Azure LLM or BurstGPT CSV, Mooncake or Bailian JSONL): --workload trace implied."),
        gpus: Optional[str] = typer.Option(
            None, "--gpus", metavar="I,J",
            help="Crossover: a block's two arms at once, the first engine on GPU I and the second on GPU J, swapped "
                 "every block (CUDA_VISIBLE_DEVICES per server; default: serving.gpus; none: one GPU, arms in turn)."),
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """Same-session serving sweep: every engine over every N (or a workload's points), gated, locked."""
        from parity.cli.common import make_context, parse_int_list, parse_str_list

        ctx = make_context(profile, json)  # the profile and the lists are checked before the measurement code loads
        npl_list, engine_list = parse_int_list(npl, "--npl"), parse_str_list(engines)
        from parity.serving.snapshot import SnapshotRequest
        from parity.serving.snapshot import snapshot as run

        req = SnapshotRequest(
            npl=npl_list, engines=engine_list, model=model, repeat=repeat, ptok=ptok, gen=gen,
            parallel=parallel, ctx=ctx_len, order=order, gates=not no_gates, allow_env=allow_env or [], dry_run=dry_run, workload=workload, workload_opts=workload_opt or [], trace=trace,
            until_ci=until_ci, max_repeats=max_repeats, budget_s=budget_s, gpus=gpus,
        )  # fmt: skip
        doc = run(ctx, req)
        ctx.out.emit(doc, lambda: (render_plan if dry_run else render_workload if doc.get("workload") else render_summary)(ctx.out, doc))
        if dry_run:
            from parity.gonogo import raise_if_no_go

            raise_if_no_go(doc["go_no_go"], doc["run_dir"])  # after the plan: exit 2 (missing path) or 4 (GPU not free)
        if not dry_run:
            from parity.errors import GateFailed
            from parity.gates.kinds import red_in_summary

            if red := red_in_summary(doc):  # a gate measured in the snapshot (output parity)
                raise GateFailed(f"{red[0].check} out of its band: {red[0].detail} ({doc['run_dir']})")
        if not dry_run and not doc["valid"]:
            from parity.errors import InvalidMeasurement

            raise InvalidMeasurement(f"{len(doc['invalid_points'])} point(s) broke a validity rule, first: {doc['invalid_points'][0]} (numbers written, marked invalid: {doc['run_dir']})")

    @app.command("bench")
    def bench(
        npp: Optional[str] = typer.Option(None, "--npp", metavar="N,...", help="Prompt lengths (default: serving.bench.npp)."),
        ntg: Optional[str] = typer.Option(None, "--ntg", metavar="N,...", help="Generated tokens."),
        npl: Optional[str] = typer.Option(None, "--npl", metavar="N,...", help="Parallel sequences."),
        engine: Optional[str] = typer.Option(None, "--engine", "-e", help="Engine (default: the first serving engine)."),
        engines: Optional[str] = typer.Option(None, "--engines", metavar="A,B", help="A/B: blocks of one run per engine, paired statistics vs the reference (serving.reference_engine if listed, else the last)."),
        aa: bool = typer.Option(False, "--aa", help="A/A: the one engine of --engine/--engines measured as two arms (E and E#2), the noise floor."),
        repeat: Optional[int] = flag("repeat"),
        until_ci: Optional[str] = flag("until_ci"),
        max_repeats: Optional[int] = flag("max_repeats"),
        budget_s: Optional[float] = flag("budget_s"),
        order: Optional[str] = flag("order"),
        model: Optional[str] = typer.Option(None, "--model", "-m", help="Model (default: serving.model)."),
        allow_env: Optional[List[str]] = typer.Option(None, "--allow-env", metavar="NAME"),
        ops: Optional[str] = flag("ops"),
        ops_backend: Optional[str] = flag("ops_backend"),
        ops_params: Optional[str] = flag("ops_params"),
        dry_run: bool = typer.Option(False, "--dry-run", help="Print the checked plan, every command and the go / no-go; start nothing."),
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """llama-batched-bench (PP/TG/B table) into bench.json; with --engines A,B / --aa / --repeat: blocks and
        paired statistics; --ops: test-backend-ops perf per op in paired blocks (ops.json)."""
        from parity.cli.common import make_context, parse_int_list, parse_str_list
        from parity.bench.request import BenchRequest

        ctx = make_context(profile, json)
        req = BenchRequest(npp=parse_int_list(npp, "--npp"), ntg=parse_int_list(ntg, "--ntg"), npl=parse_int_list(npl, "--npl"), engine=engine, model=model, allow_env=allow_env or [],
                           engines=parse_str_list(engines), aa=aa, repeat=repeat, until_ci=until_ci, max_repeats=max_repeats, budget_s=budget_s,
                           order=order, dry_run=dry_run,
                           ops=ops, ops_backend=ops_backend, ops_params=ops_params)  # fmt: skip
        if ops is None and (ops_backend or ops_params):
            from parity.errors import UsageError

            raise UsageError(f"{'--ops-backend' if ops_backend else '--ops-params'} needs --ops")
        from parity.bench.run import bench as run  # after the profile and the options are checked

        doc = run(ctx, req)
        if ops is not None:
            from parity.cli.optime import render_ops, render_ops_plan

            ctx.out.emit(doc, lambda: (render_ops_plan if dry_run else render_ops)(ctx.out, doc))
            if dry_run:
                from parity.gonogo import raise_if_no_go

                raise_if_no_go(doc["go_no_go"], doc["run_dir"])
            elif doc["problems"]:
                from parity.errors import InvalidMeasurement

                n, first = len(doc["problems"]), doc["problems"][0]
                raise InvalidMeasurement(f"{n} op timing problem(s), first: {first} (numbers written, marked invalid: {doc['run_dir']})")
            return
        if dry_run:
            ctx.out.emit(doc, lambda: render_bench_plan(ctx.out, doc))
            from parity.gonogo import raise_if_no_go

            raise_if_no_go(doc["go_no_go"], doc["run_dir"])
            return
        if "paired" in doc:
            ctx.out.emit(doc, lambda: render_bench_ab(ctx.out, doc))
            return
        rows = [[r["pp"], r["tg"], r["b"], r["n_kv"], r["t_pp"], r["s_pp"], r["t_tg"], r["s_tg"], r["t"], r["s"]] for r in doc["rows"]]
        def show():
            from parity.efficiency.roofline import lines

            ctx.out.table(f"llama-batched-bench ({doc['engine']})", ["PP", "TG", "B", "N_KV", "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s"], rows)
            for line in lines(doc.get("efficiency")):
                ctx.out.info(line)

        ctx.out.emit(doc, show)


def render_bench_ab(out, doc: dict) -> None:
    from parity.bench.table import table

    ref = doc.get("reference")
    what = f"A/B, reference {ref}" if ref else "repeats"
    for metric in ("s_tg", "s_pp"):
        cols, rows = table(doc, metric)
        out.table(f"llama-batched-bench {what}: {metric.upper()} t/s, medians of {doc['blocks']} blocks", cols, rows)
    out.info(f"order per block: {'; '.join(' '.join(o) for o in doc['order'])}")
    out.info(f"stop: {doc['stop']['rule']}: {doc['stop']['why']}")
    if ref:
        out.info("B/A: geometric mean of per-block ratios, 95 % t interval on the log ratios; outcome by the paired rule (parity.stats.paired), the users' rule beside")
    out.info(f"-> {doc['run_dir']}")


def render_plan(out, doc: dict) -> None:
    import shlex

    out.info(f"snapshot plan: model {doc['model']}, engines {', '.join(doc['engines'])}, N {doc['npl']}, repeat {doc['repeat']}, order {' '.join(doc['order'])}")
    out.info(f"blocks: {doc['budget']}")
    if doc.get("rounds"):
        out.info("per point: " + ", ".join(f"N={n}: {k} round{'s' if k > 1 else ''} of {n}" for n, k in doc["rounds"].items()) + f" (serving.min_requests {doc['shape']['min_requests']})")
    if doc.get("parallel_sized"):
        out.info(doc["parallel_sized"])
    out.info(f"calibration: {doc['calibration']}")
    if doc.get("workload"):
        w = doc["workload"]
        out.info(f"workload {w['name']} ({w['kind']}): points {'; '.join(w['points'])}")
    if doc.get("crossover"):
        out.info(doc["crossover"]["line"])
    for c in doc["commands"]:
        if "error" in c:
            out.info(f"# {c['engine']}: {c['error']}")
            continue
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in c["env"].items())
        unset = " ".join(f"-u {u}" for u in c["unset"])
        if c["model_error"]:
            out.warn(f"{c['engine']}: {c['model_error']} (a real run stops here)")
        out.info(f"# {c['engine']} (served as {c['served_name'] or '?'}; ready: {c['ready']} within {c['ready_timeout_s']:g} s, probes {c['ready_probe_timeout_s']:g} s)")
        if not c.get("spawned", True):  # a server parity does not start: its own start/stop commands, if any
            out.info(f"not started by parity; answering now: {c.get('answering')}; start: {shlex.join(c['start']) if c.get('start') else 'none (it already runs)'}; stop: {shlex.join(c['stop']) if c.get('stop') else 'none'}")
            continue
        out.info(f"env {unset} {env} {' '.join(shlex.quote(a) for a in c['argv'])}".replace("env  ", "env "))
        if c.get("reads_log"):
            out.info(f"#   its log is read for: {c['reads_log']}")
        for caveat in c.get("caveats") or ():
            out.info(f"#   note: {caveat}")
    pf = doc["preflight"]
    ports = "ports " + ", ".join(map(str, doc["ports"])) if len(doc["ports"]) > 1 else f"port {doc['ports'][0]}"
    free = "free" if doc["port_free"] else "IN USE"
    out.info(f"preflight: lock {doc['lock_dir']}; gpu: {pf['gpu']}; docker: {pf['docker']}; {ports} {free}")
    from parity.cli.common import render_go

    render_go(out, doc)


def render_summary(out, doc: dict) -> None:
    from parity.metrics.registry import console_columns, headline, render_definitions

    cols, heads = console_columns(), headline()
    rows = [[m["engine"], m["n"], f"{m['repeats']}" + (f" (+{m['invalid_repeats']} invalid)" if m["invalid_repeats"] else ""), *(m.get(k) for k in cols)] for m in doc["medians"]]
    out.table("medians of valid repeats", ["engine", "N", "repeats", *cols], rows)
    for r in doc["ratios"]:
        verdict = r["verdicts"].get("decode_agg_tps", {}).get("verdict") or r["noise"]
        p = (r.get("paired") or {}).get("decode_agg_tps") or {}
        out.info(f"{r['engine']}/{r['reference']} N={r['n']}: " + ", ".join(f"{k} {r.get(k)}" for k in heads) + f" [users' rule: {verdict}; paired: {p.get('outcome', 'not recorded')}]")
    if doc.get("paired"):
        out.table("paired block statistics (engine / reference per block; geometric mean, t interval on the logs) beside the users' rule", ["engine", "N", "metric", "ratio", "interval", "blocks", "outcome", "blocks needed", "users' rule"], paired_rows(doc))
    if doc["headline"]:
        out.info(f"headline: {doc['headline']}")
    if doc.get("placement"):  # crossover: which GPU each engine ran on, per block
        blocks = [f"block {p['block']}: " + ", ".join(f"{e} on GPU{g}" for e, g in p.items() if e != "block")
                  for p in doc["placement"]]
        out.info("crossover: " + "; ".join(blocks))
    if doc.get("binary_gates"):
        out.info("binary gates: " + "; ".join(f"{e}: " + (g["why"] if g["why"].startswith(g["status"]) else f"{g['status']} ({g['why']})") for e, g in doc["binary_gates"].items()))
    render_run_notes(out, doc)
    for p in doc["invalid_points"]:
        out.warn(f"INVALID {p}")
    from parity.efficiency.roofline import lines

    for line in lines(doc.get("efficiency")):
        out.info(line)
    out.info(render_definitions(list(dict.fromkeys(heads + cols))))
    out.info(f"-> {doc['run_dir']}")


def paired_rows(doc: dict) -> list[list]:
    """One row per engine x N x metric of summary.json's "paired", with the users' verdict of the cell."""
    users = {(r["engine"], r["n"], k): v["verdict"] for r in doc.get("ratios") or [] for k, v in (r.get("verdicts") or {}).items()}
    noise = {(r["engine"], r["n"]): r.get("noise") for r in doc.get("ratios") or []}
    rows = []
    for p in doc["paired"]:
        iv = "-" if p.get("low") is None else f"[{p['low']:.4f}, {p['high']:.4f}]"
        rows.append([p["engine"], p.get("point") or p["n"], p["metric"], "-" if p.get("ratio") is None else f"{p['ratio']:.4f}", iv, p.get("n_blocks"), p.get("outcome"),
                     p.get("blocks_needed") or "-", users.get((p["engine"], p["n"], p["metric"])) or noise.get((p["engine"], p["n"])) or "-"])  # fmt: skip
    return rows


def render_run_notes(out, doc: dict) -> None:
    """Which stop rule ended the sweep, and what the calibration chose (gen, or a workload's field)."""
    c = doc.get("calibration")
    if c:
        knob = c.get("knob", "gen")
        pts = ", ".join(f"{p['engine']} {p.get('point') or 'N=%s' % p['n']} {p['decode_window_s']}/{p['wall_s']} s" for p in c.get("points", []))
        out.info(f"calibration: {knob} {c['trial_gen']} -> {c['gen']} (target window {c['target_s']:g} s; trial windows decode/wall: {pts})" if c["gen"] != c["trial_gen"] else f"calibration: {knob} {c['gen']} kept (target window {c['target_s']:g} s; trial windows decode/wall: {pts})")
    st = doc.get("stop")
    if st and st.get("rule"):
        out.info(f"stopped by {st['rule']} after {st['blocks']} blocks: {st['why']} ({st['budget']})")


def render_workload(out, doc: dict) -> None:
    from parity.metrics.registry import render_definitions

    w, cols = doc["workload"], doc["shown"]
    rows = [[m["engine"], m["point"], f"{m['repeats']}" + (f" (+{m['invalid_repeats']} invalid)" if m["invalid_repeats"] else ""), *(m.get(k) for k in cols)] for m in doc["medians"]]
    out.table(f"workload {w['name']} ({w['kind']}): medians of valid repeats", ["engine", "point", "repeats", *cols], rows)
    from parity.workloads import WORKLOADS

    for line in WORKLOADS[w["kind"]].console(doc):  # what the kind's summarize() added (prefill-curve: its lines)
        out.info(line)
    if doc["headline"]:
        out.info(f"headline: {doc['headline']}")
    if doc.get("paired"):
        out.table("paired block statistics beside the users' rule", ["engine", "point", "metric", "ratio", "interval", "blocks", "outcome", "blocks needed", "users' rule"], paired_rows(doc))
    render_run_notes(out, doc)
    for p in doc["not_held"]:
        out.warn(f"NOT HELD {p}")
    for p in doc["invalid_points"]:
        out.warn(f"INVALID {p}")
    for p in doc.get("coarse_streams") or []:
        out.warn(f"COARSE STREAM {p}")
    out.info(render_definitions(cols))
    out.info(f"-> {doc['run_dir']}")


def render_bench_plan(out, doc: dict) -> None:
    import shlex

    what = f"arms {', '.join(doc['arms'])} (reference {doc.get('reference') or 'none'}), order {doc['order']}; {doc['blocks']}" if doc.get("arms") else "one run"
    out.info(f"bench plan: model {doc['model']}, {what}; npp {doc['npp']} ntg {doc['ntg']} npl {doc['npl']}")
    for e, argv in doc["commands"].items():
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in doc["env"][e].items())
        out.info(f"# {e}\n{('env ' + env + ' ') if env else ''}{' '.join(shlex.quote(str(a)) for a in argv)}")
    from parity.cli.common import render_go

    render_go(out, doc)
