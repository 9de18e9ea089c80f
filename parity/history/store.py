"""The result store: one DuckDB file, one row set per run (parity.history.cells), written and read
under a file lock (<store>.lock) so that any number of parity processes may share it.

DuckDB lets one process at a time open a file for writing; the lock makes the others wait their
turn (a run's hook waits a bounded time, then gives up with one warning line) instead of failing."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from parity.errors import UsageError
from parity.filelock import LockTimeout, locked

SCHEMA_VERSION = 1
DEFAULT_NAME = "history.duckdb"
ENV = "PARITY_HISTORY"  # a store file, or off
OFF = ("off", "0", "no", "false", "none")

TABLES: dict[str, dict[str, str]] = {
    "runs": {
        "run_key": "VARCHAR PRIMARY KEY", "run_id": "VARCHAR", "path": "VARCHAR", "origin": "VARCHAR", "kind": "VARCHAR", "status": "VARCHAR", "counts": "BOOLEAN", "valid": "BOOLEAN", "error": "VARCHAR",
        "started": "TIMESTAMP", "ended": "TIMESTAMP", "run_at": "TIMESTAMP", "host": "VARCHAR", "hostname": "VARCHAR", "user": "VARCHAR",
        "hardware_class": "VARCHAR", "gpu": "VARCHAR", "driver": "VARCHAR", "cuda_version": "VARCHAR", "cpu": "VARCHAR",
        "pin": "VARCHAR", "series_digest": "VARCHAR", "build_keys": "VARCHAR", "engines": "VARCHAR", "reference_engine": "VARCHAR", "model": "VARCHAR",
        "profile": "VARCHAR", "campaign": "VARCHAR", "parity_version": "VARCHAR", "parity_git_sha": "VARCHAR",
        "gate_status": "VARCHAR", "problems": "VARCHAR", "report": "VARCHAR", "argv": "VARCHAR", "cwd": "VARCHAR", "notes": "VARCHAR", "ingested_by": "VARCHAR",
        "ingested_at": "TIMESTAMP DEFAULT current_timestamp",
    },
    "builds": {"run_key": "VARCHAR", "engine": "VARCHAR", "build_key": "VARCHAR", "source_kind": "VARCHAR", "pin": "VARCHAR", "series_dir": "VARCHAR", "series_digest": "VARCHAR",
               "patches": "VARCHAR", "tree_after": "VARCHAR", "cuda_archs": "VARCHAR", "flags": "VARCHAR"},
    "rows": {"run_key": "VARCHAR", "source": "VARCHAR", "workload": "VARCHAR", "engine": "VARCHAR", "point": "VARCHAR", "n": "INTEGER", "repeat": "INTEGER", "valid": "BOOLEAN",
             "metric": "VARCHAR", "value": "DOUBLE"},
    "medians": {"run_key": "VARCHAR", "source": "VARCHAR", "workload": "VARCHAR", "engine": "VARCHAR", "point": "VARCHAR", "n": "INTEGER", "metric": "VARCHAR", "value": "DOUBLE", "repeats": "INTEGER"},
    "paired": {"run_key": "VARCHAR", "source": "VARCHAR", "workload": "VARCHAR", "engine": "VARCHAR", "reference": "VARCHAR", "point": "VARCHAR", "n": "INTEGER", "metric": "VARCHAR",
               "ratio": "DOUBLE", "low": "DOUBLE", "high": "DOUBLE", "n_blocks": "INTEGER", "half_width_pct": "DOUBLE", "outcome": "VARCHAR", "blocks_needed": "INTEGER", "block_ratios": "DOUBLE[]"},
    "gates": {"run_key": "VARCHAR", "phase": "VARCHAR", "check": "VARCHAR", "expected": "VARCHAR", "got": "VARCHAR", "status": "VARCHAR"},
    "telemetry": {"run_key": "VARCHAR", "engine": "VARCHAR", "point": "VARCHAR", "n": "INTEGER", "repeat": "INTEGER", "gpu_source": "VARCHAR", "throttle": "VARCHAR", "foreign_pids": "INTEGER",
                  "samples": "DOUBLE", "sm_mhz_median": "DOUBLE", "mem_mhz_median": "DOUBLE", "power_w_median": "DOUBLE", "temp_c_max": "DOUBLE", "load1_min": "DOUBLE", "load1_max": "DOUBLE",
                  "client_cpu_s": "DOUBLE", "client_cpu_pct": "DOUBLE", "server_cpu_s": "DOUBLE", "server_cpu_pct": "DOUBLE"},
    "levers": {"run_key": "VARCHAR", "lever": "VARCHAR", "lever_kind": "VARCHAR", "engine": "VARCHAR", "changes": "VARCHAR", "verdict": "VARCHAR", "why": "VARCHAR", "metric": "VARCHAR",
               "point": "VARCHAR", "ratio": "DOUBLE", "low": "DOUBLE", "high": "DOUBLE", "n_blocks": "INTEGER", "hardware_class": "VARCHAR", "pin": "VARCHAR", "series_digest": "VARCHAR",
               "gates_ok": "BOOLEAN"},
    # change points once confirmed (parity.history.changes): the nightly alerts on new ones only
    "change_points": {"series_id": "VARCHAR", "run_key": "VARCHAR", "before_run_key": "VARCHAR", "confirmed_at": "TIMESTAMP DEFAULT current_timestamp", "confirmed_by": "VARCHAR",
                      "step_pct": "DOUBLE", "low_pct": "DOUBLE", "high_pct": "DOUBLE", "pvalue": "DOUBLE", "over": "VARCHAR", "command": "VARCHAR",
                      "bisect_run": "VARCHAR", "bisect_exit": "INTEGER", "culprit": "VARCHAR", "bisected_at": "TIMESTAMP"},
    "meta": {"key": "VARCHAR PRIMARY KEY", "value": "VARCHAR"},
}
RUN_TABLES = [t for t in TABLES if t not in ("change_points", "meta")]

# values a run is configured with, not measured (the KV cells a batched-bench point needs, the
# tokens a sweep asks for): in the rows table, never a series
CONFIG_METRICS = ("n_kv", "gen_total", "prompt_tok_total", "prompt_tokens_mean", "scheduled_rate")

# Series membership, one rule for every run kind: a run's numbers are points of its series when the
# run is dated, counts (complete, or failed only on a verdict), is not marked invalid and its gates
# passed (an ungated run, of any kind, is not a point: no gate checked what its build answered)
RUN_COUNTS = "(r.run_at IS NOT NULL AND r.counts AND r.valid IS NOT FALSE AND r.gate_status = 'pass')"
POINT_OK = "(value IS NOT NULL AND isfinite(value) AND value > 0)"  # a step is a ratio of geometric means

# every series point: a run's paired ratio engine/reference, or (reference '') one engine's median;
# member: the rule above
SERIES_SELECT = f"""
SELECT concat_ws(' | ', coalesce(r.hardware_class, '?'), p.engine || '/' || coalesce(p.reference, '?'), p.workload,
                 p.point, p.metric) AS series_id,
       r.hardware_class, p.engine, p.reference, p.workload, p.point, p.n, p.metric, 'paired' AS kind,
       p.ratio AS value, p.low, p.high, p.n_blocks AS blocks, r.run_at, r.run_key, r.run_id, r.path, r.status, r.counts,
       r.valid, r.gate_status, r.pin, r.series_digest, {RUN_COUNTS} AS run_counts
