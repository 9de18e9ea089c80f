"""`parity history` on what it must only read or refuse (issue 56, N2 N3 N8 N10): the SQL surface
is read-only by construction (every reproduction of the review refused before it runs, its target
unchanged); the commands that only read open the store read-only, refuse a path that is not a
parity store and read one nobody may write; a file that is not DuckDB never reaches DuckDB (no
extension fetched); a truncated store, a store under a file, a site into an impossible
directory and a series holding a ratio of 0 are one line, never an internal error."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from inproc import cli
from parity.history import cells, source, store
from tests.conftest import DATA, REPO

CAPTURED = DATA / "report" / "captured"
STEP = sorted(d for d in (DATA / "history" / "step").iterdir() if (d / "manifest.json").is_file())
LEVER_MAP = REPO / "docs" / "evidence" / "device-h100-levers" / "runs" / "lever_map.yaml"


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("store") / "h.duckdb"
    r = cli("history", "ingest", CAPTURED, *STEP[:2], "--store", db, "--json")
    assert r.rc == 0, r.err
    return db


@pytest.fixture
def db(made, tmp_path, monkeypatch) -> Path:
    """A copy of the store in its own directory; HOME is a fresh directory (DuckDB keeps the
    extensions it installs under ~/.duckdb)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    (tmp_path / "store").mkdir()
    return Path(shutil.copy(made, tmp_path / "store" / "h.duckdb"))


def refused(r, *words: str) -> str:
    """Exit 2, the whole stderr one line naming the problem, no traceback."""
    assert r.rc == 2, (r.rc, r.out[-500:], r.err[-2000:])
    assert "Traceback" not in r.err and "internal error" not in r.err, r.err
    assert r.err.strip().splitlines() == r.error_lines() and len(r.error_lines()) == 1, r.err
    for w in words:
        assert w.lower() in r.err.lower(), (w, r.err)
    return r.err


def files(d: Path) -> dict[str, bytes]:
    """Every file under d and its bytes (a store's lock file aside: readers take it too)."""
    return {str(f.relative_to(d)): f.read_bytes() for f in sorted(d.rglob("*"))
            if f.is_file() and not f.name.endswith(".duckdb.lock")}


# ------------------------------------------------------------------ N2: read-only by construction

# the review's reproductions, and one of each other kind that writes
WRITES = [
    ("COPY (SELECT 'levers: []' AS x) TO '{lever_map}' (HEADER false, QUOTE '')", "COPY"),
    ("COPY (SELECT 1) TO '{other}'", "COPY"),
    ("ATTACH '{other}' AS v (READ_WRITE); DELETE FROM v.runs", "ATTACH"),
    ("INSTALL httpfs", "LOAD"),
    ("LOAD httpfs", "LOAD"),
    ("SELECT 1; DELETE FROM runs", "statement 2"),
    ("CREATE TABLE t AS SELECT 1", "CREATE"),
    ("INSERT INTO meta VALUES ('x', 'y')", "INSERT"),
    ("UPDATE runs SET status = 'x'", "UPDATE"),
    ("DROP TABLE runs", "DROP"),
    ("ALTER TABLE runs ADD COLUMN x INTEGER", "ALTER"),
    ("EXPORT DATABASE '{tmp}/exported'", "EXPORT"),
    ("SET enable_external_access = true", "SET"),
    ("PRAGMA enable_profiling", "PRAGMA"),
    ("CHECKPOINT", "CALL"),
    ("EXPLAIN ANALYZE COPY (SELECT 1) TO '{tmp}/x.csv'", "EXPLAIN"),
]


@pytest.mark.parametrize("sql,kind", WRITES, ids=[w[0].split("(")[0][:24].strip() for w in WRITES])
def test_a_statement_that_writes_is_refused_before_it_runs(db, tmp_path, sql, kind):
    lever_map = tmp_path / "lever_map.yaml"
    shutil.copy(LEVER_MAP, lever_map)
    other = Path(shutil.copy(db, tmp_path / "other.duckdb"))
    before = files(tmp_path)
    r = cli("history", "sql", sql.format(lever_map=lever_map, other=other, tmp=tmp_path), "--store", db)
    refused(r, "history sql: read-only", kind, "refused before any ran")
    assert files(tmp_path) == before  # the lever map, the other store, this store as they were; no ~/.duckdb


