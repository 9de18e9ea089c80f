"""Phase reports and the ledger, rendered from fixture run dirs (tests/data/report)."""

import json
import os
import re
import shutil
import socket
from pathlib import Path

import pytest

from parity.artifacts import now_iso
from parity.config import load_profile
from parity.errors import UsageError
from parity.report import ledger
from parity.report.render import ReportRequest, render_report

DATA = Path(__file__).resolve().parent.parent / "data" / "report"
SECTIONS = ["Summary", "Hardware", "Provenance", "Gates (pre / post)", "Results (medians over repeats)", "Ratios vs the reference engine (stock)", "Paired verdicts (same session, per block)",
            "Validity (every point, with its measurement windows)", "Server-side reconciliation", "Batched-bench", "A/B comparison", "Profile buckets", "Plots", "Verdict", "Metric definitions", "Reproduce"]


@pytest.fixture(scope="module")
def profile():
    return load_profile("smoke")


def render(profile, out, run="candidate", **kw):
    kw.setdefault("date", "2026-11-22")
    kw.setdefault("plots", False)  # plots cost ~0.3 s each; the tests that check them ask
    return render_report(profile, ReportRequest(run=str(kw.pop("run_path", DATA / run)), out_dir=str(out), **kw))


def headings(text):
    return re.findall(r"^## (.+)$", text, re.M)


def check_links(md: Path) -> list[Path]:
    """Every markdown link/image target resolves to a non-empty file."""
    targets = re.findall(r"\]\(([^)\s]+)\)", md.read_text())
    paths = [md.parent / t for t in targets if not t.startswith("http")]
    for p in paths:
        assert p.is_file() and p.stat().st_size > 0, p
    return paths


def test_full_report_has_every_section_plots_and_links(profile, tmp_path):
    res = render(profile, tmp_path, compare=str(DATA / "control"), title="demo series decode", plots=True)
    md = Path(res["report"])
    assert md.name == "2026-11-22-phase001-demo-series-decode.md"
    text = md.read_text()
    assert headings(text) == SECTIONS
    assert "_not available" not in text and "_not run" not in text  # every section has data
    pngs = [p for p in check_links(md) if p.suffix == ".png"]
    assert {p.name for p in pngs} == {"decode_tps_vs_n.png", "ratio_vs_n.png", "paired_blocks.png", "buckets.png", "ab_deltas.png"}
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    # the verdict and the rule that produced it
    assert res["verdict"] == "keep" and "4 improved, 0 regressed" in res["verdict_rule"]
    assert "max(2%, 3 x same-binary stdev" in text
    # content from each artifact
    assert "cpu_only" in text  # hardware.json
    assert "llama-cpp-python==0.3.36" in text and "36834a14b57a" in text and "-DGGML_NATIVE=OFF" in text  # builds.json
    assert "| post | md5 tiny/paged | 69f17b7697043c45ce716214145a96a1 |" in text  # gates.json
    assert "| paged | 4 | 5 |" in text  # medians with repeats
    assert "| paged | 4 | decode_agg_tps | higher |" in text and "improved" in text  # A/B rows
    assert "| gdn_core | 1250.0 | 41.67% | 600 | 2.08 |" in text  # profile/analysis.json, per capture
    assert "### Difference method: paged ntg64 - paged ntg16 (paged, 48 steps x npl 4)" in text
    assert "| total | 2250.0 | 6900 | 46.88 | 11718.8 | 0.3261 |" in text
    assert "| ttft_mean_ms | ms | lower | mean over requests of" in text  # parity.metrics.serving definitions
    assert "parity --artifacts runs snapshot -p smoke --model tiny --npl 1,4 --repeat 5" in text  # manifest argv


def test_front_matter_sidecar_and_ledger(profile, tmp_path):
    res = render(profile, tmp_path, compare=str(DATA / "control"), title="A/B one")
    md = Path(res["report"])
    fm = ledger.front_matter(md.read_text())
    assert fm["phase"] == 1 and fm["verdict"] == "keep" and fm["run"] == str(DATA / "candidate")
    assert fm["key_ratios"].startswith("paged/stock decode 0.")
    side = json.loads(md.with_suffix(".json").read_text())
    assert side["ledger"]["report"] == md.name and side["compare"]["counts"]["improved"] == 4
    rows = ledger.read_rows(tmp_path)
    assert [(r["phase"], r["title"], r["verdict"]) for r in rows] == [("1", "A/B one", "keep")]
    assert f"[{md.name}]({md.name})" in (tmp_path / "BENCHMARK.md").read_text()


