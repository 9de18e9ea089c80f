"""Focused op timing on the smoke profile's real CPU builds: `parity bench --ops` (paged vs stock)
and `parity ab --ops` (a runtime lever) run real test-backend-ops perf in paired blocks; the dry
run's commands are the ones the run executes; wrappers around the real binary that drop a case
or print a nan make named failures (exit 6), never a ratio."""

from __future__ import annotations

import json
import math
import stat
from pathlib import Path

import pytest

from conftest import run_parity
from parity.gates.test_backend_ops import parse_perf
from parity.optime.measure import STDERR

pytestmark = pytest.mark.slow

ADD_CASES = 2  # test-backend-ops' perf list has two ADD shapes (4096 x 1, broadcast over 512 rows)


def _profile(tmp_path: Path, extra: str = "") -> Path:
    p = tmp_path / "p.yaml"
    p.write_text(
        f"extends: smoke\nlock: {{dir: {tmp_path}/lock, poll_s: 0.5}}\nlevers: {{map: {tmp_path}/levers.yaml}}\n{extra}"
    )
    return p


def _parity(tmp_path: Path, *args: str, profile: Path | None = None):
    return run_parity(
        "--artifacts", str(tmp_path / "runs"), *args, "-p", str(profile or _profile(tmp_path)), "--json", timeout=900
    )


def test_bench_ops_pairs_paged_and_stock_per_case(engine_bins, tmp_path):
    plan = _parity(tmp_path, "bench", "--ops", "ADD", "--repeat", "2", "--dry-run")
    assert plan.returncode == 0, plan.stderr[-2000:]
    r = _parity(tmp_path, "bench", "--ops", "ADD", "--repeat", "2")
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert doc["commands"] == json.loads(plan.stdout)["commands"]  # the dry run printed what ran
    assert (doc["engines"], doc["reference"], doc["output"], doc["blocks"], doc["problems"]) == (
        ["paged", "stock"],
        "stock",
        "sql",
        2,
        [],
    )
    times = [c for c in doc["cases"] if c["metric"] == "us_per_run"]
    assert len(times) == ADD_CASES and {c["metric"] for c in doc["cases"]} == {"us_per_run", "gbps"}
    run = Path(doc["run_dir"])
    for c in times:  # B/A from the tool's own numbers in the kept logs
        ratios = []
        for b in range(2):
            a, bb = (
                next(
                    x
                    for x in parse_perf((run / "ops" / f"{arm}-b{b}-add.txt").read_text().split(STDERR)[0]).cases
                    if x.case == c["case"]
                )
                for arm in ("stock", "paged")
            )
            ratios.append(bb.us_per_run / a.us_per_run)
        assert (
            c["ratio"] == pytest.approx(math.sqrt(ratios[0] * ratios[1]), rel=1e-5)
            and c["low"] <= c["ratio"] <= c["high"]
        )
        assert c["outcome"] in ("improved", "regressed", "equivalent", "inconclusive") and c["users_rule"][
            "verdict"
        ] in ("improved", "regressed", "within noise")
    (op,) = doc["per_op"]
    assert (
        op["op"] == "ADD"
        and op["n_cases"] == ADD_CASES
        and op["gbps"]["n_blocks"] == 2
        and op["users_rule"]["verdict"] in ("KEEP", "KILL")
    )
    assert sorted(p.name for p in (run / "ops").iterdir()) == [
        "paged-b0-add.txt",
        "paged-b1-add.txt",
        "stock-b0-add.txt",
        "stock-b1-add.txt",
    ]
    assert (run / "ops.tsv").read_text().startswith("kind\tengine\treference\top\tcase")
    assert json.loads((run / "manifest.json").read_text())["valid"] is True


