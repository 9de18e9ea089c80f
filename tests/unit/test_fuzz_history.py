"""Property-based fuzzing of `parity history` (issue 56) through the real CLI in this process:
store files (random bytes, a real store cut short, with bytes changed, with its header kept and
the rest noise, empty), SQL text (statements that read, statements that write or reach out,
noise, in any case and with comments) and run directories (one file of a real nightly broken, a
paired ratio made 0 or non-finite, its report a link out of the run dir).

The property: exit 0 with a valid result (--json: one JSON document, no NaN) or 2 said in one
line, never an internal error or a traceback; a command that only reads leaves the store as it
was; SQL changes no file and a statement that writes is always refused; the dashboard never holds
what a link out of a run dir points to.  Budgets and the long profile: tests/unit/test_fuzz_inputs.py."""

from __future__ import annotations

import functools
import json
import math
import shutil
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from inproc import cli
from tests.unit.test_fuzz_inputs import NAMES, broken_json, budget, holds, workdir

DATA = Path(__file__).resolve().parents[1] / "data"
CAPTURED = DATA / "report" / "captured"
STEP = sorted(d for d in (DATA / "history" / "step").iterdir() if (d / "manifest.json").is_file())
SECRET = "SECRET-56-not-for-the-dashboard"


@functools.lru_cache(maxsize=1)
def real_store() -> bytes:
    """A store of a gated snapshot and two nightlies (made once per session)."""
    db = Path(tempfile.mkdtemp(prefix="parity-fuzz-history-")) / "h.duckdb"
    holds(cli("history", "ingest", CAPTURED, *STEP[:2], "--store", db, "--json"))
    return db.read_bytes()


def files(d: Path) -> dict[str, bytes]:
    return {str(f.relative_to(d)): f.read_bytes() for f in sorted(d.rglob("*"))
            if f.is_file() and not f.name.endswith(".lock")}


# ------------------------------------------------------------------ store files


@st.composite
def store_bytes(draw) -> bytes:
    real = real_store()
    how = draw(st.sampled_from(["random", "cut", "cut", "flip", "flip", "header", "empty"]))
    if how == "random":
        return draw(st.binary(max_size=4096))
    if how == "cut":
        return real[: draw(st.integers(0, len(real) - 1))]
    if how == "header":  # DuckDB's magic intact, the rest noise
        return real[: draw(st.integers(12, 8192))] + draw(st.binary(max_size=4096))
    if how == "empty":
        return b""
    b = bytearray(real)
    changes = st.lists(st.tuples(st.integers(0, len(real) - 1), st.integers(0, 255)), min_size=1, max_size=6)
    for pos, value in draw(changes):
        b[pos] = value
    return bytes(b)


STORE_COMMANDS = [["sql", "SELECT count(*) FROM rows"], ["sql", "SELECT * FROM series ORDER BY run_at LIMIT 5"],
                  ["changes", "--kind", "all"], ["changes", "--bisect", "--series", "no such series"],
                  ["site", "{d}/site", "--kind", "all"], ["ingest", str(CAPTURED)]]


@budget(40)
@given(data=store_bytes(), cmd=st.sampled_from(STORE_COMMANDS), name=NAMES)
def test_history_on_broken_store_files(data, cmd, name):
    with workdir() as d:
        path = d / f"{name}.duckdb"
        path.write_bytes(data)
        r = cli("history", *[a.format(d=d) for a in cmd], "--store", path, "--json")
        holds(r)
        if cmd[0] in ("sql", "site") or cmd[:2] == ["changes", "--kind"]:
            assert path.read_bytes() == data  # a reader never writes
        if r.rc != 0:
            assert not (d / "site").exists()


# ------------------------------------------------------------------ SQL text

READS = ["SELECT count(*) FROM runs", "SELECT * FROM series WHERE member", "DESCRIBE paired", "SHOW TABLES",
         "PRAGMA table_info('runs')", "EXPLAIN SELECT 1", "WITH x AS (SELECT run_id FROM runs) SELECT * FROM x",
         "SUMMARIZE medians", "FROM gates SELECT status", "VALUES (1, 'a')"]