def test_phase_auto_increments_and_reports_are_append_only(profile, tmp_path):
    assert render(profile, tmp_path, title="first")["phase"] == 1
    assert render(profile, tmp_path, title="second")["phase"] == 2
    assert render(profile, tmp_path, title="jump", phase=7)["phase"] == 7
    assert render(profile, tmp_path, title="after jump")["phase"] == 8
    with pytest.raises(UsageError, match="already exists"):
        render(profile, tmp_path, title="jump", phase=7)
    assert [r["phase"] for r in ledger.read_rows(tmp_path)] == ["1", "2", "7", "8"]


def test_rebuild_ledger_from_sidecars_and_front_matter(profile, tmp_path, parity_cli):
    render(profile, tmp_path, title="one", compare=str(DATA / "control"))
    second = Path(render(profile, tmp_path, title="two")["report"])
    before = (tmp_path / "BENCHMARK.csv").read_text()
    second.with_suffix(".json").unlink()  # the front matter still carries the row
    (tmp_path / "BENCHMARK.csv").unlink()
    (tmp_path / "BENCHMARK.md").write_text("garbage\n")
    r = parity_cli("report", "--rebuild-ledger", "--out-dir", str(tmp_path), "--json")
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["rows"]) == 2
    assert (tmp_path / "BENCHMARK.csv").read_text() == before
    assert "garbage" not in (tmp_path / "BENCHMARK.md").read_text()


def test_measurement_only_without_control_and_missing_sections_say_so(profile, tmp_path):
    res = render(profile, tmp_path, run="control", plots=True)
    text = Path(res["report"]).read_text()
    assert res["verdict"] == "measurement-only"
    assert headings(text) == SECTIONS  # every section, even without data
    assert "_not run: no --compare control given._" in text
    assert "_not available: no profile/analysis.json in the run._" in text
    assert {Path(p).name for p in res["plots"]} == {"decode_tps_vs_n.png", "ratio_vs_n.png", "paired_blocks.png"}
    check_links(Path(res["report"]))


def test_red_gates_make_the_report_invalid_and_refuse_keep(profile, tmp_path):
    run = tmp_path / "red"
    shutil.copytree(DATA / "candidate", run)
    g = json.loads((run / "gates.json").read_text())
    g["post"]["status"] = "fail"
    g["post"]["checks"][0]["status"] = "fail"
    g["status"] = "fail"
    (run / "gates.json").write_text(json.dumps(g))
    out = tmp_path / "reports"
    res = render(profile, out, run_path=run)
    assert res["verdict"] == "invalid" and "post-gate red: md5 tiny/paged" in res["verdict_rule"]
    with pytest.raises(UsageError, match="only reject is allowed"):
        render(profile, out, run_path=run, verdict="keep", title="x")
    assert render(profile, out, run_path=run, verdict="reject", title="y")["verdict"] == "reject"
    # as the candidate of an A/B it is refused unless forced, and the forced report says so
    with pytest.raises(UsageError, match="refusing to compare"):
        render(profile, out, run_path=run, compare=str(DATA / "control"), title="z")
    forced = render(profile, out, run_path=run, compare=str(DATA / "control"), title="z", force=True)
    text = Path(forced["report"]).read_text()
    assert forced["forced"] and "FORCED comparison" in text and 'forced: true' in text


def test_author_verdict_and_bad_options(profile, tmp_path, parity_cli):
    res = render(profile, tmp_path, compare=str(DATA / "control"), verdict="default-off")
    assert res["verdict"] == "default-off" and "set by the author" in res["verdict_rule"] and "4 improved" in res["verdict_rule"]
    r = parity_cli("report", str(DATA / "candidate"), "--verdict", "ship-it", "--out-dir", str(tmp_path))
    assert r.returncode == 2 and "keep, reject, default-off" in r.stderr
    r = parity_cli("report", "--out-dir", str(tmp_path))
    assert r.returncode == 2 and "RUN" in r.stderr


def test_bad_input_leaves_no_ledger_lock_behind(profile, tmp_path, parity_cli):
    out = tmp_path / "reports"
    out.mkdir()
    for args in ([str(tmp_path / "missing")], [str(DATA / "candidate"), "--verdict", "ship-it"], [str(DATA / "candidate"), "--phase", "0"]):
        r = parity_cli("report", *args, "--out-dir", str(out))
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert list(out.iterdir()) == []  # refused before the ledger's lock file was made


