"""parity ab -> parity.levers.ab.run; parity levers -> parity.levers.map (list, filter, render);
parity levers import -> parity.levers.seeds.importer.import_history"""

from typing import List, Optional

import typer

from parity.cli.common import JsonOpt, ProfileOpt, flag


def register(app: typer.Typer) -> None:
    @app.command("ab")
    def ab(
        engine: Optional[str] = typer.Option(None, "--engine", "-e", help="Base engine: arm A (default: gates.engine, else the first llama engine)."),
        env: Optional[List[str]] = typer.Option(None, "--env", metavar="NAME=VALUE", help="Runtime lever: arm B is the same build with this env (repeatable)."),
        server_arg: Optional[List[str]] = typer.Option(None, "--server-arg", metavar="'--FLAG VALUE'", help="Runtime lever: arm B's server gets these arguments too (repeatable; with --serving)."),
        series_without: Optional[List[str]] = typer.Option(None, "--series-without", metavar="NNNN", help="Build lever: arm B without this patch (repeatable)."),
        series_until: Optional[str] = typer.Option(None, "--series-until", metavar="NNNN", help="Build lever: arm B with the patches numbered <= NNNN only."),
        series: Optional[str] = typer.Option(None, "--series", metavar="DIR", help="Build lever: arm B built with another series directory."),
        pin: Optional[str] = typer.Option(None, "--pin", metavar="REF", help="Build lever: arm B is the series applied at this llama.cpp commit (of --repo)."),
        repo: Optional[str] = typer.Option(None, "--repo", metavar="PATH|URL", help="--pin: the llama.cpp checkout or clone (default: the engine's source checkout or url)."),
        name: Optional[str] = typer.Option(None, "--name", metavar="LEVER", help="The lever's name in the map (default: derived from the lever, e.g. 'LLAMA_X=1' or 'series-without=0055')."),
        reopen: Optional[str] = typer.Option(None, "--reopen", metavar="REASON", help="Run a lever the map closed (REJECTED, FLAT, NO-GO, DROPPED here) again; the reason is recorded."),
        lossy: bool = typer.Option(False, "--lossy", help="The lever may change output: gate it by the KL band (gates.kl) instead of equal md5s."),
        serving: bool = typer.Option(False, "--serving", help="Measure with the serving sweep (paired blocks) instead of llama-batched-bench."),
        metric: Optional[str] = typer.Option(None, "--metric", metavar="METRIC",
                                             help="With --serving: the metric the verdict reads, one of stats.metrics (default: the first; "
                                                  "a TTFT lever: ttft_mean_ms)."),
        ops: Optional[str] = flag("ops"),
        ops_backend: Optional[str] = flag("ops_backend"),
        ops_params: Optional[str] = flag("ops_params"),
        model: Optional[str] = typer.Option(None, "--model", "-m", help="Model to measure (default: serving.model)."),
        npl: Optional[str] = typer.Option(None, "--npl", metavar="N,...", help="Parallel sequences / concurrency (default: serving.bench.npl, or serving.npl with --serving)."),
        npp: Optional[str] = typer.Option(None, "--npp", metavar="N,...", help="batched-bench prompt lengths (default: serving.bench.npp)."),
        ntg: Optional[str] = typer.Option(None, "--ntg", metavar="N,...", help="batched-bench generated tokens (default: serving.bench.ntg)."),
        repeat: Optional[int] = flag("repeat"),
        until_ci: Optional[str] = flag("until_ci"),
        max_repeats: Optional[int] = flag("max_repeats"),
        budget_s: Optional[float] = flag("budget_s"),
        order: Optional[str] = flag("order"),
        gate_models: Optional[str] = typer.Option(None, "--gate-models", metavar="M,...", help="Models the md5 gate runs (default: gates.models)."),
        gate_paths: Optional[str] = typer.Option(None, "--gate-paths", metavar="P,...", help="Paths the md5 gate runs (default: gates.paths)."),
        no_post_gates: bool = typer.Option(False, "--no-post-gates", help="Gate both arms before the measurement only."),
        map_file: Optional[str] = typer.Option(None, "--map", metavar="FILE", help="The lever map (default: levers.map, else <artifacts>/lever_map.yaml)."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Say what would be built, gated, measured, locked and which map row is checked; start nothing."),
        aa: bool = typer.Option(False, "--aa", help="The arms are meant to be identical (same build, same env): an A/A of this setup, recorded as '<lever> (A/A)'. Without it such an A/B is refused."),
        marker: Optional[List[str]] = typer.Option(None, "--marker", metavar="REGEX",
                                                   help="A line the lever prints (its trace marker): arm B's logs must hold it, else NOT ENGAGED (repeatable)."),
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """One lever A/B: both arms built, gated (md5 per path, or --lossy KL), measured in paired blocks; verdict GO / NO-GO / FLAT / INCONCLUSIVE (NOT ENGAGED when arm B shows no sign of the lever) into the lever map."""
        from parity.cli.common import make_context, parse_int_list, parse_str_list

        ctx = make_context(profile, json)  # the profile and the lists are checked before the measurement code loads
        lists = dict(npl=parse_int_list(npl, "--npl"), npp=parse_int_list(npp, "--npp"), ntg=parse_int_list(ntg, "--ntg"), gate_models=parse_str_list(gate_models), gate_paths=parse_str_list(gate_paths))
        from parity.levers.ab import ABRequest
        from parity.levers.ab import run as run_ab

        req = ABRequest(engine=engine, env=env or [], server_args=server_arg or [], series_without=series_without or [], series_until=series_until, series=series, pin=pin, repo=repo, name=name, reopen=reopen, lossy=lossy,
                        serving=serving, model=model, repeat=repeat, until_ci=until_ci, max_repeats=max_repeats, budget_s=budget_s, order=order,
                        post_gates=not no_post_gates, map=map_file, dry_run=dry_run, aa=aa, markers=marker or [],
                        ops=ops, ops_backend=ops_backend, ops_params=ops_params, metric=metric, **lists)  # fmt: skip
        if ops is None and (ops_backend or ops_params):
            from parity.errors import UsageError

            raise UsageError(f"{'--ops-backend' if ops_backend else '--ops-params'} needs --ops")
        doc = run_ab(ctx, req)
        ctx.out.emit(doc, lambda: (render_plan if dry_run else render_result)(ctx.out, doc))
        if dry_run and doc["map"]["refusal"] and not reopen:
            from parity.levers.map import LeverRefused

            raise LeverRefused(f"lever {doc['lever']!r} {doc['map']['refusal']}")
        eng = doc.get("engagement") or {}
        if not dry_run and doc["verdict"] == "NOT ENGAGED":
            from parity.errors import NotEngaged

            raise NotEngaged(f"lever {doc['lever']}: NOT ENGAGED, {eng.get('why')} (recorded: {doc['run_dir']})")
        if not dry_run and not doc["gates"]["ok"]:
            from parity.errors import GateFailed

            raise GateFailed(f"lever {doc['lever']}: NO-GO, gate red: {doc['gates']['problem']} (measured and recorded: {doc['run_dir']})")
        if not dry_run and doc.get("missing"):
            from parity.errors import InvalidMeasurement

            raise InvalidMeasurement(f"lever {doc['lever']}: {doc['verdict']}, {doc['why']} (recorded: {doc['run_dir']})")

    group = typer.Typer(name="levers", help="The lever map: every A/B's verdict, key number, gates and artifact; `import` loads the users' history.",
                        invoke_without_command=True, no_args_is_help=False, rich_markup_mode=None)  # fmt: skip

    @group.callback(invoke_without_command=True)
    def levers(
        tctx: typer.Context,
        verdict: Optional[str] = typer.Option(None, "--verdict", metavar="V[,V]", help="Only rows with this verdict (GO, NO-GO, FLAT, INCONCLUSIVE, NOT ENGAGED, or your own words)."),
        hardware: Optional[str] = typer.Option(None, "--hardware", metavar="CLASS", help="Only rows of this hardware class (hopper, cpu_only, ...)."),
        lever: Optional[str] = typer.Option(None, "--lever", metavar="TEXT", help="Only levers whose name holds TEXT."),
        markdown: bool = typer.Option(False, "--markdown", help="Print the map as the markdown table (the users' layout)."),
        map_file: Optional[str] = typer.Option(None, "--map", metavar="FILE", help="The lever map (default: levers.map, else <artifacts>/lever_map.yaml)."),
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """The lever map: every A/B's verdict, key number, gates and artifact, filtered."""
        if tctx.invoked_subcommand is not None:
            return
        from parity.cli.common import make_context
        from parity.levers.map import LeversRequest, listing

        ctx = make_context(profile, json)
        doc = listing(ctx, LeversRequest(map=map_file, verdict=verdict, hardware=hardware, lever=lever))
        rows, path = doc["rows"], doc["map"]
        if markdown and not json:
            import sys

            sys.stdout.write(doc["markdown"])
            return

        for problem in doc["problems"]:  # a NaN or inf in a row: null in the result, named here
            ctx.out.warn(f"lever map {path}: {problem}")

        def human():
            ctx.out.table(f"lever map {path} ({len(rows)} row(s); artifacts and pins: --json or --markdown)",
                          ["#", "lever", "phase", "verdict", "key number", "gates", "hardware", "date"],
                          [[i, r.get("lever"), r.get("phase"), r.get("verdict"), r.get("key_number"), r.get("gates"), r.get("hardware_class"), r.get("date")]
                           for i, r in enumerate(rows, 1)])

        ctx.out.emit(doc, human)

    @group.command("import")
    def import_(
        seeds: Optional[str] = typer.Option(None, "--seeds", metavar="DIR",
                                            help="The users' seed documents (default: ../shared/seeds beside the checkout); "
                                            "VLLM_PARITY_LEVER_MAP.md is read from ../localai-paged/docs beside DIR when DIR has none."),
        doc_files: Optional[List[str]] = typer.Option(None, "--doc", metavar="FILE",
                                                      help="Another document to read (repeatable): a markdown lever map or a rendered seed."),
        hardware: str = typer.Option("gb10_or_workstation_blackwell", "--hardware", metavar="CLASS|any",
                                     help="The hardware class the imported verdicts hold on (the seeds were measured on the GB10); `any`: every class."),
        map_file: Optional[str] = typer.Option(None, "--map", metavar="FILE", help="The lever map (default: levers.map, else <artifacts>/lever_map.yaml)."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Count what would be imported; write nothing."),
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """The users' history into the lever map: the seeds' lever tables, Phase records and verdict lists (idempotent; your edits stay)."""
        from pathlib import Path

        from parity.cli.common import make_context
        from parity.levers.map import default_path
        from parity.levers.seeds.importer import ImportRequest, import_history

        ctx = make_context(profile, json)
        path = Path(map_file).expanduser() if map_file else default_path(ctx.profile, ctx.artifacts_root)
        req = ImportRequest(seeds=seeds, docs=doc_files or [], map=map_file, hardware=hardware, dry_run=dry_run)
        doc = import_history(req, path)

        def human():
            ctx.out.table(f"{doc['entries']} verdicts in {len(doc['sources'])} document(s)", ["document", "format", "entries", "repeats"],
                          [[s["file"], s["format"], s["entries"], s["repeats"]] for s in doc["sources"]])
            ctx.out.info("verdicts: " + ", ".join(f"{v} {n}" for v, n in doc["verdicts"].items()))
            ctx.out.info(f"closed env levers (parity ab --env refuses them until --reopen): {len(doc['closing_env_levers'])}")
            there = f", {doc['already']} already there" if doc["already"] else ""
            what = "would add" if doc["dry_run"] else "added"
            ctx.out.info(f"map {doc['map']}: {what} {doc['added']} row(s){there}" + (f" (+ {doc['markdown']})" if doc["markdown"] else ""))

        ctx.out.emit(doc, human)

    app.add_typer(group, name="levers")


def render_plan(out, doc: dict) -> None:
    import shlex

    out.info(f"ab plan: lever {doc['lever']} ({doc['kind']}): {doc['changes']}; A = {doc['arms']['A']}, B = {doc['arms']['B']}")
    for arm, b in doc["builds"].items():
        what = f"prebuilt {b['prebuilt']}" if "prebuilt" in b else f"build {b['key']} ({'cached' if b['cached'] else 'to build, before the lock'}; {b['patches']} patches" + (f", {b['series_selection']}" if b.get("series_selection") else "") + ")"
        out.info(f"  {arm}: {what}")
    g = doc["gates"]
    out.info(f"gates ({g['kind']}, {' and '.join(g['phases'])}): models {', '.join(g['models'])} x paths {', '.join(str(p) for p in g['paths'])}, both arms" + (f"; KL reference {g['kl']['reference']}, candidate {g['kl']['candidate']}" if g.get("kl") else ""))
    m = doc["measure"]
    out.info(f"measure: {m['kind']} on {m['model']}, {m['metric']} B/A, blocks: {m['blocks']}")
    for arm, c in (m.get("commands") or {}).items():
        out.info(f"  {arm}: env {' '.join(f'{k}={shlex.quote(v)}' for k, v in c['env'].items())} {' '.join(shlex.quote(x) for x in c['argv'])}")
    out.info(f"lock: {doc['lock']['dir']}; preflight gpu: {doc['lock']['preflight'].get('gpu')}")
    mp = doc["map"]
    ident = mp["identity"]
    out.info(f"map: {mp['path']} ({mp['rows']} rows); row checked: lever {ident['lever']!r} on {ident['hardware_class']} at pin {str(ident['pin'])[:12]}"
             + (f"; {mp['refusal']}" if mp["refusal"] else f"; earlier: {mp['earlier']['verdict']} {mp['earlier'].get('date')}" if mp["earlier"] else "; no earlier row"))  # fmt: skip
    if eng := doc.get("engagement"):
        out.info(f"engagement: {eng['why']} (NOT ENGAGED: exit 8)")


def render_result(out, doc: dict) -> None:
    if doc["measurement"]["points"] or doc["verdict"] != "NOT ENGAGED":
        out.table(f"lever {doc['lever']}: {doc['measurement']['metric']} B/A per point ({doc['arms']['B']} / {doc['arms']['A']})", ["point", "B/A", "interval", "blocks", "outcome"],
                  [[c["point"], "-" if c["ratio"] is None else f"{c['ratio']:.4f}", "-" if c["low"] is None else f"[{c['low']:.4f}, {c['high']:.4f}]", c["n_blocks"], c["outcome"]]
                   for c in doc["measurement"]["points"]])  # fmt: skip
    for line in doc["measurement"].get("ops") or []:  # --ops: per op B/A and the users' keep rule
        out.info(line)
    out.info(f"gates ({doc['gates']['kind']}): {doc['gates']['summary']}" + (f"; {doc['gates']['problem']}" if doc["gates"]["problem"] else ""))
    if eng := doc.get("engagement"):
        out.info(f"engaged: {'yes' if eng['engaged'] else 'NO'} ({eng.get('how') or 'no evidence'}): {eng['why']}")
    out.info(f"verdict: {doc['verdict']}: {doc['key']['text']}; {doc['why']}")
    out.info(f"map: {doc['map']} (+ {doc['map_markdown']}); report: {doc['run_dir']}/{doc['report']}")
    out.info(f"-> {doc['run_dir']}")
