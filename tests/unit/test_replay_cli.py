"""`parity snapshot --trace FILE`: the trace workload on that file (issue 58's command line), its
plan in the dry run, and a file that is no trace refused in one line before anything runs."""

from __future__ import annotations

import json

from tests.conftest import DATA, run_parity

MOONCAKE = DATA / "replay" / "mooncake-conversation.jsonl"


def test_trace_flag_plans_the_trace_workload_on_that_file(tmp_path):
    r = run_parity("--artifacts", str(tmp_path / "runs"), "snapshot", "-p", "smoke", "--engines", "stock", "--trace", str(MOONCAKE), "--dry-run", "--json")
    assert r.returncode in (0, 9), r.stderr[-2000:]  # 9: the dry run's no-go on a box without the lock dir
    w = json.loads(r.stdout)["workload"]
    assert w["kind"] == "trace" and w["points"] and "requests over" in w["points"][0]
    (plan,) = (tmp_path / "runs").glob("*/plan.json")  # the dry run's own record, marked dry-run
    assert json.loads((plan.parent / "manifest.json").read_text())["status"] == "dry-run"


def test_a_file_that_is_no_trace_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "notes.txt"
    bad.write_text("# a note\nnothing here\n")
    r = run_parity("--artifacts", str(tmp_path / "runs"), "snapshot", "-p", "smoke", "--engines", "stock", "--trace", str(bad), "--dry-run")
    assert r.returncode == 2 and "not a request trace" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "Traceback" not in r.stderr
