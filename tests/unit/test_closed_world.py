"""Closed-world verdicts and robust readers, through the real CLI: a number missing, null, NaN,
inf or of the wrong type in either run is a named failure (never "within noise"); an empty
series, a point without a ratio or a target without a run is never green; a broken file or a
file where a directory belongs is one line and exit 2, never "internal error".  Each case was
found on a real run or by hand on the released commands; the runs are the report fixtures
(tests/data/report) and the H100 lever runs (tests/data/h100-noise)."""

import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest

from inproc import cli

DATA = Path(__file__).resolve().parents[1] / "data"
REPORT = DATA / "report"


def run(tmp_path, src="candidate", name=None, edit=None) -> Path:
    d = tmp_path / (name or src)
    shutil.copytree(REPORT / src, d)
    if edit:
        doc = json.loads((d / "summary.json").read_text())
        edit(doc)
        (d / "summary.json").write_text(json.dumps(doc))
    return d


def set_metric(engine, metric, value):
    def edit(doc):
        for r in doc["rows"]:
            if r["engine"] == engine and value == "ABSENT":
                del r[metric]
            elif r["engine"] == engine:
                r[metric] = value

    return edit


def one_line(r, code=2) -> str:
    assert r.rc == code, (r.rc, r.err[-2000:])
    assert "internal error" not in r.err and "Traceback" not in r.err
    (line,) = r.error_lines()
    return line


@pytest.mark.parametrize("value, said", [(None, "r0: null"), ("fast", "r0: a str"), ("ABSENT", "r0: absent")])
def test_compare_names_a_missing_headline_and_fails_on_it(tmp_path, value, said):
    b = run(tmp_path, edit=set_metric("paged", "decode_agg_tps", value))
    r = cli("compare", REPORT / "control", b, "--fail-on-regression", "--json")
    line = one_line(r, 5)
    assert "B has no decode_agg_tps for paged at N=1" in line and said in line and "never within noise" in line
    doc = json.loads(r.out)
    gaps = [x for x in doc["rows"] if x["verdict"] == "missing"]
    assert {(x["engine"], x["n"]) for x in gaps} == {("paged", 1), ("paged", 4)} and doc["verdict"] == "missing"
    assert cli("compare", REPORT / "control", b, "--metric", "agg_tps", "--fail-on-regression").rc == 0  # the other metrics still compare


@pytest.mark.parametrize("value, word", [(math.nan, "NaN"), (math.inf, "inf"), (-math.inf, "-inf")])
def test_compare_refuses_non_finite_numbers(tmp_path, value, word):
    b = run(tmp_path, edit=set_metric("paged", "decode_agg_tps", value))
    line = one_line(cli("compare", REPORT / "control", b, "--fail-on-regression"))
    assert f"rows[0].decode_agg_tps is {word}" in line or f"decode_agg_tps is {word}" in line


def test_a_cell_only_one_run_has_is_missing_not_skipped(tmp_path):
    b = run(tmp_path, edit=lambda d: d.update(rows=[r for r in d["rows"] if r["n"] != 4]))
    line = one_line(cli("compare", REPORT / "control", b, "--metric", "decode_agg_tps", "--fail-on-regression"), 5)
    assert "B has no row for paged at N=4" in line and "B has no row for stock at N=4" in line


def test_report_compare_with_a_missing_headline_is_not_default_off(tmp_path):
    b = run(tmp_path, edit=set_metric("paged", "decode_agg_tps", None))
    r = cli("report", b, "--compare", REPORT / "control", "--out-dir", tmp_path / "reports", "--no-plots", "--json")
    assert r.rc == 0, r.err
    doc = json.loads(r.out)
    assert doc["verdict"] == "invalid" and "B has no decode_agg_tps for paged at N=1" in doc["verdict_rule"]
    keep = cli("report", b, "--compare", REPORT / "control", "--out-dir", tmp_path / "reports", "--no-plots", "--verdict", "default-off", "--title", "again")
    assert "only reject is allowed" in one_line(keep)


def nightly(tmp_path, name, status="complete", edit=None):
    d = run(tmp_path, "control", name, edit=edit)
    m = json.loads((d / "manifest.json").read_text())
    m.update(kind="campaign", run_id=d.name, campaign={"name": "nightly"}, status=status)
    (d / "manifest.json").write_text(json.dumps(m))
    return d


