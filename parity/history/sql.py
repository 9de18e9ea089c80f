"""`parity history sql`: any read-only SQL over the store (tables runs, builds, rows, medians,
paired, gates, telemetry, levers, change_points; the view series)."""

from __future__ import annotations

from dataclasses import dataclass

from parity.errors import UsageError
from parity.history import store


@dataclass
class SqlRequest:
    sql: str
    store: str | None = None


def run_sql(ctx, req: SqlRequest) -> dict:
    path = store.resolve(req.store, ctx.artifacts_root)
    if path is None:
        raise UsageError(f"the history store is off ({store.ENV}=off): give --store FILE")
    if not req.sql.strip():
        raise UsageError("parity history sql needs a statement")
    with store.connect(path, write=False) as con:
        cols, rows = store.query(con, req.sql)
    return {"store": str(path), "columns": cols, "rows": [[store.plain(v) for v in r] for r in rows]}
