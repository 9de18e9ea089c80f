"""parity capacity -> parity.capacity.run.capacity"""

from typing import Optional

import typer

from parity.cli.common import JsonOpt, ProfileOpt, flag


def register(app: typer.Typer) -> None:
    @app.command("capacity")
    def capacity(
        slo: Optional[str] = typer.Option(
            None, "--slo", metavar="Q_pP_ms=MS,...",
            help="Latency objectives, e.g. ttft_p99_ms=500,itl_p99_ms=50 (ttft, itl, tpot, e2e; ttft_ms=500 takes "
                 "--attainment)."),
        attainment: Optional[float] = typer.Option(
            None, "--attainment", metavar="F",
            help="The share of samples an objective without its own _pNN must hold, a fraction (default 0.99)."),
        load: str = typer.Option("concurrency", "--load", metavar="concurrency|rate",
                                 help="Load as clients (closed loop) or requests per second (open loop)."),
        start: Optional[float] = typer.Option(None, "--start", metavar="L",
                                              help="The bracket's first load (default 1)."),
        max_load: Optional[float] = typer.Option(
            None, "--max-load", metavar="L",
            help="The largest load probed (default 4096): a capacity past it is named."),
        requests: Optional[int] = typer.Option(
            None, "--requests", metavar="N",
            help="Measured requests per probe of a block (default 300; the bracket's a third, at least 20)."),
        engines: Optional[str] = typer.Option(
            None, "--engines", metavar="A,B",
            help="Engines (default: serving.engines); the ratio is each / the reference (serving.reference_engine "
                 "if listed, else the last)."),
        model: Optional[str] = typer.Option(None, "--model", "-m", help="Model name (default: serving.model)."),
        ptok: Optional[int] = typer.Option(None, "--ptok", help="Mean prompt tokens (each request draws 0.5-1.5x)."),
        gen: Optional[int] = typer.Option(None, "--gen", help="Mean generated tokens (each request draws 0.5-1.5x)."),
        parallel: Optional[int] = typer.Option(None, "--parallel",
                                               help="llama-server --parallel (default serving.parallel)."),
        repeat: Optional[int] = flag("repeat", " Default 6."),
        until_ci: Optional[str] = flag("until_ci", " Here: the capacity ratio's half-width, PCT only."),
        max_repeats: Optional[int] = flag("max_repeats"),
        budget_s: Optional[float] = flag("budget_s"),
        no_gates: bool = typer.Option(False, "--no-gates", help="Skip pre/post gates (the run is marked ungated)."),
        dry_run: bool = typer.Option(False, "--dry-run",
                                     help="Print the plan the real run executes; start and write nothing."),
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):  # fmt: skip
        """Capacity at SLA: per engine the highest load that meets the objectives, and the capacity ratio with a
        paired 95 % interval."""
        from parity.cli.common import make_context, parse_str_list

        ctx = make_context(profile, json)
        from parity.capacity.run import CapacityRequest
        from parity.capacity.run import capacity as run

        req = CapacityRequest(slo=slo, engines=parse_str_list(engines), model=model, attainment=attainment, load=load,
                              start=start, max_load=max_load, requests=requests, repeat=repeat, until_ci=until_ci,
                              max_repeats=max_repeats, budget_s=budget_s, ptok=ptok, gen=gen, parallel=parallel,
                              gates=not no_gates, dry_run=dry_run)  # fmt: skip
        doc = run(ctx, req)
        ctx.out.emit(doc, lambda: (render_plan if dry_run else render_result)(ctx.out, doc))
        if not dry_run and not doc["valid"]:
            from parity.errors import InvalidMeasurement

            n, first = len(doc["problems"]), doc["problems"][0]
            raise InvalidMeasurement(f"{n} problem(s), first: {first} (numbers written, marked invalid: "
                                     f"{doc['run_dir']})")  # fmt: skip