def report_step(tmp_path, now):
    from parity.artifacts import RunDir
    from parity.config import load_profile
    from parity.context import Context
    from parity.report.render import campaign_step
    from parity.runners.local import LocalRunner
    from parity.ui import Output

    prof = load_profile("smoke")
    prof.reports.dir = str(tmp_path / "ledger")
    ctx = Context(profile=prof, runner=LocalRunner(), out=Output(json_mode=True), artifacts_root=tmp_path, run=RunDir(now))
    return campaign_step(ctx, {"title": "nightly", "compare": "previous", "plots": False})


def test_nightly_report_step_fails_on_a_missing_metric(tmp_path):
    from parity.errors import RegressionDetected

    nightly(tmp_path, "20261120_021700_nightly")
    now = nightly(tmp_path, "20261121_021700_nightly", edit=set_metric("stock", "ttft_mean_ms", None))
    with pytest.raises(RegressionDetected, match="B has no ttft_mean_ms for stock at N=1") as e:
        report_step(tmp_path, now)
    assert e.value.exit_code == 5


def test_nightly_without_a_usable_control_is_not_green(tmp_path):
    """The first nightly has no control and passes; once earlier nightlies exist and none of them
    can be the control (each failed), a nightly that checked nothing fails, naming why."""
    from parity.errors import RegressionDetected

    first = nightly(tmp_path, "20261120_021700_nightly")
    assert report_step(tmp_path, first)["verdict"] == "measurement-only"
    m = json.loads((first / "manifest.json").read_text())
    (first / "manifest.json").write_text(json.dumps({**m, "status": "failed"}))  # its post-gate step failed after the report
    now = nightly(tmp_path, "20261121_021700_nightly")
    with pytest.raises(RegressionDetected, match="no control run: 1 earlier run.* none complete with green gates .newest 20261120_021700_nightly: status failed"):
        report_step(tmp_path, now)


@pytest.mark.parametrize("corrupt, said", [
    (lambda d: [d], "the document is a list, expected an object"),
    (lambda d: {**d, "rows": ["paged r0 N=1", *d["rows"][1:]]}, "rows[0] is a string, expected an object"),
])  # fmt: skip
def test_a_list_or_a_string_row_is_one_line_in_compare_report_and_gap(tmp_path, corrupt, said):
    bad = run(tmp_path, "control", "bad")
    (bad / "summary.json").write_text(json.dumps(corrupt(json.loads((bad / "summary.json").read_text()))))
    bench = tmp_path / "bench"
    bench.mkdir()
    shutil.copy(DATA / "h100-noise" / "lever-bench.json", bench / "bench.json")
    for args in (["compare", REPORT / "control", bad], ["compare", bad, REPORT / "control"], ["report", bad, "--out-dir", tmp_path / "o", "--no-plots"], ["gap", bad, bench]):
        assert said in one_line(cli(*args))


def test_a_file_where_a_run_directory_belongs(tmp_path):
    f = REPORT / "control" / "summary.json"
    for args in (["compare", f, REPORT / "candidate"], ["report", f, "--out-dir", tmp_path / "o"], ["gap", f, tmp_path], ["compare", REPORT / "control", REPORT / "candidate", "--noise-floor", f]):
        assert f"{f}: a file, not a run directory (the run directory that holds it: {f.parent})" in one_line(cli(*args))
    assert "--out-dir" in one_line(cli("report", REPORT / "candidate", "--out-dir", f, "--no-plots"))


def test_gap_with_a_point_that_has_no_ratio_names_it(tmp_path):
    """One all-invalid point in a real snapshot (the H100 lever run: N=8 of paged_nofg invalid in every block)."""
    s, b = tmp_path / "serving", tmp_path / "bench"
    s.mkdir(), b.mkdir()
    doc = json.loads((DATA / "h100-noise" / "lever-summary.json").read_text())
    for r in doc["rows"]:
        if r["engine"] == "paged_nofg" and r["n"] == 8:
            r.update(valid=False, invalid_reasons=["decode window 0.4 s < min_window_s 2"])
    (s / "summary.json").write_text(json.dumps(doc))
    shutil.copy(DATA / "h100-noise" / "lever-bench.json", b / "bench.json")
    r = cli("gap", s, b, "--json")
    line = one_line(r)
    assert "gap incomplete: no serving decode_agg_tps ratio paged_nofg/paged at N=8 (no block has both arms)" in line and "answered at N=1, 32" in line
    assert [p["n"] for p in json.loads(r.out)["points"]] == [1, 32]