def test_regression_gives_reject(profile, tmp_path):
    res = render(profile, tmp_path, run="control", compare=str(DATA / "candidate"))
    assert res["verdict"] == "reject" and "regressed beyond noise" in res["verdict_rule"]


def test_no_plots(profile, tmp_path):
    res = render(profile, tmp_path)
    assert res["plots"] == [] and "_plots disabled_" in Path(res["report"]).read_text()
    assert not any(p.is_dir() for p in tmp_path.iterdir())


def test_campaign_step_writes_into_the_run_dir(tmp_path):
    from parity.artifacts import RunDir
    from parity.context import Context
    from parity.report.render import campaign_step
    from parity.runners.local import LocalRunner
    from parity.ui import Output

    run = tmp_path / "run"
    shutil.copytree(DATA / "candidate", run)
    m = json.loads((run / "manifest.json").read_text())
    m["status"] = "running"  # the campaign is still going when its report step runs (in this process)
    m.update(pid=os.getpid(), hostname=socket.gethostname(), started=now_iso())
    (run / "manifest.json").write_text(json.dumps(m))
    prof = load_profile("smoke")
    prof.reports.dir = str(tmp_path / "ledger")  # the running ledger (default: ./reports)
    ctx = Context(profile=prof, runner=LocalRunner(), out=Output(json_mode=True), artifacts_root=tmp_path, run=RunDir(run))
    res = campaign_step(ctx, {"title": "smoke campaign", "compare": str(DATA / "control"), "plots": False})
    assert Path(res["report"]).parent == run / "reports" and res["verdict"] == "keep"
    assert (run / "reports" / "BENCHMARK.md").is_file() and res["running_ledger"] == str(tmp_path / "ledger" / "BENCHMARK.md")
    from parity.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown report option"):
        campaign_step(ctx, {"colour": "blue"})


def test_gates_only_run_still_gets_every_section(profile, tmp_path):
    run = tmp_path / "gates-only"
    shutil.copytree(DATA / "control", run)
    (run / "summary.json").unlink()
    (run / "hardware.json").unlink()
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**manifest, "kind": "gate"}))  # a gate run: no summary.json
    res = render(profile, tmp_path / "out", run_path=run, title="gates only", plots=True)
    text = Path(res["report"]).read_text()
    assert headings(text) == SECTIONS[:5] + ["Ratios vs the reference engine (none)"] + SECTIONS[6:]
    assert "no summary.json in the run" in text and "no hardware.json" in text
    assert res["verdict"] == "measurement-only" and res["plots"] == []
    with pytest.raises(UsageError, match="no summary.json to compare"):
        render(profile, tmp_path / "out", run_path=run, title="x", compare=str(DATA / "control"))


def test_definitions_are_the_runs_own_else_the_registrys():
    from parity.metrics.registry import all_metrics
    from parity.report.sections import definitions

    rows, note = definitions(["ttft_p50_ms"])
    assert rows == [["ttft_p50_ms", "ms", "lower", all_metrics()["ttft_p50_ms"].formula]] and note is None
    recorded = {"metrics": [{"name": "ttft_p50_ms", "unit": "ms", "better": "lower", "formula": "median of (first token - send)"}]}
    assert definitions(["ttft_p50_ms"], recorded) == ([["ttft_p50_ms", "ms", "lower", "median of (first token - send)"]], None)
    assert definitions(["no_such_metric"], {}) == ([], "no definitions for these metrics")


def test_collapsed_profile_is_flagged(profile, tmp_path):
    run = tmp_path / "collapsed"
    shutil.copytree(DATA / "candidate", run)
    a = json.loads((run / "profile" / "analysis.json").read_text())
    a.update(collapsed=True, note="COLLAPSED: captured without --cuda-graph-trace=node")
    (run / "profile" / "analysis.json").write_text(json.dumps(a))
    text = Path(render(profile, tmp_path / "out", run_path=run)["report"]).read_text()
    assert "**COLLAPSED: captured without --cuda-graph-trace=node**" in text