def render_plan(out, doc: dict) -> None:
    import shlex

    out.info(f"capacity plan: model {doc['model']}, engines {', '.join(doc['engines'])} (reference {doc['reference']}"
             + (f"; ratio {', '.join(doc['ratio'])})" if doc["ratio"] else ")"))
    out.info(f"objectives: {'; '.join(doc['objectives'])}; load: {doc['load']}")
    for key in ("bracket", "levels", "blocks", "prompts", "stop", "gates"):
        out.info(f"{key}: {doc[key]}")
    out.info("order: " + "; ".join(doc["order"]))
    for n in doc["notes"]:
        out.info(f"note: {n}")
    for c in doc["commands"]:
        if "error" in c:
            out.info(f"# {c['engine']}: {c['error']}")
            continue
        if c.get("model_error"):
            out.warn(f"{c['engine']}: {c['model_error']} (a real run stops here)")
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in c["env"].items())
        out.info(f"# {c['engine']} (ready: {c['ready']} within {c['ready_timeout_s']:g} s)\n"
                 f"env {env} {' '.join(shlex.quote(a) for a in c['argv'])}".replace("env  ", "env "))
    pf = doc["preflight"]
    port = "free" if doc["port_free"] else "IN USE"
    out.info(f"preflight: lock {doc['lock_dir']}; gpu: {pf['gpu']}; port {doc['port']} {port}")


def render_result(out, doc: dict) -> None:
    u = doc["units"]
    for e, r in doc["engines"].items():
        c = r["capacity"]
        iv = f" [{c['low']:.4g}, {c['high']:.4g}]" if c.get("low") is not None else ""
        val = "n/a" if c.get("value") is None else f"{c['value']:.4g}"
        k = r.get("capacity_pct_per_pct")
        moves = f" (1 % on it moves the capacity {k:.2g} %)" if k is not None else ""
        out.info(f"{e}: capacity {val} {u}{iv} (95 %, {c['n']} blocks), binds {r['binds'] or 'n/a'}{moves}")
        if k is not None and k > 1:
            out.info(f"note: {e}'s {r['binds']} changes slowly with the load where it binds: noise of a few % in it "
                     f"moves the capacity {k:.2g}x as far; a limit where it climbs faster (past a queueing knee) "
                     "gives a tighter interval")
    for r in doc["ratios"]:
        if r["ratio"] is None:
            out.info(f"{r['engine']}/{r['reference']}: no ratio ({r['reason']})")
            continue
        iv = f" [{r['low']:.4f}, {r['high']:.4f}]" if r["low"] is not None else ""
        out.info(f"{r['engine']}/{r['reference']} capacity: {r['ratio']:.4f}{iv} over {r['n_blocks']} blocks -> "
                 f"{r['outcome']}"
                 f" (threshold +-{r['threshold_pct']:g} %){'; ' + r['reason'] if r.get('reason') else ''}")
    rows = [[e, f["load"], f["blocks"], fmt(f["throughput_tps_per_gpu"]), fmt(f["user_tps"]),
             "yes" if f["pareto"] else ""]
            for e, fs in doc["frontier"].items() for f in fs]  # fmt: skip
    if rows:
        out.table("frontier: throughput per GPU against one user's decode rate (geometric means, 95 % t intervals "
                  "over blocks)",
                  ["engine", f"load ({u})", "blocks", "tok/s per GPU", "tok/s per user", "Pareto"], rows)  # fmt: skip
    for e, en in doc["energy"].items():
        out.info(f"{e}: {en['j_per_output_tok_median']:.4g} J per output token (median of {en['probes']} probes)"
                 if en["j_per_output_tok_median"] is not None
                 else f"{e}: energy per token: {en['why'] or 'not measured'}")
    for r in doc.get("energy_ratios", []):
        if r["ratio"] is not None and r["quantity"] == "j_per_output_tok":
            iv = f" [{r['low']:.4f}, {r['high']:.4f}]" if r["low"] is not None else ""
            out.info(f"{r['engine']}/{r['reference']} J per output token at the same loads: {r['ratio']:.4f}{iv} over "
                     f"{r['n_blocks']} blocks -> {r['outcome']} (lower is better)")
    st = doc["stop"]
    out.info(f"stopped by {st['rule']} after {st['blocks']} blocks: {st['why']}; {doc['requests']} requests, "
             f"{doc['seconds']:g} s of probes")
    for n in doc["notes"]:
        out.info(f"note: {n}")
    for p in doc["problems"]:
        out.warn(f"PROBLEM {p}")
    out.info(f"-> {doc['run_dir']}")


def fmt(iv: dict) -> str:
    if iv.get("value") is None:
        return "n/a"
    return f"{iv['value']:.4g}" + (f" [{iv['low']:.4g}, {iv['high']:.4g}]" if iv.get("low") is not None else "")