def test_bisect_series_of_an_empty_directory(tmp_path):
    (tmp_path / "empty").mkdir()
    line = one_line(cli("--artifacts", tmp_path / "runs", "bisect", "--series", tmp_path / "empty"))
    assert "no NNNN-*.patch in it" in line and not (tmp_path / "runs").exists()


def test_canary_on_an_empty_patch_directory_is_not_green(tmp_path):
    repo = tmp_path / "llama.cpp"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q", "-b", "master"], cwd=repo, check=True)
    (repo / "README.md").write_text("upstream\n")
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "upstream"], cwd=repo, check=True)
    (tmp_path / "moved").mkdir()
    r = cli("--artifacts", tmp_path / "runs", "canary", "--upstream", "master", "--repo", repo, "--series", tmp_path / "moved")
    assert "no NNNN-*.patch in it" in one_line(r) and "green" not in r.out + r.err


def test_ab_point_without_a_ratio_is_never_go():
    from parity.levers.ab import GO, INCONCLUSIVE, NO_GO, decide

    def cell(point, ratio, low, high, outcome):
        return {"point": point, "ratio": ratio, "low": low, "high": high, "outcome": outcome, "n_blocks": 6}

    gate = {"ok": True, "problem": None}
    improved, hole = cell("N=1", 1.08, 1.05, 1.11, "improved"), {**cell("N=8", None, None, None, "inconclusive"), "reason": "no block has both arms"}
    d = decide(gate, [improved, hole], "decode_agg_tps")  # N=1 improved, N=8 has no ratio: not GO
    assert d["verdict"] == INCONCLUSIVE and d["missing"] == ["N=8: no decode_agg_tps B/A (no block has both arms)"]
    d = decide(gate, [improved], "decode_agg_tps", ["N=1", "N=8", "N=32"])
    assert d["verdict"] == INCONCLUSIVE and "N=32: no decode_agg_tps B/A" in d["why"]
    assert decide(gate, [improved], "decode_agg_tps", ["N=1"])["verdict"] == GO
    assert decide(gate, [cell("N=1", 0.9, 0.85, 0.95, "regressed"), hole], "decode_agg_tps", ["N=1", "N=8"])["verdict"] == NO_GO  # a regression stays one
    assert decide(gate, [], "s_tg", [])["missing"]  # zero rows, zero blocks


def test_matrix_target_without_a_readable_run_is_a_failure():
    from parity.matrix.run import failures

    table = [{"target": "h100", "exit_code": 0, "run_dir": "targets/h100/r1"}, {"target": "gb10", "exit_code": 0, "run_dir": None},
             {"target": "b200", "exit_code": 0, "run_dir": "targets/b200/r1"}, {"target": "a100", "exit_code": 4, "run_dir": None}]  # fmt: skip
    got = failures(table, [{"target": "b200", "error": "summary.json: empty"}])
    assert got == ["gb10 (exit 0 but no run directory came back)", "b200 (its run directory: summary.json: empty)", "a100 (exit 4)"]


def test_levers_json_with_a_date_the_user_typed_unquoted(tmp_path):
    """YAML reads `date: 2026-11-25` as a date, not a string: --json prints it as one."""
    m = tmp_path / "lever_map.yaml"
    m.write_text("levers:\n- {lever: LLAMA_X=1, verdict: SHIPPED, date: 2026-11-25}\n")
    r = cli("levers", "--map", m, "--json")
    assert r.rc == 0, r.err
    assert json.loads(r.out)["rows"][0]["date"] == "2026-11-25"


@pytest.mark.parametrize("text, said", [("levers:\n- {lever: LLAMA_X=1, verdict: FLAT, ratio: fast}\n", "levers[0].ratio is a string"),
                                        ("levers:\n- {verdict: GO}\n", "levers[0]: object missing required field `lever`"), ("levers: [\n", "YAML syntax error")])
def test_ab_on_a_broken_lever_map_stops_before_any_work_and_leaves_it_alone(tmp_path, text, said):
    m = tmp_path / "lever_map.yaml"
    m.write_text(text)
    (tmp_path / "file").write_text("x")  # the run root is a file: a run that got past the map would stop there too
    r = cli("--artifacts", tmp_path / "file" / "runs", "ab", "--env", "LLAMA_X=1", "--map", m)
    assert said in one_line(r) and m.read_text() == text and not (tmp_path / "lever_map.md").exists()