OUTSIDE = ["SELECT content FROM read_text('/etc/passwd')", "SELECT * FROM read_csv('/etc/passwd')",
           "SELECT * FROM '/etc/passwd'", "SELECT * FROM read_csv('https://example.invalid/a.csv')"]


@pytest.mark.parametrize("sql", OUTSIDE)
def test_no_file_but_the_store_is_read(db, tmp_path, sql):
    before = files(tmp_path)
    r = cli("history", "sql", sql, "--store", db, "--json")
    refused(r, "history sql:")
    assert "root:" not in r.out and files(tmp_path) == before


def test_the_connection_is_locked_down_and_reading_statements_still_run(db):
    names = ("enable_external_access", "autoload_known_extensions", "autoinstall_known_extensions",
             "allow_community_extensions", "allow_persistent_secrets", "lock_configuration")
    r = cli("history", "sql", "SELECT " + ", ".join(f"current_setting('{n}')" for n in names), "--store", db, "--json")
    assert r.rc == 0, r.err
    assert json.loads(r.out)["rows"] == [[False, False, False, False, False, True]]
    for sql in ("WITH x AS (SELECT run_id FROM runs) SELECT count(*) FROM x", "FROM runs SELECT kind", "DESCRIBE runs",
                "SHOW TABLES", "SUMMARIZE paired", "EXPLAIN SELECT * FROM series",
                "EXPLAIN ANALYZE SELECT count(*) FROM rows", "PRAGMA table_info('runs')", "SELECT 1; SELECT 2"):
        r = cli("history", "sql", sql, "--store", db, "--json")
        assert r.rc == 0, (sql, r.err)
    assert json.loads(r.out)["rows"] == [[2]]


def test_the_check_is_duckdbs_parser_not_the_text(db):
    """A comment, a CTE or odd case before the verb does not hide it: the statement's kind is DuckDB's."""
    import duckdb

    from parity.history.sql import refusal, statements

    con = duckdb.connect()
    for sql in ("/* SELECT */ COPY runs TO 'x.csv'", "with x as (select 1) insert into t select * from x",
                "  cOpY (select 1) TO 'x'", "pragma   enable_checkpoint_on_shutdown"):
        (s,) = statements(con, sql)
        assert refusal(con, s), sql
    (s,) = statements(con, "/* COPY */ SELECT 1")
    assert refusal(con, s) is None


# ------------------------------------------------------------------ N3: commands that only read


READERS = [["sql", "SELECT count(*) FROM runs"], ["changes"], ["site", "{tmp}/site"]]


@pytest.mark.parametrize("args", READERS, ids=lambda a: a[0])
def test_a_mistyped_store_is_refused_and_not_made(tmp_path, args):
    r = cli("history", *[a.format(tmp=tmp_path) for a in args], "--store", tmp_path / "typo.duckdb")
    refused(r, "typo.duckdb: no such file")
    assert list(tmp_path.iterdir()) == []  # no store, no lock file, no site


def foreign_store(path: Path) -> Path:
    import duckdb

    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE accounts (id INTEGER, name VARCHAR)")
    con.execute("INSERT INTO accounts VALUES (1, 'a')")
    con.close()
    return path


@pytest.mark.parametrize("args", [*READERS, ["changes", "--bisect"], ["ingest", str(CAPTURED)]],
                         ids=["sql", "changes", "site", "changes --bisect", "ingest"])
def test_a_foreign_duckdb_file_is_refused_and_left_as_it_is(tmp_path, args):
    path = foreign_store(tmp_path / "theirs.duckdb")
    before = path.read_bytes()
    r = cli("history", *[a.format(tmp=tmp_path) for a in args], "--store", path)
    refused(r, "not a parity history store")
    assert path.read_bytes() == before and not (tmp_path / "site").exists()