def test_ab_ops_measures_a_runtime_lever_per_case(engine_bins, tmp_path):
    r = _parity(tmp_path, "ab", "--env", "PARITY_DEMO_BANNER=1", "--ops", "ADD", "--repeat", "2", "--no-post-gates")
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    m = doc["measurement"]
    assert (m["kind"], m["metric"], m["file"]) == ("ops", "us_per_run", "ops.json") and len(m["points"]) == ADD_CASES
    assert all(
        p["point"].startswith("ADD(") and p["n_blocks"] == 2 and p["low"] <= p["ratio"] <= p["high"]
        for p in m["points"]
    )
    assert m["ops"][0].startswith("ADD paged+lever/paged: time per run B/A") and "users' rule: K" in m["ops"][0]
    assert doc["verdict"] in ("GO", "NO-GO", "FLAT", "INCONCLUSIVE") and doc["missing"] == [] and doc["gates"]["ok"]
    ops = json.loads((Path(doc["run_dir"]) / "ops.json").read_text())
    assert (
        ops["commands"]["paged+lever"][0][1:] == ["perf", "-o", "ADD", "-b", "CPU", "--output", "sql"]
        and ops["env"]["paged+lever"]["PARITY_DEMO_BANNER"] == "1"
    )
    row = (tmp_path / "levers.yaml").read_text()
    assert "PARITY_DEMO_BANNER=1" in row and "us_per_run" in row


def _wrapped(tmp_path: Path, real: Path, filt: str) -> Path:
    """Engines a (the real binary) and b (its output through `filt`), both prebuilt."""
    extra = "engines:\n"
    for name, body in (("a", 'exec "$REAL" "$@"'), ("b", f'"$REAL" "$@" | {filt}; exit ${{PIPESTATUS[0]}}')):
        d = tmp_path / f"bin-{name}"
        d.mkdir()
        f = d / "test-backend-ops"
        f.write_text(f'#!/bin/bash\nREAL="{real}"\n{body}\n')
        f.chmod(f.stat().st_mode | stat.S_IXUSR)
        extra += f"  {name}: {{kind: llama, bin_dir: {d}, paths: {{plain: {{}}}}, default_path: plain}}\n"
    return _profile(tmp_path, extra)


@pytest.mark.parametrize(
    "filt,words",
    [
        (
            "grep -v 'nr=\\[1,512'",
            "nr=[1,512,1,1],nf=1,perm1=0,src_overlap=0): timed in a but not in b (absent from its output)",
        ),
        (
            "sed \"s/'[0-9.]*', '[0-9.]*', '[0-9.]*', '48'/'nan', '0.000000', 'nan', '48'/\"",
            "): us_per_run, gbps missing, non-finite or <= 0",
        ),
    ],
)
def test_a_hole_in_one_arm_is_a_named_failure_exit_6(engine_bins, tmp_path, filt, words):
    prof = _wrapped(tmp_path, engine_bins["stock"] / "test-backend-ops", filt)
    r = _parity(tmp_path, "bench", "--ops", "ADD", "--engines", "a,b", "--repeat", "2", profile=prof)
    assert r.returncode == 6, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert any(words in p for p in doc["problems"]), doc["problems"]
    assert "op timing problem" in r.stderr and "Traceback" not in r.stderr
    run = Path(doc["run_dir"])
    assert json.loads((run / "manifest.json").read_text())["valid"] is False


@pytest.mark.parametrize(
    "args,words",
    [
        (["bench", "--ops", "ADD", "--npl", "4"], "--npl is llama-batched-bench's"),
        (["bench", "--ops-params", "x"], "--ops-params needs --ops"),
        (["bench", "--ops", "add"], "not an op name"),
        (["ab", "--env", "X=1", "--ops", "ADD", "--serving"], "--ops and --serving"),
        (["ab", "--env", "X=1", "--ops", "ADD", "--until-ci", "s_tg=1"], "us_per_run"),
    ],
)
def test_bad_op_timing_options_are_one_line_exit_2(tmp_path, args, words):
    r = _parity(tmp_path, *args)
    assert (
        r.returncode == 2 and words in r.stderr and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    ), r.stderr
