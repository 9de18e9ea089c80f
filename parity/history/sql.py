"""`parity history sql`: read-only SQL over the store (tables runs, builds, rows, medians, paired,
gates, telemetry, levers, change_points; the view series).

Read-only by construction: the store is opened read-only with external access and extensions off
and the settings locked (parity.history.store.SAFE_CONFIG), and every statement is checked by
DuckDB's own parser before any of them runs: only the kinds that read pass.  The result prints as
a table, or is written as CSV / Parquet (--csv, --parquet: write_result)."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from parity import tables
from parity.errors import UsageError
from parity.files import atomic_write_text
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


# ----------------------------------------------------------------- the result written out (--csv, --parquet)


def check_outputs(csv_path: str | None, parquet_path: str | None, json_mode: bool) -> None:
    """--csv FILE|- and --parquet FILE, checked before the store is opened (one line, exit 2)."""
    if parquet_path == "-":
        raise UsageError("--parquet -: Parquet is binary, give a FILE (--csv - writes CSV to stdout)")
    if csv_path == "-" and json_mode:
        raise UsageError("--csv - and --json both write to stdout: give --csv a FILE")
    if csv_path and parquet_path and Path(csv_path).expanduser().resolve() == Path(parquet_path).expanduser().resolve():
        raise UsageError(f"--csv and --parquet name one file ({csv_path})")
    for opt, given in (("--csv", csv_path), ("--parquet", parquet_path)):
        if not given or given == "-":
            continue
        p = Path(given).expanduser()
        if p.is_dir():
            raise UsageError(f"{opt} {given}: a directory, not a file")
        if not p.parent.is_dir():
            raise UsageError(f"{opt} {given}: no directory {p.parent}")
        if not os.access(p.parent, os.W_OK):
            raise UsageError(f"{opt} {given}: {p.parent} is not writable")


def write_result(doc: dict, csv_path: str | None, parquet_path: str | None) -> dict:
    """run_sql's result as a DataFrame (parity.tables.frame: each column its best dtype; times as
    ISO text, as --json has them) written as CSV (a file, or "-": the text, for stdout) and as
    Parquet (DuckDB's writer: pandas' own needs pyarrow, which parity does not install).
    {"csv": path, "csv_text": text for "-", "parquet": path}."""
    if not doc["columns"]:
        raise UsageError("history sql: the statement returned no columns: nothing to write")
    frame = tables.frame(doc["columns"], doc["rows"])
    out: dict = {}
    if csv_path == "-":
        out["csv_text"] = tables.csv_of(frame)
    elif csv_path:
        atomic_write_text(Path(csv_path).expanduser(), tables.csv_of(frame))
        out["csv"] = str(Path(csv_path).expanduser())
    if parquet_path:
        out["parquet"] = str(_parquet(frame, Path(parquet_path).expanduser()))
    return out


def _parquet(frame, path: Path) -> Path:
    """Written beside path and renamed over it (a reader sees the old file or the new one)."""
    import duckdb

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        con = duckdb.connect(":memory:")  # a scratch database of its own: the store is not open here
        try:
            con.from_df(frame).write_parquet(tmp)
        finally:
            con.close()
        os.replace(tmp, path)
    except duckdb.Error as e:
        raise UsageError(f"--parquet {path}: {store.one_line(e)}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path