def read_only_run(d: Path, *args: str):
    """parity with directory d read-only: a read-only bind mount in a mount namespace of its own
    (root ignores file modes), else, for another user, d's modes."""
    script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
    argv = [sys.executable, "-m", "parity", *args]
    for ns in (["unshare", "--user", "--map-root-user", "--mount"], ["unshare", "--mount"]):
        usable = shutil.which("unshare") and subprocess.run([*ns, "sh", "-c", script, str(d), "true"],
                                                            capture_output=True)
        if usable and usable.returncode == 0:
            return subprocess.run([*ns, "sh", "-c", script, str(d), *argv], cwd=REPO, capture_output=True, text=True,
                                  timeout=300)
    if os.geteuid() == 0:
        pytest.skip("root, and no mount namespace to make a directory read-only in (unshare)")
    for f in d.iterdir():
        f.chmod(0o444)
    d.chmod(0o555)
    try:
        return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)
    finally:
        d.chmod(0o755)


def test_a_store_nobody_may_write_is_read_and_an_ingest_into_it_refused(db, tmp_path):
    d = db.parent  # the store alone in its directory: no lock file beside it yet
    (d / "h.duckdb.lock").unlink(missing_ok=True)
    before = files(d)
    r = read_only_run(d, "history", "sql", "SELECT count(*) FROM runs", "--store", str(db), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["rows"] == [[3]], r.stderr
    r = read_only_run(d, "history", "changes", "--kind", "all", "--store", str(db), "--json")
    assert r.returncode == 0 and len(json.loads(r.stdout)["series"]) > 0, r.stderr
    r = read_only_run(d, "history", "site", str(tmp_path / "site"), "--kind", "all", "--store", str(db), "--json")
    assert r.returncode == 0 and (tmp_path / "site" / "index.html").is_file(), r.stderr
    r = read_only_run(d, "history", "ingest", str(CAPTURED), "--store", str(db))
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr and "cannot take its lock" in r.stderr
    assert files(d) == before


# ------------------------------------------------------------------ N8: not DuckDB: never opened by DuckDB


def sqlite_file(p: Path) -> Path:
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE t (a)")
    con.commit()
    con.close()
    return p


NOT_DUCKDB = {"sqlite": sqlite_file, "text": lambda p: p.write_text("levers: []\n") and p,
              "random": lambda p: p.write_bytes(os.urandom(5000)) and p, "empty": lambda p: p.write_bytes(b"") or p}


@pytest.mark.parametrize("what", NOT_DUCKDB)
def test_a_file_that_is_not_duckdb_is_refused_without_a_fetch(db, tmp_path, what):
    path = NOT_DUCKDB[what](tmp_path / "store.db")
    before = files(tmp_path)
    for args in (*READERS, ["ingest", str(CAPTURED)]):
        r = cli("history", *[a.format(tmp=tmp_path) for a in args], "--store", path)
        err = refused(r, "not a DuckDB file")
        assert "extension" not in err and "download" not in err
    # the file as it was, no ~/.duckdb/extensions, no site; one shorter than DuckDB's 12-byte header (empty,
    # text) is refused under the store's lock (another writer may be making it: DuckDB writes the header after
    # the file), so its lock file stays
    after = files(tmp_path)
    assert {k: after[k] for k in before} == before
    assert set(after) - set(before) == ({"store.db.lock"} if path.stat().st_size < 12 else set())


# ------------------------------------------------------------------ N10: no internal error


def test_a_store_under_a_regular_file(tmp_path):
    (tmp_path / "afile").write_text("x\n")
    r = cli("history", "ingest", CAPTURED, "--store", tmp_path / "afile" / "sub" / "h.duckdb")
    refused(r, "cannot be made", "afile is not a directory")
    for args in READERS:
        refused(cli("history", *[a.format(tmp=tmp_path) for a in args], "--store", tmp_path / "afile" / "h.duckdb"),
                "no such file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


@pytest.mark.parametrize("fraction", [0.02, 0.3, 0.5, 0.7, 0.9, 0.99])
def test_a_truncated_store_is_one_line(db, tmp_path, fraction):
    data = db.read_bytes()
    db.write_bytes(data[: int(len(data) * fraction)])
    codes = []
    commands = (["sql", "SELECT count(*) FROM rows"], ["changes", "--kind", "all"],
                ["site", "{tmp}/site", "--kind", "all"], ["ingest", str(CAPTURED)])
    for args in commands:
        r = cli("history", *[a.format(tmp=tmp_path) for a in args], "--store", db)
        if r.rc != 0:
            refused(r, "history store")
        codes.append(r.rc)
    assert 2 in codes


@pytest.mark.parametrize("where", ["under a file", "a file", "unwritable"])
def test_a_site_into_an_impossible_directory_is_one_line(db, tmp_path, where):
    (tmp_path / "afile").write_text("x\n")
    afile = tmp_path / "afile"
    out = {"under a file": afile / "site", "a file": afile, "unwritable": Path("/proc/self/x")}[where]
    before = files(tmp_path)
    refused(cli("history", "site", out, "--store", db), str(out))
    assert files(tmp_path) == before


def nights_with(tmp_path: Path, ratio: float) -> list[Path]:
    """The 20 step nights, the last six with their B=1 S_TG ratio set to `ratio`."""
    out = []
    for i, d in enumerate(STEP):
        dest = shutil.copytree(d, tmp_path / "nights" / d.name)
        if i >= 14:
            b = json.loads((dest / "bench.json").read_text())
            (p,) = [p for p in b["paired"] if p["metric"] == "s_tg" and p["b"] == 1]
            p["ratio"] = ratio
            (dest / "bench.json").write_text(json.dumps(b))
        out.append(dest)
    return out


@pytest.mark.parametrize("ratio", [0.0, -1.0])
def test_ingest_leaves_a_ratio_that_is_not_positive_out_and_says_so(tmp_path, ratio):
    nights = nights_with(tmp_path, ratio)
    db = tmp_path / "h.duckdb"
    r = cli("history", "ingest", tmp_path / "nights", "--store", db, "--json")
    assert r.rc == 0, r.err
    left = [w for d in json.loads(r.out)["ingested"] for w in d["left_out"]]
    assert len(left) == 6 and all("s_tg" in w and "not positive" in w for w in left)
    r = cli("history", "ingest", nights[-1], "--store", db)  # said in the human output too, one line each
    assert r.rc == 0 and "not positive, left out" in r.err
    with store.connect(db, write=False) as con:
        assert con.execute("SELECT count(*) FROM paired WHERE ratio <= 0").fetchone() == (0,)
        assert con.execute("SELECT count(*) FROM runs WHERE notes LIKE '%not positive%'").fetchone() == (6,)
    for args in (["changes"], ["site", tmp_path / "site"]):
        assert cli("history", *args, "--store", db, "--json").rc == 0


@pytest.mark.parametrize("ratio", [0.0, -1.0])
def test_changes_on_a_store_that_holds_a_ratio_that_is_not_positive(tmp_path, ratio):
    """A store an older parity wrote, the six last B=1 S_TG ratios 0 or negative in it: no
    internal error; those nights are no points of the series."""
    db = tmp_path / "older.duckdb"
    with store.connect(db) as con:
        for i, d in enumerate(STEP):
            c = cells.cells(source.read_run(d))
            for p in c["paired"]:
                if i >= 14 and p["metric"] == "s_tg" and p["n"] == 1:
                    p["ratio"] = ratio
            store.write_run(con, c)
    for args in (["changes"], ["changes", "--kind", "all"], ["site", tmp_path / "site"]):
        r = cli("history", *args, "--store", db)
        assert r.rc == 0 and "Traceback" not in r.err and "internal error" not in r.err, r.err
    doc = json.loads(cli("history", "changes", "--store", db, "--json").out)
    (b1,) = [s for s in doc["series"] if s["metric"] == "s_tg" and s["n"] == 1]
    assert b1["points"] == 14
