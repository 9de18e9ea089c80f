"""parity history ingest|sql|changes|site -> parity.history.record.ingest, .sql.run_sql, .changes.changes, .site.write_site"""

from typing import List, Optional

import typer

from parity.cli.common import JsonOpt, ProfileOpt

StoreOpt = typer.Option(None, "--store", metavar="FILE", help="The history store (default: $PARITY_HISTORY, else <artifacts>/history.duckdb).")


def register(app: typer.Typer) -> None:
    hist = typer.Typer(help="Every run in a DuckDB store: SQL, change points over the nightlies, the bisection they start, a static dashboard.", no_args_is_help=True)
    app.add_typer(hist, name="history")

    @hist.command("ingest")
    def ingest(
        dirs: List[str] = typer.Argument(..., metavar="DIR...", help="Run directories, or directories holding them (parity runs, the users' artifact dirs, copies of summary.json/bench.json)."),
        store: Optional[str] = StoreOpt,
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """Add existing run directories to the store (a run already there is replaced)."""
        from parity.cli.common import make_context
        from parity.history.record import IngestRequest
        from parity.history.record import ingest as run

        ctx = make_context(profile, json)
        doc = run(ctx, IngestRequest(paths=list(dirs), store=store))

        def human():
            rows = [[d["run_id"], d["kind"], d["origin"], str(d["run_at"] or "-"), d["rows"], d["paired"], d["gates"]] for d in doc["ingested"]]
            ctx.out.table(f"ingested into {doc['store']}", ["run", "kind", "origin", "at", "rows", "paired", "gates"], rows)
            for d in doc["ingested"]:
                for why in d["left_out"]:
                    ctx.out.warn(f"{d['run_id']}: {why}")
            for s in doc["skipped"]:
                ctx.out.warn(f"skipped {s['path']}: {s['why']}")
            for p in doc["no_runs"]:
                ctx.out.warn(f"{p}: no run directory found")
            ctx.out.info(f"{len(doc['ingested'])} runs in {doc['seconds']:.2f} s; store {doc['store_bytes'] / 1024:.0f} KiB")

        ctx.out.emit(doc, human)

    @hist.command("sql")
    def sql(
        statement: str = typer.Argument(..., metavar="SQL", help="A read-only statement, e.g. \"SELECT run_id, pin FROM runs ORDER BY at\" (tables: runs builds rows medians paired gates telemetry levers change_points; view: series)."),
        store: Optional[str] = StoreOpt,
        csv_out: Optional[str] = typer.Option(None, "--csv", metavar="FILE",
                                              help="Write the result as CSV to FILE ('-': stdout, instead of the table)."),
        parquet_out: Optional[str] = typer.Option(None, "--parquet", metavar="FILE",
                                                  help="Write the result as Parquet to FILE."),
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """Query the store with SQL (DuckDB, read-only); the result as a table, CSV or Parquet."""
        import sys

        from parity.cli.common import make_context
        from parity.history.sql import SqlRequest, check_outputs, run_sql, write_result

        check_outputs(csv_out, parquet_out, json)
        ctx = make_context(profile, json)
        doc = run_sql(ctx, SqlRequest(sql=statement, store=store))
        if not (csv_out or parquet_out):
            rows = [["-" if v is None else v for v in r] for r in doc["rows"]]
            return ctx.out.emit(doc, lambda: ctx.out.table(None, doc["columns"], rows))
        written = write_result(doc, csv_out, parquet_out)
        if "csv_text" in written:
            sys.stdout.write(written.pop("csv_text"))

        def human():
            for what, path in written.items():
                line = f"{len(doc['rows'])} rows x {len(doc['columns'])} columns -> {path} ({what})"
                if csv_out == "-":  # stdout holds the CSV
                    print(line, file=sys.stderr)
                else:
                    ctx.out.info(line)

        ctx.out.emit({**doc, "written": written}, human)

    @hist.command("changes")
    def changes(
        match: Optional[str] = typer.Option(None, "--series", metavar="TEXT", help="Only series whose id holds TEXT (ids: 'hardware | engine/reference | workload | point | metric')."),
        metric: Optional[List[str]] = typer.Option(None, "--metric", metavar="NAME", help="Only this metric (repeatable)."),
        kind: str = typer.Option("paired", "--kind", metavar="paired|median|all", help="paired: each run's ratio engine/reference (drift cancelled in its blocks); median: one engine's median."),
        max_pvalue: float = typer.Option(0.001, "--max-pvalue", metavar="P", help="Significance of a change (Otava's default 0.001)."),
        window: int = typer.Option(30, "--window", metavar="N", help="Points per sliding window (Otava's default is 50)."),
        min_points: int = typer.Option(10, "--min-points", metavar="N", help="A series shorter than this calls no change."),
        min_after: int = typer.Option(3, "--min-after", metavar="N", help="A change is confirmed once N points stand after it (pending before)."),
        bisect: bool = typer.Option(False, "--bisect", help="Run the bisect command of each confirmed change not bisected yet (and remember it and its result in the store)."),
        store: Optional[str] = StoreOpt,
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """Change points over every series of the store, the runs and pins on each side, the step with its interval, and the bisection that searches it."""
        from collections import Counter

        from parity.cli.common import make_context
        from parity.history.changes import ChangesRequest
        from parity.history.changes import changes as run
        from parity.history.nightly import line

        ctx = make_context(profile, json)
        doc = run(ctx, ChangesRequest(store=store, match=match, metrics=metric or None, kind=kind, max_pvalue=max_pvalue, window=window, min_points=min_points, min_after=min_after, bisect=bisect))

        def human():
            short = [s for s in doc["series"] if s["status"] != "analysed"]
            ctx.out.info(f"{len(doc['series'])} series in {doc['store']} ({len(short)} too short); {doc['method']}")
            if doc["left_out"]:
                whys = Counter(r["why"] for r in doc["left_out"])
                ctx.out.info(f"{len(doc['left_out'])} runs of the store are no point of any series: "
                             + ", ".join(f"{n} {w}" for w, n in whys.most_common()))
            for c in doc["changes"]:
                ctx.out.info(line(c).replace("[history] ", ""))
                ctx.out.info(f"  before: runs {c['before']['first']} .. {c['before']['last']}; pins {', '.join(c['before']['pins']) or '-'}; series {', '.join(c['before']['series_digests']) or '-'}")
                ctx.out.info(f"  after:  runs {c['after']['first']} .. {c['after']['last']}; pins {', '.join(c['after']['pins']) or '-'}; series {', '.join(c['after']['series_digests']) or '-'}")
                ctx.out.info(f"  bisect: {c['bisect']['command']}" if c["bisect"]["command"] else f"  no bisection: {c['bisect']['why']}")
            for b in doc["bisections"]:
                ctx.out.info(f"bisection of {b['series_id']}: exit {b['exit_code']}, culprit {b['culprit'] or '-'} -> {b['run_dir'] or '-'}")
            if not doc["changes"]:
                ctx.out.info("no change point")

        ctx.out.emit(doc, human)

    @hist.command("site")
    def site(
        out: str = typer.Argument(..., metavar="OUT", help="The directory the static site is written to (index.html, series/, runs/)."),
        match: Optional[str] = typer.Option(None, "--series", metavar="TEXT", help="Only series whose id holds TEXT."),
        kind: str = typer.Option("paired", "--kind", metavar="paired|median|all", help="Which series (as for changes)."),
        store: Optional[str] = StoreOpt,
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """A static dashboard of the store: a page per series (its points, intervals and change points), the open change points and their bisections."""
        from parity.cli.common import make_context
        from parity.history.site import SiteRequest, write_site

        ctx = make_context(profile, json)
        doc = write_site(ctx, SiteRequest(out=out, store=store, match=match, kind=kind))

        def human():
            for why in doc["skipped"]:
                ctx.out.warn(why)
            ctx.out.info(f"{doc['series']} series, {doc['runs']} runs, {doc['changes']} change points -> "
                         f"{doc['index']}")

        ctx.out.emit(doc, human)