def test_nightly_report_against_previous_run_fails_on_regression(tmp_path):
    """compare: previous picks the newest earlier complete, valid run of the same campaign; a
    regression beyond noise writes the report and then fails the step with exit code 5."""
    from parity.artifacts import RunDir
    from parity.context import Context
    from parity.errors import RegressionDetected
    from parity.report.render import campaign_step, previous_run
    from parity.runners.local import LocalRunner
    from parity.ui import Output

    def run_dir(name, src, campaign="nightly", status="complete", valid=True):
        d = tmp_path / name
        shutil.copytree(DATA / src, d)
        m = json.loads((d / "manifest.json").read_text())
        m.update(kind="campaign", run_id=name, campaign={"name": campaign}, status=status, valid=valid)
        if status == "running":  # the campaign reporting on itself: this process, alive
            m.update(pid=os.getpid(), hostname=socket.gethostname(), started=now_iso())
        (d / "manifest.json").write_text(json.dumps(m))
        return d

    good = run_dir("20261120_021700_nightly", "candidate")
    run_dir("20261121_021700_nightly", "candidate", valid=False)  # red post-gate: not a control
    run_dir("20261121_031700_nightly", "candidate", status="failed")
    run_dir("20261121_041700_smoke", "candidate", campaign="smoke")
    now = run_dir("20261122_021700_nightly", "control", status="running")
    run_dir("20261123_021700_nightly", "candidate")  # later than this run: never the control
    prof = load_profile("smoke")
    prof.reports.dir = str(tmp_path / "ledger")
    ctx = Context(profile=prof, runner=LocalRunner(), out=Output(json_mode=True), artifacts_root=tmp_path, run=RunDir(now))
    assert previous_run(RunDir(now)) == str(good)
    with pytest.raises(RegressionDetected, match=f"regressed beyond noise against {good}") as e:
        campaign_step(ctx, {"title": "nightly", "compare": "previous", "plots": False})
    assert e.value.exit_code == 5 and (now / "reports" / "BENCHMARK.md").is_file()
    res = campaign_step(ctx, {"title": "nightly", "compare": "previous", "plots": False, "fail_on_regression": False})
    assert res["verdict"] == "reject" and any(r["verdict"] == "regressed" for r in res["ab_rows"])
    assert previous_run(RunDir(good)) is None


def test_batched_bench_and_cpu_line_from_real_files(profile, tmp_path):
    from parity.bench.batched_bench import parse

    run = tmp_path / "run"
    shutil.copytree(DATA / "candidate", run)
    rows = parse((DATA.parent / "bench" / "batched-bench-ok.stdout").read_text())
    (run / "bench.json").write_text(json.dumps({"engine": "paged", "rows": rows, "command": ["llama-batched-bench", "-npp", "32"]}))
    text = Path(render(profile, tmp_path / "out", run_path=run)["report"]).read_text()
    section = text.split("## Batched-bench")[1].split("## A/B comparison")[0]
    assert "`llama-batched-bench -npp 32`" in section and len(re.findall(r"^\| \d+ \| \d+ \| \d+ \|", section, re.M)) == len(rows) > 0
    assert "- CPU: AMD EPYC x2 (x86_64)" in text


def _campaign_run(tmp_path, name):
    from parity.artifacts import RunDir

    run = tmp_path / "runs" / name
    shutil.copytree(DATA / "candidate", run)
    m = json.loads((run / "manifest.json").read_text())
    m.update(status="running", kind="campaign", run_id=name, campaign={"name": "nightly"})
    (run / "manifest.json").write_text(json.dumps(m))
    return RunDir(run)


def _step(tmp_path, rd, **options):
    from parity.context import Context
    from parity.report.render import campaign_step
    from parity.runners.local import LocalRunner
    from parity.ui import Output

    prof = load_profile("smoke")
    prof.reports.dir = str(tmp_path / "ledger")
    ctx = Context(profile=prof, runner=LocalRunner(), out=Output(json_mode=True), artifacts_root=tmp_path / "runs", run=rd)
    return campaign_step(ctx, {"title": "nightly", "plots": False, **options})


