"""The history store on real run directories: parity runs (a CPU smoke snapshot, three H100 lever
A/Bs), the users' harness artifact, copies of H100 summaries without their manifest; the hook a
run session calls at its end, its one warning line, and writers side by side."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from parity.history import cells, record, source, store
from tests.conftest import DATA, REPO, run_parity

CAPTURED = DATA / "report" / "captured"
LEVERS = sorted((REPO / "docs" / "evidence" / "device-h100-levers" / "runs").glob("2026*"))
USERS = DATA / "users-art" / "phase72"
AA_COPY = REPO / "docs" / "evidence" / "device-h100-noise" / "aa"


def test_a_parity_run_becomes_rows_that_match_its_files():
    rd = source.read_run(CAPTURED)
    c = cells.cells(rd)
    summary = json.loads((CAPTURED / "summary.json").read_text())
    numeric = sum(1 for r in summary["rows"] for k, v in r.items() if k not in ("n", "repeat") and isinstance(v, (int, float)) and not isinstance(v, bool))
    assert len(c["rows"]) == numeric
    run = c["runs"][0]
    assert run["run_id"] == "20261122_181422_snapshot-tiny" and run["hardware_class"] == "cpu_only" and run["status"] == "complete"
    assert run["pin"] == "llama-cpp-python==0.3.36"  # the pypi-sdist source of builds.json
    builds = json.loads((CAPTURED / "builds.json").read_text())
    assert run["series_digest"] is None or run["series_digest"] == builds["paged"].get("series_digest")
    assert {b["engine"] for b in c["builds"]} == set(builds)
    assert run["gate_status"] == "pass" and len(c["gates"]) == sum(len(s["checks"]) for k, s in json.loads((CAPTURED / "gates.json").read_text()).items() if isinstance(s, dict))
    med = {(m["engine"], m["n"], m["metric"]): m["value"] for m in c["medians"]}
    for m in summary["medians"]:
        assert med[(m["engine"], m["n"], "decode_agg_tps")] == pytest.approx(m["decode_agg_tps"])


def test_a_lever_ab_keeps_its_verdict_pin_digest_and_paired_points():
    for run_dir in LEVERS:
        s = json.loads((run_dir / "summary.json").read_text())
        c = cells.cells(source.read_run(run_dir))
        (lever,) = c["levers"]
        assert (lever["verdict"], lever["pin"], lever["series_digest"]) == (s["verdict"], s["pin"], s["series_digest"])
        assert c["runs"][0]["gate_status"] == ("pass" if s["gates"]["ok"] else "fail")
        bench = json.loads((run_dir / "bench.json").read_text())
        assert len([p for p in c["paired"] if p["source"] == "bench"]) == len(bench["paired"])
        assert len([p for p in c["paired"] if p["source"] == "lever"]) == len(s["measurement"]["points"])


def test_the_users_artifact_and_a_manifest_less_copy_are_read():
    users = cells.cells(source.read_run(USERS))
    assert users["runs"][0]["origin"] == "users' harness" and users["runs"][0]["hardware_class"] == "gb10_or_workstation_blackwell"
    ratios = {(p["n"], p["metric"]): p["ratio"] for p in users["paired"]}
    assert ratios[(8, "decode_agg_tps")] == pytest.approx(0.7561, abs=1e-4)  # their ratio block (README: 0.7561)
    copy = cells.cells(source.read_run(AA_COPY))
    assert copy["runs"][0]["origin"] == "copy" and copy["runs"][0]["status"] == "unknown" and copy["runs"][0]["hardware_class"] == "hopper"
    assert len(copy["paired"]) == len(json.loads((AA_COPY / "summary.json").read_text())["paired"])


def test_ingest_then_sql_through_the_cli(tmp_path):
    db = tmp_path / "h.duckdb"
    r = run_parity("history", "ingest", str(DATA / "report" / "captured"), str(DATA / "users-art"), *map(str, LEVERS), "--store", str(db), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert len(doc["ingested"]) == 5 and doc["skipped"] == []
    r = run_parity("history", "sql", "SELECT kind, count(*) AS n FROM runs GROUP BY kind ORDER BY kind", "--store", str(db), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["rows"] == [["ab", 3], ["snapshot", 1], ["users-snapshot", 1]]
    again = run_parity("history", "ingest", str(CAPTURED), "--store", str(db), "--json")  # replaced, not doubled
    assert again.returncode == 0
    r = run_parity("history", "sql", "SELECT count(*) FROM rows r JOIN runs USING (run_key) WHERE runs.kind = 'snapshot'", "--store", str(db), "--json")
    assert json.loads(r.stdout)["rows"][0][0] == len(cells.cells(source.read_run(CAPTURED))["rows"])
    r = run_parity("history", "sql", "SELECT lever, verdict, ratio FROM levers ORDER BY lever", "--store", str(db), "--json")
    assert [row[1] for row in json.loads(r.stdout)["rows"]] == [json.loads((d / "summary.json").read_text())["verdict"] for d in sorted(LEVERS, key=lambda d: json.loads((d / "summary.json").read_text())["lever"])]


@pytest.mark.parametrize("sql,why", [("SELEC 1", "syntax error"), ("DELETE FROM runs", "read-only")])
def test_bad_or_writing_sql_is_one_line_and_exit_2(tmp_path, sql, why):
    db = tmp_path / "h.duckdb"
    assert run_parity("history", "ingest", str(CAPTURED), "--store", str(db)).returncode == 0
    r = run_parity("history", "sql", sql, "--store", str(db))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.startswith("parity: error: history sql:") and why in r.stderr.lower() and r.stderr.count("\n") == 1


def test_a_missing_store_and_an_empty_dir_are_named(tmp_path):
    r = run_parity("history", "sql", "SELECT 1", "--store", str(tmp_path / "none.duckdb"))
    assert r.returncode == 2 and "no such file" in r.stderr
    (tmp_path / "empty").mkdir()
    r = run_parity("history", "ingest", str(tmp_path / "empty"), "--store", str(tmp_path / "h.duckdb"), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["no_runs"] == [str(tmp_path / "empty")]


def test_the_hook_records_a_run_session_and_off_keeps_out(tmp_path, monkeypatch):
    from parity.config import load_profile
    from parity.context import Context, run_session
    from parity.runners.local import LocalRunner
    from parity.ui import Output

    for value, expect in ((str(tmp_path / "h.duckdb"), 1), ("off", 0)):
        monkeypatch.setenv("PARITY_HISTORY", value)
        ctx = Context(load_profile("smoke"), LocalRunner(), Output(False, 0), tmp_path / "runs", after_run=[record.record_run])  # the hook the CLI adds
        with run_session(ctx, "snapshot", "hook", argv=["parity", "test"]) as rd:
            for f in ("summary.json", "hardware.json", "builds.json", "gates.json"):
                rd.write_text(f, (CAPTURED / f).read_text())
        if expect:
            with store.connect(tmp_path / "h.duckdb", write=False) as con:
                assert con.execute("SELECT status, kind FROM runs WHERE run_id = ?", [rd.run_id]).fetchall() == [("complete", "snapshot")]
                assert con.execute("SELECT count(*) FROM paired").fetchone()[0] == 0 and con.execute("SELECT count(*) FROM rows").fetchone()[0] > 0
    assert not (tmp_path / "runs" / "history.duckdb").exists()  # off means off, no default file either


def test_a_failed_write_is_one_warning_line_and_the_run_goes_on(tmp_path, monkeypatch):
    db = tmp_path / "h.duckdb"
    warned: list[str] = []
    monkeypatch.setattr(record, "HOOK_WAIT_S", 0.3)
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from parity.filelock import locked\nwith locked(sys.argv[1]):\n    print('held', flush=True); time.sleep(600)",
                               str(db.with_name(db.name + ".lock"))], cwd=REPO, stdout=subprocess.PIPE, text=True)  # another writer holds the store
    try:
        assert holder.stdout.readline().strip() == "held"
        assert record.record_run(CAPTURED, warn=warned.append, store_path=str(db)) is None
    finally:
        holder.kill()
        holder.wait()
    assert len(warned) == 1 and "not recorded" in warned[0] and "held by another process" in warned[0] and "parity history ingest" in warned[0]
    (tmp_path / "adir.duckdb").mkdir()  # a store path DuckDB cannot open
    assert record.record_run(CAPTURED, warn=warned.append, store_path=str(tmp_path / "adir.duckdb")) is None
    assert len(warned) == 2 and "\n" not in warned[1]


def test_writers_side_by_side_all_land(tmp_path):
    db = tmp_path / "h.duckdb"
    dirs = [CAPTURED, USERS, AA_COPY, *LEVERS]
    # each waits as long as the others take (the hook's own 20 s cap is the failed-write test's): on a busy
    # 2-core box six writers in a row took longer than that (a clean clone's CI, 2026-11-30)
    code = ("import sys; from parity.history import record; record.HOOK_WAIT_S = 600; "
            "sys.exit(0 if record.record_run(sys.argv[1], store_path=sys.argv[2], warn=print) else 1)")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(d), str(db)], cwd=REPO, stdout=subprocess.PIPE, text=True) for d in dirs]
    outs = [(p.wait(timeout=300), p.stdout.read()) for p in procs]
    assert all(rc == 0 for rc, _ in outs), outs
    with store.connect(db, write=False) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == len(dirs)


def test_a_store_another_writer_is_making_is_waited_for_not_refused(tmp_path):
    # DuckDB makes a new store's file before it writes the header: read outside the lock, a writer that came
    # second saw a file shorter than the header and refused it as "not a DuckDB file"
    db = tmp_path / "h.duckdb"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time, pathlib; from parity.filelock import locked\n"
                               "with locked(sys.argv[1]):\n    p = pathlib.Path(sys.argv[2]); p.write_bytes(b'')\n"
                               "    print('making', flush=True); time.sleep(1); p.unlink()",
                               str(db.with_name(db.name + ".lock")), str(db)], cwd=REPO, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "making" and db.stat().st_size == 0
        warned: list[str] = []
        assert record.record_run(CAPTURED, warn=warned.append, store_path=str(db)) is not None, warned
    finally:
        holder.kill()
        holder.wait()
    with store.connect(db, write=False) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 1