# {d}: the example's directory
REFUSED = ["COPY (SELECT 1) TO '{d}/x.csv'", "COPY runs FROM '{d}/x.csv'",
           "ATTACH '{d}/other.duckdb' AS o (READ_WRITE)", "INSTALL httpfs", "LOAD json", "CREATE TABLE t (a INT)",
           "CREATE MACRO m(a) AS a", "INSERT INTO meta VALUES ('a', 'b')", "UPDATE runs SET kind = 'x'",
           "DELETE FROM runs", "DROP VIEW series", "ALTER TABLE runs RENAME TO r", "SET threads = 1",
           "RESET threads", "PRAGMA enable_profiling", "EXPORT DATABASE '{d}/exp'", "IMPORT DATABASE '{d}'",
           "CHECKPOINT", "VACUUM", "CALL pragma_version()", "EXPLAIN ANALYZE DELETE FROM runs", "USE memory",
           "DETACH memory", "BEGIN TRANSACTION", "SELECT * FROM read_text('/etc/passwd')",
           "SELECT * FROM '{d}/other.duckdb'", "SELECT * FROM read_csv('https://example.invalid/x')"]


@st.composite
def statement(draw) -> tuple[str, bool]:
    """(one statement, whether it must be refused)."""
    kind = draw(st.sampled_from(["read", "read", "refused", "refused", "noise"]))
    pools = {"read": st.sampled_from(READS), "refused": st.sampled_from(REFUSED), "noise": st.text(max_size=40)}
    text = draw(pools[kind])
    if kind != "noise":
        text = draw(st.sampled_from([str, str.upper, str.lower]))(text)
        text = draw(st.sampled_from(["", "/* c */ ", "  \n", "/* COPY x TO 'y' */ "])) + text
    return text, kind == "refused"


@budget(40)
@given(parts=st.lists(statement(), min_size=1, max_size=3))
def test_history_sql_changes_nothing(parts):
    with workdir() as d:
        db = d / "h.duckdb"
        db.write_bytes(real_store())
        (d / "other.duckdb").write_bytes(real_store())
        before = files(d)
        sql = ";\n".join(p.replace("{d}", str(d)).replace("{D}", str(d)) for p, _ in parts)
        r = cli("history", "sql", sql, "--store", db, "--json")
        holds(r)
        assert files(d) == before
        if any(refused for _, refused in parts):
            assert r.rc == 2, r.out[-500:]


# ------------------------------------------------------------------ run directories

NIGHT_FILES = ["manifest.json", "bench.json", "builds.json", "gates.json", "hardware.json", "campaign.json"]
ODD = [0.0, -1.0, 1e-300, 1e308, math.inf, -math.inf, math.nan]


@budget(10)
@given(data=st.data(), which=st.sampled_from(NIGHT_FILES), how=st.sampled_from(["broken", "broken", "ratio", "link"]),
       name=NAMES)
def test_history_on_broken_run_dirs(data, which, how, name):
    with workdir() as d:
        nights = [shutil.copytree(s, d / "runs" / f"{s.name} {name}") for s in STEP[:2]]
        night = nights[data.draw(st.integers(0, len(nights) - 1), label="night")]
        if how == "broken":
            f = night / which
            f.write_bytes(data.draw(broken_json(json.loads(f.read_text())), label=which))
        elif how == "ratio":
            b = json.loads((night / "bench.json").read_text())
            p = b["paired"][data.draw(st.integers(0, len(b["paired"]) - 1), label="cell")]
            field = data.draw(st.sampled_from(["ratio", "low", "high"]), label="field")
            p[field] = data.draw(st.sampled_from(ODD), label="value")
            (night / "bench.json").write_text(json.dumps(b))
        else:
            (d / "secret.md").write_text(SECRET)
            (rep,) = (night / "reports").glob("*.md")
            rep.unlink()
            rep.symlink_to(d / "secret.md")
        db = d / "h.duckdb"
        holds(cli("history", "ingest", d / "runs", "--store", db, "--json"))
        if db.is_file():
            holds(cli("history", "changes", "--kind", "all", "--min-points", "4", "--store", db, "--json"))
            holds(cli("history", "site", d / "site", "--kind", "all", "--store", db, "--json"))
        published = [f.read_text(errors="replace") for f in (d / "site").rglob("*") if f.is_file()]
        assert not any(SECRET in t for t in published)