def test_campaign_reports_join_the_running_ledger(profile, tmp_path):
    """Each run dir keeps its own report; the running ledger numbers them on: 1, 2, then a
    standalone `parity report` into that ledger gets 3."""
    first = _step(tmp_path, _campaign_run(tmp_path, "20261120_021700_nightly"))
    second = _step(tmp_path, _campaign_run(tmp_path, "20261121_021700_nightly"))
    assert (first["phase"], second["phase"]) == (1, 2)
    assert Path(second["report"]).parent == tmp_path / "runs" / "20261121_021700_nightly" / "reports"
    running = tmp_path / "ledger"
    rows = ledger.read_rows(running)
    assert [(r["phase"], r["report"]) for r in rows] == [
        ("1", "../runs/20261120_021700_nightly/reports/2026-11-22-phase001-nightly.md".replace("2026-11-22", rows[0]["date"])),
        ("2", "../runs/20261121_021700_nightly/reports/2026-11-22-phase002-nightly.md".replace("2026-11-22", rows[1]["date"])),
    ]
    assert all((running / r["report"]).is_file() for r in rows) and check_links(running / "BENCHMARK.md")
    assert [r["phase"] for r in ledger.read_rows(Path(second["report"]).parent)] == ["2"]  # the run dir's own ledger: its row
    third = render(profile, running, title="by hand")
    assert third["phase"] == 3
    rebuilt = ledger.rebuild(running)  # the campaign rows (reports in run dirs) survive a rebuild
    assert [str(r["phase"]) for r in rebuilt] == ["1", "2", "3"]


def test_a_campaign_can_keep_its_own_ledger(tmp_path):
    a = _step(tmp_path, _campaign_run(tmp_path, "20261120_021700_nightly"), ledger="run")
    b = _step(tmp_path, _campaign_run(tmp_path, "20261121_021700_nightly"), ledger="run")
    assert (a["phase"], b["phase"], a["running_ledger"]) == (1, 1, None) and not (tmp_path / "ledger").exists()
    other = tmp_path / "team-ledger"
    c = _step(tmp_path, _campaign_run(tmp_path, "20261122_021700_nightly"), ledger=str(other))
    assert c["phase"] == 1 and ledger.read_rows(other)[0]["phase"] == "1"


def test_reports_written_at_once_into_one_directory_take_their_own_phases(tmp_path):
    """Four `parity report` processes into one directory, one title: four reports, phases 1-4,
    four ledger rows (before, they could all take phase 1 and overwrite one another's file)."""
    import subprocess
    import sys
    import time

    from conftest import REPO

    code = ("import sys, os, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.002)\n"
            "import runpy\nsys.argv = ['parity'] + sys.argv[2:]\nrunpy.run_module('parity', run_name='__main__', alter_sys=True)")  # fmt: skip
    args = ["report", str(DATA / "candidate"), "--out-dir", str(tmp_path / "out"), "--title", "nightly", "--no-plots", "--json"]
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "go"), *args], cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]  # fmt: skip
    time.sleep(1.0)
    (tmp_path / "go").write_text("")
    docs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
        docs.append(json.loads(out))
    assert sorted(d["phase"] for d in docs) == [1, 2, 3, 4] and len({d["report"] for d in docs}) == 4
    assert sorted(int(r["phase"]) for r in ledger.read_rows(tmp_path / "out")) == [1, 2, 3, 4]
    assert all(Path(d["report"]).is_file() for d in docs)


# ------------------------------------------------------------ issue 56: numbers that do not count, nothing half-written


def _copy(name: str, to: Path, edit=None) -> Path:
    run = shutil.copytree(DATA / name, to)
    if edit is not None:
        doc = json.loads((run / "summary.json").read_text())
        edit(doc)
        (run / "summary.json").write_text(json.dumps(doc))
    return run


def _flip_rows(s: dict) -> None:
    for r in s["rows"]:
        r.update(valid=False, invalid_reasons=["marked invalid by the test"])


def test_report_never_writes_a_verdict_from_rows_marked_invalid(tmp_path):
    """N1: `report B --compare A` with every row of B marked invalid (its manifest valid; the real
    captured smoke run): refused with nothing written; forced, the verdict and the ledger row say
    invalid (they said default-off); keep / default-off are refused; alone, B is invalid, not a
    measurement."""
    from inproc import cli

    a, b = _copy("captured", tmp_path / "A"), _copy("captured", tmp_path / "B", _flip_rows)
    out = tmp_path / "reports"
    r = cli("report", b, "--compare", a, "--out-dir", out, "--no-plots")
    assert r.rc == 2 and len(r.error_lines()) == 1, r.err
    assert "refusing to compare" in r.err and "4 of 4 row(s) invalid" in r.err
    assert not (out / "BENCHMARK.csv").exists()
    r = cli("report", b, "--compare", a, "--out-dir", out, "--no-plots", "--force", "--verdict", "default-off")
    assert r.rc == 2 and "only reject is allowed" in r.err and not (out / "BENCHMARK.csv").exists()
    r = cli("report", b, "--compare", a, "--out-dir", out, "--no-plots", "--force", "--json")
    assert r.rc == 0, r.err
    doc = json.loads(r.out)
    assert doc["verdict"] == "invalid" and "4 of 4 row(s) invalid" in doc["verdict_rule"]
    assert [row["verdict"] for row in ledger.read_rows(out)] == ["invalid"]
    r = cli("report", b, "--out-dir", out, "--no-plots", "--json")  # no control: not a valid measurement either
    assert r.rc == 0 and json.loads(r.out)["verdict"] == "invalid"
    # the control's numbers do not count: forced, the A/B is invalid though B is green
    r = cli("report", a, "--compare", b, "--out-dir", out, "--no-plots", "--force", "--json")
    doc = json.loads(r.out)
    assert r.rc == 0 and doc["verdict"] == "invalid"
    assert "the A/B reads numbers that do not count" in doc["verdict_rule"]
    assert "default-off" not in (out / "BENCHMARK.md").read_text()