FROM paired p JOIN runs r USING (run_key) WHERE p.ratio IS NOT NULL
UNION ALL
SELECT concat_ws(' | ', coalesce(r.hardware_class, '?'), m.engine, m.workload, m.point, m.metric),
       r.hardware_class, m.engine, '' AS reference, m.workload, m.point, m.n, m.metric, 'median',
       m.value, NULL, NULL, m.repeats, r.run_at, r.run_key, r.run_id, r.path, r.status, r.counts, r.valid,
       r.gate_status, r.pin, r.series_digest, {RUN_COUNTS}
FROM medians m JOIN runs r USING (run_key) WHERE m.metric NOT IN ({", ".join(f"'{m}'" for m in CONFIG_METRICS)})
"""
SERIES_VIEW = f"CREATE OR REPLACE VIEW series AS SELECT *, run_counts AND {POINT_OK} AS member FROM ({SERIES_SELECT})"

# every connection: no extension is loaded or fetched (a foreign file or a statement would make DuckDB
# download one), no stored secret is read, no file but the store is touched, and the settings are locked
# against SET (lock_configuration last: the others are set before it)
SAFE_CONFIG = {"autoload_known_extensions": False, "autoinstall_known_extensions": False,
               "allow_community_extensions": False, "allow_persistent_secrets": False, "enable_external_access": False,
               "lock_configuration": True}
MAGIC = b"DUCK"  # bytes 8-11 of every DuckDB database file


def resolve(store: str | None, artifacts_root=None) -> Path | None:
    """--store FILE, else $PARITY_HISTORY, else <artifacts>/history.duckdb; None when set to off."""
    value = store if store is not None else os.environ.get(ENV)
    if value is not None and value.strip().lower() in OFF:
        return None
    if value:
        return Path(value).expanduser()
    return Path(artifacts_root or os.environ.get("PARITY_ARTIFACTS") or "runs").expanduser() / DEFAULT_NAME


def one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def check_file(path: Path, create: bool, locked_: bool = False) -> None:
    """A store path is a DuckDB file, or (create) nothing yet in a directory that can hold one;
    anything else is refused before DuckDB sees it.  Before the lock (locked_ False) a file shorter
    than DuckDB's header is let through to the check under it: DuckDB makes a new store's file
    before it writes the header, so another writer's store can be empty for a moment (a second
    writer of a new store refused it as "not a DuckDB file")."""
    try:
        if path.is_file():
            with path.open("rb") as f:
                head = f.read(12)
            if head[8:12] != MAGIC and (locked_ or len(head) == 12):
                raise UsageError(f"history store {path}: not a DuckDB file (a parity history store is one)")
            return
        if path.exists():
            raise UsageError(f"history store {path}: not a file")
        if not create:
            raise UsageError(f"history store {path}: no such file (record runs, or `parity history ingest DIR`)")
        up = path.parent
        while not up.exists() and up != up.parent:
            up = up.parent
        if not up.is_dir():
            raise UsageError(f"history store {path}: cannot be made ({up} is not a directory)")
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"history store {path}: {one_line(e)}") from None


@contextlib.contextmanager
def store_lock(path: Path, write: bool, timeout_s: float | None):
    """<store>.lock; a reader of a store nobody may write (its directory or lock file read-only)
    reads without it: no writer can hold it either."""
    stack = contextlib.ExitStack()
    try:
        stack.enter_context(locked(path.with_name(path.name + ".lock"), timeout_s=timeout_s))
    except LockTimeout:
        raise
    except OSError as e:
        if write:
            raise UsageError(f"history store {path}: cannot take its lock ({one_line(e)})") from None
    with stack:
        yield


@contextlib.contextmanager
def connect(path: Path, *, write: bool = True, create: bool | None = None, timeout_s: float | None = None):
    """A DuckDB connection to the store under its lock (SAFE_CONFIG).  write=False opens it
    read-only; create (default: write) makes the file and its schema when absent.  A path that is
    not a parity store, a damaged one, or one that cannot be opened is a UsageError (one line)."""
    import duckdb

    path = Path(path)
    create = write if create is None else create
    check_file(path, create)
    with store_lock(path, write, timeout_s):
        check_file(path, create, locked_=True)
        try:
            con = duckdb.connect(str(path), read_only=not write, config=dict(SAFE_CONFIG))
        except duckdb.Error as e:
            raise UsageError(f"history store {path}: cannot open ({one_line(e)})") from None
        try:
            check_store(con, path, create)
            if write:
                ensure_schema(con)
            yield con
        except duckdb.Error as e:
            raise UsageError(f"history store {path}: damaged or unreadable ({one_line(e)})") from None
        finally:
            con.close()


def check_store(con, path: Path, create: bool) -> None:
    """A parity store holds its meta table; a new (create) store holds no table at all yet."""
    sql = "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database()"
    tables = {r[0] for r in con.execute(sql).fetchall()}
    if create and not tables:
        return
    found = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() if "meta" in tables else None
    if found is None:
        raise UsageError(f"history store {path}: a DuckDB file that is not a parity history store (no schema version); "
                         "left as it is")
    if not str(found[0]).isdigit():
        raise UsageError(f"history store {path}: schema version {found[0]!r} is not a number; left as it is")
    if int(found[0]) > SCHEMA_VERSION:
        raise UsageError(f"history store {path}: schema version {found[0]} is newer than this parity's "
                         f"({SCHEMA_VERSION}); use a newer parity")


def ensure_schema(con) -> None:
    for name, cols in TABLES.items():
        con.execute(f"CREATE TABLE IF NOT EXISTS {name} ({', '.join(f'{quote(c)} {t}' for c, t in cols.items())})")
    if con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() is None:
        con.execute("INSERT INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])
    con.execute(SERIES_VIEW)


def quote(col: str) -> str:
    return f'"{col}"'


def insert(con, table: str, rows: list[dict], chunk: int = 400) -> None:
    """Rows as multi-row VALUES statements (DuckDB's executemany costs ~1 ms a row)."""
    cols = [c for c in TABLES[table] if not TABLES[table][c].endswith("current_timestamp")]
    for i in range(0, len(rows), chunk):
        part = rows[i:i + chunk]
        values = ", ".join("(" + ", ".join("?" for _ in cols) + ")" for _ in part)
        con.execute(f"INSERT INTO {table} ({', '.join(map(quote, cols))}) VALUES {values}", [r.get(c) for r in part for c in cols])


def write_run(con, cells: dict[str, list[dict]]) -> str:
    """Replace every row of this run (its run_key) with `cells`, in one transaction."""
    key = cells["runs"][0]["run_key"]
    con.execute("BEGIN TRANSACTION")
    try:
        for t in RUN_TABLES:
            con.execute(f"DELETE FROM {t} WHERE run_key = ?", [key])
        for t in RUN_TABLES:
            if cells.get(t):
                insert(con, t, cells[t])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return key


def plain(v):
    """A DuckDB value as JSON-able data (times as ISO text, decimals as floats)."""
    import datetime as _dt
    import decimal

    if isinstance(v, (_dt.datetime, _dt.date, _dt.time)):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    return v


def query_args(con, sql: str, args: list) -> tuple[list[str], list[tuple]]:
    """A parity-written statement with parameters: (columns, rows)."""
    cur = con.execute(sql, args)
    return [d[0] for d in cur.description], cur.fetchall()


def query(con, sql: str) -> tuple[list[str], list[tuple]]:
    """A user's statement: a DuckDB error is a UsageError (one line, exit 2)."""
    import duckdb

    try:
        cur = con.execute(sql)
    except duckdb.Error as e:
        raise UsageError(f"history sql: {' '.join(str(e).split())}") from None
    if cur.description is None:
        return [], []
    return [d[0] for d in cur.description], cur.fetchall()
