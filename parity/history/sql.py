"""`parity history sql`: read-only SQL over the store (tables runs, builds, rows, medians, paired,
gates, telemetry, levers, change_points; the view series).

Read-only by construction: the store is opened read-only with external access and extensions off
and the settings locked (parity.history.store.SAFE_CONFIG), and every statement is checked by
DuckDB's own parser before any of them runs: only the kinds that read pass."""

from __future__ import annotations

from dataclasses import dataclass

from parity.errors import UsageError
from parity.history import store

READS = ("SELECT", "EXPLAIN")  # SELECT covers WITH, FROM-first, VALUES, DESCRIBE, SHOW and SUMMARIZE
PRAGMAS = ("table_info", "show", "show_tables", "show_tables_expanded", "database_size", "storage_info", "version",
           "platform")
ALLOWED = "SELECT (WITH, DESCRIBE, SHOW, SUMMARIZE), EXPLAIN of a SELECT, PRAGMA table_info"


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
        check_reads(con, req.sql)
        cols, rows = store.query(con, req.sql)
    return {"store": str(path), "columns": cols, "rows": [[store.plain(v) for v in r] for r in rows]}


def statements(con, sql: str) -> list:
    import duckdb

    try:
        return con.extract_statements(sql)
    except duckdb.Error as e:
        raise UsageError(f"history sql: {store.one_line(e)}") from None


def kind(statement) -> str:
    return str(statement.type).rsplit(".", 1)[-1].upper()


def check_reads(con, sql: str) -> None:
    """Every statement of sql reads, or none runs (a UsageError naming the first that would not)."""
    found = statements(con, sql)
    if not found:
        raise UsageError("parity history sql needs a statement")
    for i, s in enumerate(found, 1):
        why = refusal(con, s)
        if why:
            text = " ".join(s.query.split()).rstrip(";")
            text = text if len(text) <= 48 else text[:45] + "..."
            raise UsageError(f"history sql: read-only: statement {i} ({text}) is {why}, refused before any ran "
                             f"(allowed: {ALLOWED})")


def refusal(con, s) -> str | None:
    """None when statement s only reads, else what it is."""
    k = kind(s)
    words = s.query.strip().rstrip(";").split(None, 2)
    if k == "SELECT":
        return None
    if k == "EXPLAIN":  # EXPLAIN ANALYZE runs its statement: the one it explains must read too
        rest = words[1:]
        if rest and rest[0].upper() == "ANALYZE":
            rest = rest[1:]
        try:
            inner = statements(con, " ".join(rest)) if rest else []
        except UsageError:  # options or a comment before the statement: not read here, so not run
            inner = []
        return None if len(inner) == 1 and kind(inner[0]) == "SELECT" else "an EXPLAIN of anything but a plain SELECT"
    if k == "PRAGMA" and len(words) > 1:
        name = words[1].split("(", 1)[0].strip().lower()
        return None if name in PRAGMAS and "=" not in s.query else "a PRAGMA not known to only read"
    return f"of kind {k}"
