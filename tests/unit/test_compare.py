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
    assert doc["counts"] == {"improved": 4, "regressed": 0, "within noise": 8, "invalid": 0, "missing": 0}
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


# ------------------------------------------------------------------ issue 56: rows marked invalid, numbers out of range


def flip_rows(run: Path, engines=None) -> None:
    """Every row of the run's summary.json (of `engines`, default all) marked invalid, the manifest left as it is."""

    def flip(s):
        for r in s["rows"]:
            if engines is None or r["engine"] in engines:
                r.update(valid=False, invalid_reasons=["marked invalid by the test"])

    edit_json(run / "summary.json", flip)


def invalid_manifest(run: Path) -> None:
    edit_json(run / "manifest.json", lambda m: m.update(valid=False, invalid_reasons=["post-gate failed"]))


def test_a_candidate_whose_rows_are_all_invalid_never_passes(parity_cli, tmp_path):
    """N1: the real captured smoke run against itself, B's rows marked valid: false (its manifest
    still valid): refused; forced, its numbers are shown but the verdict is invalid and
    --fail-on-regression exits 5 (it said "within noise", exit 0)."""
    a, b = clone("captured", tmp_path, "A"), clone("captured", tmp_path, "B")
    flip_rows(b)
    r = parity_cli("compare", str(a), str(b), "--fail-on-regression")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0].startswith("parity: error: refusing to compare:")
    assert "summary.json: 4 of 4 row(s) invalid (paged r0 N=1: marked invalid by the test" in lines[0]
    forced = parity_cli("compare", str(a), str(b), "--fail-on-regression", "--force", "--json")
    assert forced.returncode == 5, forced.stderr
    doc = json.loads(forced.stdout)
    assert doc["verdict"] == "invalid" and doc["counts"]["within noise"] == 0
    assert doc["counts"]["invalid"] == len(doc["rows"]) == 12 and {r["verdict"] for r in doc["rows"]} == {"invalid"}
    assert any("4 of 4 row(s) invalid" in x for x in doc["invalid"])
    last = forced.stderr.strip().splitlines()[-1]
    assert last.startswith("parity: error: invalid: forced past numbers that do not count: B ")


@pytest.mark.parametrize("which", ["B rows", "B manifest", "A manifest", "floor rows", "one engine of B"])
def test_force_never_turns_numbers_that_do_not_count_into_a_pass(tmp_path, which):
    """N1: whichever run's numbers do not count (B's rows or manifest, the control's, the noise
    floor's), a forced compare says invalid on every cell and keeps the rule's word beside it."""
    from parity.errors import RegressionDetected, UsageError
    from parity.report.compare import check_regressions

    a, b = clone("control", tmp_path, "A"), clone("candidate", tmp_path, "B")
    floor = clone("control", tmp_path, "floor")
    spoil = {"B rows": lambda: flip_rows(b), "B manifest": lambda: invalid_manifest(b),
             "A manifest": lambda: invalid_manifest(a), "floor rows": lambda: flip_rows(floor),
             "one engine of B": lambda: flip_rows(b, {"stock"})}
    spoil[which]()
    runs = (load_run(a), load_run(b))
    with pytest.raises(UsageError, match="refusing to compare"):
        compare_runs(*runs, ["decode_agg_tps"], RULE, floor=load_run(floor))
    doc = compare_runs(*runs, ["decode_agg_tps"], RULE, floor=load_run(floor), force=True)
    assert doc["verdict"] == "invalid" and doc["invalid"] and {r["verdict"] for r in doc["rows"]} == {"invalid"}
    assert cell(doc, "paged", 4, "decode_agg_tps")["rule_verdict"] in ("improved", "within noise", "missing", "invalid")
    with pytest.raises(RegressionDetected, match="^invalid: forced past numbers that do not count"):
        check_regressions(doc["rows"])


WHY = "3 of 4 requests failed"


def test_an_invalid_row_is_never_a_value(tmp_path):
    """N1 below the run level: a row marked invalid is a gap of its cell, never one of its values
    (cells and values_by_cell, which the noise floor, the noise table and the plots read), and
    the run is not valid."""
    from parity.report.rundata import cells, values_by_cell

    b = clone("candidate", tmp_path, "B")
    edit_json(b / "summary.json", lambda s: s["rows"][0].update(valid=False, invalid_reasons=[WHY]))
    rd = load_run(b)
    row0 = rd.rows()[0]
    c = cells(rd, "decode_agg_tps")[(row0["engine"], row0["n"])]
    assert c["invalid"] == ["r0: invalid (3 of 4 requests failed)"] and 0 not in c["values"] and len(c["values"]) == 4
    assert 0 not in values_by_cell(rd, "decode_agg_tps")[(row0["engine"], row0["n"])]
    assert gate_problems(rd) == ["summary.json: 1 of 20 row(s) invalid (paged r0 N=1: 3 of 4 requests failed)"]


@pytest.mark.parametrize("value", [1e308, -1e308, 5e-324, 1e-308])
@pytest.mark.parametrize("side", ["A", "B"])
def test_a_number_beyond_the_statistics_range_is_a_named_failure(tmp_path, value, side):
    """N11: 1e308 in one row overflowed the statistics (OverflowError, an internal error); now the
    cell has no verdict and says why; --fail-on-regression exits 5, the JSON stays valid."""
    from inproc import cli

    run = clone("control" if side == "A" else "candidate", tmp_path, side)
    edit_json(run / "summary.json", lambda s: s["rows"][0].update(decode_agg_tps=value))
    a, b = (run, DATA / "candidate") if side == "A" else (DATA / "control", run)
    for args in (["--metric", "decode_agg_tps"], []):
        r = cli("compare", a, b, *args, "--fail-on-regression", "--json")
        assert r.rc == 5 and "internal error" not in r.err, r.err
        doc = json.loads(r.out, parse_constant=lambda c: pytest.fail(f"bare {c} in --json output"))
        row = cell(doc, "paged", 1, "decode_agg_tps")
        said = f"{side} has no decode_agg_tps for paged at N=1 (r0: {value:g} (beyond the statistics' range"
        assert row["verdict"] == "missing" and said in row["reason"]


def test_one_control_repeat_is_no_verdict_never_within_noise(parity_cli, tmp_path):
    """The rule's threshold is max(2 %, 3 x the same-binary stdev): a real one-repeat run as the
    control has no stdev, so no cell can be called within noise (it was, whatever the change, and
    --fail-on-regression passed); each cell is missing with the reason, exit 5."""
    a, b = clone("captured", tmp_path, "A"), clone("captured", tmp_path, "B")
    r = parity_cli("compare", str(a), str(b), "--fail-on-regression", "--json")
    assert r.returncode == 5, r.stderr
    doc = json.loads(r.stdout)
    assert doc["verdict"] == "missing" and doc["counts"]["within noise"] == 0
    assert {x["verdict"] for x in doc["rows"]} == {"missing"}
    assert all("no same-binary noise estimate" in x["reason"] and "A has 1 repeat(s)" in x["reason"] for x in doc["rows"])
    assert "a missing number is never within noise" in r.stderr.strip().splitlines()[-1]