def test_a_snapshot_run_without_its_summary_is_refused(tmp_path):
    """Still open from issue 41: a snapshot run dir without summary.json gave a "measurement-only"
    ledger row (exit 0); it is refused in one line, nothing written (a gate run still gets its report)."""
    from inproc import cli

    run = _copy("captured", tmp_path / "run")
    (run / "summary.json").unlink()
    r = cli("report", run, "--out-dir", tmp_path / "reports")
    said = (f"parity: error: {run}: a snapshot run without its results "
            "(no summary.json; status complete): nothing to report")
    assert r.rc == 2 and r.error_lines() == [said], r.err
    assert not (tmp_path / "reports").exists()


def _canary(edit=None) -> dict:
    """The drift canary of the real starved H200 A/A (tests/data/canary), as the snapshot records it."""
    from parity.stats import canary

    recorded = json.loads((DATA.parent / "canary" / "h200-aa-starved-12-blocks.json").read_text())
    doc = canary.assess(recorded["canary"]["samples"])
    assert doc["flagged"], "the starved run flags blocks"
    if edit:
        edit(doc)
    return doc


@pytest.mark.parametrize("edit, said", [
    (lambda c: c.update(flagged=[4, 7]), "canary.flagged[0] is 4, not an entry {block, engine, ms, off_pct}"),
    (lambda c: [f.pop("ms") for f in c["flagged"]], "canary.flagged[0].ms is absent"),
    (lambda c: c.update(blocks_flagged=[[4]]), "canary.blocks_flagged is [[4]], not a list of block numbers"),
    (lambda c: c.update(median_ms="fast"), "canary.median_ms is 'fast', not a number"),
])  # fmt: skip
def test_a_crafted_canary_is_one_line_and_leaves_nothing(tmp_path, edit, said):
    """N11: integers as canary.flagged, or entries without ms, crashed the report after its plots
    were drawn (a half-written plots folder); now one line, exit 2, nothing in --out-dir."""
    from inproc import cli

    good = _copy("candidate", tmp_path / "good", lambda s: s.update(canary=_canary()))
    r = cli("report", good, "--out-dir", tmp_path / "ok", "--json")
    assert r.rc == 0 and "drift canary: probe" in Path(json.loads(r.out)["report"]).read_text(), r.err
    run = _copy("candidate", tmp_path / "run", lambda s: s.update(canary=_canary(edit)))
    out = tmp_path / "reports"
    r = cli("report", run, "--out-dir", out)
    assert r.rc == 2 and r.error_lines() == [f"parity: error: {run / 'summary.json'}: {said}: cannot report it"], r.err
    assert not out.exists() or list(out.iterdir()) == []


def test_a_report_that_fails_after_its_plots_leaves_no_plots_behind(profile, tmp_path, monkeypatch):
    """The plots are drawn into a hidden staging dir published with the report: a section that
    fails after them (a bug, a full disk) leaves neither the plots folder nor the staging dir."""
    import parity.report.render as render_mod

    def broken(rd):
        raise RuntimeError("a section failed")

    monkeypatch.setattr(render_mod, "canary_section", broken)
    out = tmp_path / "reports"
    with pytest.raises(RuntimeError, match="a section failed"):
        render(profile, out, compare=str(DATA / "control"), plots=True)
    assert sorted(p.name for p in out.iterdir() if not p.name.endswith(".lock")) == []
    monkeypatch.undo()
    res = render(profile, out, compare=str(DATA / "control"), plots=True)
    stem = Path(res["report"]).stem
    assert res["plots"] and all(Path(p).is_file() and Path(p).parent.name == stem for p in res["plots"])
