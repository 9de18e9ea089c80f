"""parity bisect -> parity.bisect.run.bisect; parity canary -> parity.bisect.canary.canary"""

from typing import Optional

import typer

from parity.cli.common import JsonOpt, ProfileOpt


def register(app: typer.Typer) -> None:
    @app.command("bisect")
    def bisect(
        over: str = typer.Option("series", "--over", metavar="series|pin", help="Bisect the patch series (at the pin) or llama.cpp commits (with the series)."),
        criterion: str = typer.Option("md5", "--criterion", "-c", metavar="NAME", help="series: md5 | oracle | metric; pin: apply | build | md5 | metric."),
        engine: str = typer.Option("paged", "--engine", "-e", metavar="NAME", help="The engine whose series and build flags the probes use."),
        series: Optional[str] = typer.Option(None, "--series", metavar="DIR", help="A NNNN-*.patch series instead of the engine's."),
        first: Optional[str] = typer.Option(None, "--first", metavar="NNNN", help="series: the first patch of the range (good = the patches before it; default: stock)."),
        last: Optional[str] = typer.Option(None, "--last", metavar="NNNN", help="series: the last patch of the range (the known-bad endpoint; default: the last patch)."),
        repo: Optional[str] = typer.Option(None, "--repo", metavar="PATH|URL", help="pin: the llama.cpp checkout or clone (default: the engine's source checkout or url)."),
        good: Optional[str] = typer.Option(None, "--good", metavar="COMMIT", help="pin: the good commit (the series applies, builds, gives the md5)."),
        bad: Optional[str] = typer.Option(None, "--bad", metavar="COMMIT", help="pin: the bad commit."),
        model: Optional[str] = typer.Option(None, "--model", "-m", metavar="NAME|PATH", help="md5: the model (default: the first of gates.models); metric: the bench model (serving.model)."),
        path: Optional[str] = typer.Option(None, "--path", metavar="PATH", help="The engine path (env) every probe runs (default: the engine's default path)."),
        ops: Optional[str] = typer.Option(None, "--ops", metavar="OP,...", help="oracle: test-backend-ops ops (default: gates.ops)."),
        backend: Optional[str] = typer.Option(None, "--backend", metavar="NAME", help="oracle: the backend (default: gates.op_backend)."),
        metric: str = typer.Option("s_tg", "--metric", metavar="s_tg|s_pp|s", help="metric: the llama-batched-bench throughput judged."),
        min_delta: Optional[float] = typer.Option(None, "--min-delta-pct", metavar="PCT", help="metric: regressed beyond this = bad (default: stats.min_delta_pct)."),
        blocks: int = typer.Option(3, "--blocks", metavar="N", help="metric: paired blocks per probe before its first verdict."),
        max_blocks: int = typer.Option(8, "--max-blocks", metavar="N", help="metric: an inconclusive probe gets blocks up to N, then the bisection stops undecided."),
        npp: Optional[str] = typer.Option(None, "--npp", metavar="N,..", help="metric: prompt lengths (default: serving.bench.npp)."),
        ntg: Optional[str] = typer.Option(None, "--ntg", metavar="N,..", help="metric: generated lengths (default: serving.bench.ntg)."),
        npl: Optional[str] = typer.Option(None, "--npl", metavar="N,..", help="metric: parallel sequences (default: serving.bench.npl)."),
        targets: Optional[str] = typer.Option(None, "--targets", metavar="T,..", help="What each probe builds (default: what the criterion runs; build: the engine's targets)."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Print the checked plan (endpoints, candidates, the bound) and the go / no-go; build nothing."),
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """The first patch (or llama.cpp commit) that turns a gate red or moves a metric beyond the rule; exit 1 when none can be named."""
        from parity.cli.common import make_context, parse_int_list, parse_str_list

        ctx = make_context(profile, json)  # the profile and the lists are checked before the measurement code loads
        lists = dict(ops=parse_str_list(ops) or [], npp=parse_int_list(npp, "--npp"), ntg=parse_int_list(ntg, "--ntg"), npl=parse_int_list(npl, "--npl"))
        target_list = parse_str_list(targets)
        from parity.bisect.probe import Judge
        from parity.bisect.run import BisectRequest, NoCulprit
        from parity.bisect.run import bisect as run

        judge = Judge(criterion, model=model, path=path, backend=backend, metric=metric, threshold_pct=min_delta, blocks=blocks, max_blocks=max_blocks, **lists)
        req = BisectRequest(over=over, criterion=criterion, engine=engine, series=series, first=first, last=last, repo=repo, good=good, bad=bad, targets=target_list, judge=judge, dry_run=dry_run)
        if dry_run:
            doc = run(ctx, req)
            ctx.out.emit(doc, lambda: _render_plan(ctx.out, doc))
            from parity.gonogo import raise_if_no_go

            raise_if_no_go(doc["go_no_go"], doc["run_dir"])
            return
        try:
            doc = run(ctx, req)
        except NoCulprit as e:
            ctx.out.emit(e.doc, lambda doc=e.doc: _render(ctx.out, doc))
            raise
        ctx.out.emit(doc, lambda: _render(ctx.out, doc))

    @app.command("canary")
    def canary(
        upstream: str = typer.Option(..., "--upstream", metavar="REF", help="The upstream commit or ref (e.g. origin/master) to apply the series to."),
        repo: Optional[str] = typer.Option(None, "--repo", metavar="PATH|URL", help="The llama.cpp checkout or clone (default: the engine's source checkout or url)."),
        engine: str = typer.Option("paged", "--engine", "-e", metavar="NAME", help="The engine whose series is applied."),
        series: Optional[str] = typer.Option(None, "--series", metavar="DIR", help="A NNNN-*.patch series instead of the engine's."),
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """Apply the series strictly at an upstream commit: exit 0 green (the applied tree), 1 red (the first failing patch and hunk), 2 usage, 4 infra."""
        from parity.bisect.canary import EXIT_RED, CanaryRequest
        from parity.bisect.canary import canary as run
        from parity.cli.common import make_context

        ctx = make_context(profile, json)
        doc = run(ctx, CanaryRequest(upstream=upstream, repo=repo, engine=engine, series=series))
        ctx.out.emit(doc, lambda: ctx.out.info(f"{doc['line']} -> {doc['run_dir']}"))
        raise typer.Exit(0 if doc["green"] else EXIT_RED)


def _render_plan(out, doc: dict) -> None:
    from parity.cli.common import render_go

    out.info(f"bisect plan over the {doc['over']} ({doc['criterion']}): {doc['n']} candidates between {doc['labels'][0]} (good) and {doc['labels'][-1]} (bad); at most {doc['bound']} probes, each building {', '.join(doc['targets'] or []) or 'its targets'}")
    render_go(out, doc)


def _render(out, doc: dict) -> None:
    from parity.bisect import search

    probes = [search.Probe(**d) for d in doc["probes"]]
    out.table(f"bisect over the {doc['over']} ({doc['criterion']})", search.COLUMNS, search.rows(probes))
    head = f"culprit: {doc['culprit']}" if doc.get("culprit") else "no culprit"
    out.info(f"{head} ({doc.get('probes_counted', '?')} probes, bound {doc['bound']}): {doc.get('reason', '')} -> {doc['run_dir']}")
