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
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """Query the store with SQL (DuckDB, read-only)."""
        from parity.cli.common import make_context
        from parity.history.sql import SqlRequest, run_sql

        ctx = make_context(profile, json)
        doc = run_sql(ctx, SqlRequest(sql=statement, store=store))
        ctx.out.emit(doc, lambda: ctx.out.table(None, doc["columns"], [["-" if v is None else v for v in r] for r in doc["rows"]]))