@pytest.mark.parametrize("args", [["levers", "--map", "x" * 300], ["report", REPORT / "candidate", "--out-dir", "x" * 300, "--no-plots"],
                                  ["bisect", "--series", "x" * 300], ["bisect", "--series", "~nobody-here/series"], ["gap", "~nobody-here/run", REPORT / "candidate"]])
def test_a_path_too_long_or_of_an_unknown_users_home_is_one_line(tmp_path, args):
    (tmp_path / "file").write_text("x")
    one_line(cli("--artifacts", tmp_path / "file" / "runs", *args))


# ------------------------------------------------------------------ what the fuzzing found (tests/unit/test_fuzz_inputs.py), kept


def _users_art_without_its_gate_header(tmp_path):
    art = shutil.copytree(DATA / "users-art" / "phase72", tmp_path / "phase72")
    text = (art / "gate_summary.tsv").read_text()
    (art / "gate_summary.tsv").write_text("\n" + text.split("\n", 1)[1])  # the header line emptied
    return ["compare", art, DATA / "users-art" / "phase72", "--force", "--json"]


def _builds_with(edit):
    def make(tmp_path):
        run = shutil.copytree(REPORT / "candidate", tmp_path / "run")
        doc = json.loads((run / "builds.json").read_text())
        edit(doc["paged"])
        (run / "builds.json").write_text(json.dumps(doc))
        return ["report", run, "--out-dir", tmp_path / "reports", "--no-plots", "--json"]

    return make


def _ledger_not_utf8(rebuild):
    def make(tmp_path):
        out = tmp_path / "reports"
        assert cli("report", REPORT / "candidate", "--out-dir", out, "--no-plots", "--title", "first").rc == 0
        (out / "BENCHMARK.csv").write_bytes(b"\x80")
        return ["report", "--rebuild-ledger", "--out-dir", out, "--json"] if rebuild else ["report", REPORT / "candidate", "--out-dir", out, "--no-plots", "--phase", "7"]

    return make


@pytest.mark.parametrize("make, code, said", [
    (_users_art_without_its_gate_header, 0, None),
    (_builds_with(lambda b: b.update(tree_after=math.nan)), 0, None),
    (_builds_with(lambda b: b["source"].update(sha256=math.nan)), 0, None),
    (_ledger_not_utf8(rebuild=True), 0, None),
    (_ledger_not_utf8(rebuild=False), 2, "a broken ledger"),
], ids=["gate-table-header-emptied", "builds-tree-nan", "builds-source-sha-nan", "rebuild-a-ledger-not-utf8", "report-into-a-ledger-not-utf8"])  # fmt: skip
def test_what_the_fuzzing_found(tmp_path, make, code, said):
    args = make(tmp_path)
    snapshot = None
    if args[0] == "report" and "--phase" in args:
        snapshot = (tmp_path / "reports" / "BENCHMARK.csv").read_bytes(), (tmp_path / "reports" / "BENCHMARK.md").read_bytes()
    r = cli(*args)
    assert "internal error" not in r.err and r.rc == code, (r.rc, r.err[-1500:])
    if said:
        assert said in one_line(r, code)
        assert ((tmp_path / "reports" / "BENCHMARK.csv").read_bytes(), (tmp_path / "reports" / "BENCHMARK.md").read_bytes()) == snapshot
        assert not list((tmp_path / "reports").glob("*-phase007-*"))  # nothing written before the ledger was found broken


def test_a_manifest_without_kind_or_status_reports_and_is_not_green(tmp_path):
    """Found by the long fuzzing profile: the report's template read manifest.kind (internal error)."""
    run_ = run(tmp_path)
    m = json.loads((run_ / "manifest.json").read_text())
    (run_ / "manifest.json").write_text(json.dumps({k: v for k, v in m.items() if k not in ("kind", "status")}))
    r = cli("report", run_, "--out-dir", tmp_path / "reports", "--no-plots", "--json")
    assert r.rc == 0 and json.loads(r.out)["verdict"] == "invalid", r.err
    assert "manifest.json has no status" in one_line(cli("compare", REPORT / "control", run_))
