"""`parity compare` on fixture run dirs (tests/data/report, see make_fixtures.py)."""

import json
import shutil
from pathlib import Path

import pytest

from parity.report.compare import compare_runs, metric_direction
from parity.report.rundata import gate_problems, load_run
from parity.stats import Rule

DATA = Path(__file__).resolve().parent.parent / "data" / "report"
RULE = Rule()


def clone(name: str, tmp_path: Path, as_name: str | None = None) -> Path:
    dst = tmp_path / (as_name or name)
    shutil.copytree(DATA / name, dst)
    return dst


def edit_json(path: Path, fn) -> None:
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))


def red_post(run: Path) -> None:
    def gates(g):
        g["post"]["status"] = "fail"
        g["post"]["checks"][0].update(status="fail", got="0123456789abcdef0123456789abcdef")
        g["status"] = "fail"

    edit_json(run / "gates.json", gates)
    edit_json(run / "manifest.json", lambda m: m.update(valid=False, invalid_reasons=["post-gate failed"]))


def cell(doc, engine, n, metric):
    (row,) = [r for r in doc["rows"] if (r["engine"], r["n"], r["metric"]) == (engine, n, metric)]
    return row


def test_known_answers_per_engine_n_metric():
    doc = compare_runs(load_run(DATA / "control"), load_run(DATA / "candidate"), ["decode_agg_tps", "agg_tps", "ttft_p50_ms"], RULE)
    assert not doc["forced"] and doc["force_reasons"] == []
    for n in (1, 4):
        assert cell(doc, "paged", n, "decode_agg_tps")["verdict"] == "improved"
        assert cell(doc, "paged", n, "agg_tps")["verdict"] == "within noise"  # +1.5%: under the 2% floor
        ttft = cell(doc, "paged", n, "ttft_p50_ms")
        assert ttft["better"] == "lower" and ttft["delta_pct"] < -10 and ttft["verdict"] == "improved"
        for m in ("decode_agg_tps", "agg_tps", "ttft_p50_ms"):
            assert cell(doc, "stock", n, m)["verdict"] == "within noise"
    assert doc["counts"] == {"improved": 4, "regressed": 0, "within noise": 8}
    assert doc["verdict"] == "improved"


def test_reverse_is_a_regression_and_fails_ci(parity_cli):
    r = parity_cli("compare", str(DATA / "candidate"), str(DATA / "control"), "--metric", "decode_agg_tps", "--fail-on-regression", "--json")
    assert r.returncode == 5, r.stderr
    doc = json.loads(r.stdout)  # stdout is exactly one JSON document
    assert doc["counts"]["regressed"] == 2 and doc["verdict"] == "regressed"
    assert r.stderr.strip().startswith("parity: error: regressed beyond noise: paged N=1 decode_agg_tps")
    ok = parity_cli("compare", str(DATA / "candidate"), str(DATA / "control"), "--metric", "decode_agg_tps", "--json")
    assert ok.returncode == 0  # without --fail-on-regression a regression is reported, not an error


def test_red_post_gate_is_refused_in_one_line(parity_cli, tmp_path):
    bad = clone("candidate", tmp_path)
    red_post(bad)
    r = parity_cli("compare", str(DATA / "control"), str(bad))
    assert r.returncode == 2
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("parity: error: refusing to compare:")
    assert "post-gate red: md5 tiny/paged" in lines[0] and "valid=false" in lines[0] and "--force" in lines[0]
    forced = parity_cli("compare", str(DATA / "control"), str(bad), "--force", "--json")
    assert forced.returncode == 0, forced.stderr
    doc = json.loads(forced.stdout)
    assert doc["forced"] is True and any("post-gate red" in x for x in doc["force_reasons"])


def test_missing_gates_and_failed_status_are_not_green(tmp_path):
    run = clone("candidate", tmp_path)
    (run / "gates.json").unlink()
    assert gate_problems(load_run(run)) == ["no gates.json (ungated)"]
    edit_json(run / "manifest.json", lambda m: m.update(status="interrupted"))
    assert "run status interrupted" in gate_problems(load_run(run))
    pre_only = clone("control", tmp_path)
    edit_json(pre_only / "gates.json", lambda g: g.pop("post"))
    assert gate_problems(load_run(pre_only)) == ["no post-gate"]
    assert gate_problems(load_run(DATA / "control")) == []


def test_other_hardware_class_is_refused_unless_forced(tmp_path):
    other = clone("candidate", tmp_path)
    edit_json(other / "hardware.json", lambda h: h.update(hardware_class="hopper"))
    from parity.errors import UsageError

    with pytest.raises(UsageError, match="hardware_class differs: A cpu_only, B hopper"):
        compare_runs(load_run(DATA / "control"), load_run(other), ["decode_agg_tps"], RULE)
    doc = compare_runs(load_run(DATA / "control"), load_run(other), ["decode_agg_tps"], RULE, force=True)
    assert doc["forced"] and doc["force_reasons"] == ["hardware_class differs: A cpu_only, B hopper"]


def test_noise_floor_run_widens_the_threshold(tmp_path):
    floor = clone("control", tmp_path, "floor")

    def noisy(s):  # same binary, a noisier session: +-6% around the control
        for r in s["rows"]:
            r["decode_agg_tps"] *= 1 + (0.06 if r["repeat"] % 2 else -0.06)

    edit_json(floor / "summary.json", noisy)
    doc = compare_runs(load_run(DATA / "control"), load_run(DATA / "candidate"), ["decode_agg_tps"], RULE, floor=load_run(floor))
    row = cell(doc, "paged", 4, "decode_agg_tps")
    assert row["noise_source"] == "noise-floor run" and row["threshold_pct"] > 10.5
    assert row["verdict"] == "within noise"


def test_unknown_metric_and_bad_run_dir(parity_cli, tmp_path):
    r = parity_cli("compare", str(DATA / "control"), str(DATA / "candidate"), "--metric", "tokens_per_banana")
    assert r.returncode == 2 and "tokens_per_banana" in r.stderr and "decode_agg_tps" in r.stderr
    r = parity_cli("compare", str(DATA / "control"), str(tmp_path))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "manifest.json" in r.stderr


def test_metric_directions():
    assert metric_direction("decode_agg_tps") == "higher"
    assert metric_direction("ttft_p50_ms") == "lower"
    assert metric_direction("wall_s") == "lower"
    assert metric_direction("some_new_latency_ms") == "lower"


def test_thresholds_come_from_the_profile(parity_cli, tmp_path):
    prof = tmp_path / "strict.yaml"
    prof.write_text("extends: smoke\nstats: {min_delta_pct: 12.0}\n")
    r = parity_cli("compare", str(DATA / "control"), str(DATA / "candidate"), "--metric", "decode_agg_tps", "-p", str(prof), "--json")
    doc = json.loads(r.stdout)
    assert doc["rule"]["min_delta_pct"] == 12.0 and doc["counts"]["improved"] == 0
    prof.write_text("extends: smoke\nstats: {noise_k: -1}\n")
    r = parity_cli("compare", str(DATA / "control"), str(DATA / "candidate"), "-p", str(prof))
    assert r.returncode == 2 and "stats.noise_k" in r.stderr
