"""The paired block statistics carried beside the users' rule wherever a verdict is shown:
summary.json / paired.tsv, the headline, the run order's blocks, on the recorded H100 long
sweep (tests/data/h100-long-sweep-parity_summary.tsv: paged vs stock, N=1,8,32, 5 repeats)."""

import csv
from pathlib import Path
from types import SimpleNamespace

import pytest

from parity import stats
from parity.config import profile_from_dict
from parity.metrics.registry import users_columns
from parity.serving import summary
from parity.serving.snapshot import run_order

LONG_SWEEP = Path(__file__).parent.parent / "data" / "h100-long-sweep-parity_summary.tsv"


def _cell(k, v):
    if k == "valid":
        return v == "True"
    for t in (int, float):
        try:
            return t(v)
        except ValueError:
            pass
    return v


def long_sweep_rows() -> list[dict]:
    with open(LONG_SWEEP) as f:
        return [{k: _cell(k, v) for k, v in r.items() if k not in ("kind", "noise", "reference")} for r in csv.DictReader(f, delimiter="\t") if r["kind"] == "row"]


def written_summary(order="abab"):
    rows = long_sweep_rows()
    written = {}
    rd = SimpleNamespace(write_json=lambda n, d: written.__setitem__(n, d), write_text=lambda n, t: written.__setitem__(n, t))
    shape = SimpleNamespace(ptok=128, gen=1024, parallel=32, ctx=65536, prompt="tokens", min_window_s=1.0, invalid_tolerance=0.0, order=order)
    plan = SimpleNamespace(model="m", engines=["paged", "stock"], reference="stock", shape=shape, npl=[1, 8, 32], repeat=5, sized=None, order=run_order(["paged", "stock"], 5, order),
                           stats=profile_from_dict({"name": "t"}).stats)
    return summary.write(plan, rd, rows), written


def test_summary_records_paired_points_beside_the_users_verdicts():
    doc, written = written_summary()
    n8 = {p["metric"]: p for p in doc["paired"] if p["n"] == 8}
    assert set(n8) == set(profile_from_dict({"name": "t"}).stats.metrics)
    d = n8["decode_agg_tps"]
    assert d["outcome"] == "regressed" and d["n_blocks"] == 5 and d["ratio"] == pytest.approx(0.8953, abs=5e-4)
    assert n8["ttft_mean_ms"]["outcome"] == "improved"  # lower is better
    (r8,) = [r for r in doc["ratios"] if r["n"] == 8]
    # the users' rule stays, unchanged, with the paired entry beside it
    assert r8["verdicts"]["decode_agg_tps"]["verdict"] == "within noise"
    assert r8["paired"]["decode_agg_tps"] == {k: d[k] for k in summary.PAIRED_KEYS}
    assert doc["paired_rule"]["threshold_pct"] == 2.0 and "log ratios" in doc["paired_rule"]["method"]


def test_headline_says_both_rules():
    doc, _ = written_summary()
    h = doc["headline"]
    assert h.startswith("paged/stock decode_agg at N=32: 0.9966x [0.8016, 1.2389] inconclusive (5 blocks")
    assert "; users' rule: within noise (|+10.99%| <= " in h


def test_paired_tsv_has_every_block_ratio_and_the_users_files_keep_their_layout():
    doc, written = written_summary()
    lines = written["paired.tsv"].splitlines()
    assert lines[0].split("\t") == summary.PAIRED_COLUMNS
    row = next(dict(zip(summary.PAIRED_COLUMNS, x.split("\t"))) for x in lines[1:] if x.startswith("paged\tstock\t8\tdecode_agg_tps\t"))
    assert [round(float(v), 3) for v in row["block_ratios"].split(",")] == [0.900, 0.846, 0.886, 0.941, 0.906]
    assert row["outcome"] == "regressed" and row["blocks_needed"] == ""
    assert len(doc["paired"]) == 3 * 4 and len(lines) == 1 + len(doc["paired"])  # N=1,8,32 x the four stats.metrics
    assert written["summary.tsv"].splitlines()[0] == "arm\tn\t" + "\t".join(users_columns())
    assert "paired" not in written["summary.tsv"] and "paired" not in written["parity_summary.tsv"]
    with open(LONG_SWEEP) as f:
        assert written["parity_summary.tsv"].splitlines()[0] == f.readline().rstrip("\n")


@pytest.mark.parametrize("order,expect", [("abab", ["paged", "stock"]), ("abba", ["stock", "paged"]), ("aabb", ["paged", "stock"])])
def test_blocks_record_the_order_engines_ran(order, expect):
    doc, _ = written_summary(order)
    assert doc["order_kind"] == order and [b["block"] for b in doc["blocks"]] == [0, 1, 2, 3, 4]
    assert doc["blocks"][0]["order"] == ["paged", "stock"] and doc["blocks"][1]["order"] == expect


def test_abba_rotates_for_any_number_of_engines():
    assert [e for _, e in run_order(["a", "b"], 4, "abba")] == list("abbaabba")
    three = run_order(["a", "b", "c"], 3, "abba")
    assert [e for _, e in three] == list("abcbcacab")
    assert [e for _, e in run_order(["a", "b"], 2, "abab")] == list("abab") and [e for _, e in run_order(["a", "b"], 2, "aabb")] == list("aabb")


def test_a_ratio_row_says_why_with_one_block():
    rows = [r for r in long_sweep_rows() if r["repeat"] == 0]
    rat = summary.ratios(rows, summary.medians(rows), "stock", stats.Rule())
    p = rat[0]["paired"]["decode_agg_tps"]
    assert p["n_blocks"] == 1 and p["low"] is None and "one block" in p["reason"]
    assert rat[0]["verdicts"] == {} and "one block" in summary.headline(rat) and "noise unknown" in summary.headline(rat)


# ----------------------------------------------------------------- the report


def long_sweep_run(tmp_path) -> Path:
    """A run dir holding the long sweep's summary as parity writes it now (manifest, gates,
    hardware and builds of the captured smoke run)."""
    import json
    import shutil

    doc, _ = written_summary()
    run = tmp_path / "run"
    shutil.copytree(Path(__file__).parent.parent / "data" / "report" / "captured", run)
    (run / "summary.json").write_text(json.dumps(doc))
    return run


def test_report_shows_paired_verdicts_beside_the_users_rule_and_says_where_they_disagree(tmp_path):
    from parity.config import load_profile
    from parity.report.render import ReportRequest, render_report

    res = render_report(load_profile("smoke"), ReportRequest(run=str(long_sweep_run(tmp_path)), out_dir=str(tmp_path / "out"), date="2026-11-22", plots=True))
    text = Path(res["report"]).read_text()
    assert "## Paired verdicts (same session, per block)" in text and "Source: recorded in summary.json." in text
    assert "| paged | 8 | decode_agg_tps | 0.8953 | [0.8534, 0.9391] | +-4.90% | 5 | regressed | - | within noise (-11.28% vs 32.90%) |" in text
    assert "| paged | 32 | decode_agg_tps | 0.9966 | [0.8016, 1.2389] | +-24.32% | 5 | inconclusive | 444 |" in text
    assert "The rules disagree on: paged N=8 decode_agg_tps: paired regressed, users' rule within noise" in text
    assert "Blocks (engines in the order they ran): 0: paged stock; 1: paged stock" in text
    # the verdict line says which rule says what
    assert res["verdict"] == "measurement-only" and "paired blocks (stock as B/A reference, same session): regressed -- 3 improved, 3 regressed" in res["verdict_rule"]
    assert "users' rule: within noise" in res["verdict_rule"] and "the two rules disagree on paged N=8 decode_agg_tps" in res["verdict_rule"]
    assert res["paired_overall"] == "regressed" and len(res["paired"]) == 12
    assert "### Paired statistics" in text and "Why t on logs and not a bootstrap" in text
    assert "paired_blocks.png" in {Path(p).name for p in res["plots"]}
    fm = __import__("parity.report.ledger", fromlist=["x"]).front_matter(text)
    assert fm["paired"] == "regressed" and fm["key_ratios"].endswith("@N=32 (within noise; paired inconclusive [0.8016, 1.2389])")


def test_an_old_run_without_paired_still_renders_them_from_its_rows(tmp_path):
    from parity.config import load_profile
    from parity.report.render import ReportRequest, render_report

    run = Path(__file__).parent.parent / "data" / "report" / "control"
    res = render_report(load_profile("smoke"), ReportRequest(run=str(run), out_dir=str(tmp_path), date="2026-11-22", plots=False))
    text = Path(res["report"]).read_text()
    assert "not recorded in summary.json (older run): computed now from its rows" in text
    assert "| paged | 4 | decode_agg_tps |" in text and res["paired_source"].startswith("not recorded")


def test_paired_blocks_plot_draws_the_recorded_points(tmp_path):
    from parity.report import plots

    doc, _ = written_summary()
    out = plots.paired_blocks(doc["paired"], tmp_path / "p.png", 2.0)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plots.paired_blocks([], tmp_path / "none.png") is None


# ----------------------------------------------------------------- compare: two sessions, unpaired


def test_welch_interval_matches_scipy_on_the_long_sweep_arms():
    import math

    from scipy import stats as ss

    from parity.stats.unpaired import welch

    a = {r["repeat"]: r["decode_agg_tps"] for r in long_sweep_rows() if r["engine"] == "stock" and r["n"] == 8}
    b = {r["repeat"]: r["decode_agg_tps"] for r in long_sweep_rows() if r["engine"] == "paged" and r["n"] == 8}
    u = welch(a, b)
    ci = ss.ttest_ind([math.log(v) for v in b.values()], [math.log(v) for v in a.values()], equal_var=False).confidence_interval(0.95)
    assert (u["low"], u["high"]) == (pytest.approx(math.exp(ci.low), rel=1e-5), pytest.approx(math.exp(ci.high), rel=1e-5))
    # the same cells, unpaired, cannot see what the blocks see: N=8 is a paired regression
    assert u["outcome"] == "inconclusive" and "unpaired" in u["reason"] and "unpaired" in u["method"]


def test_compare_keeps_the_users_rule_and_adds_an_unpaired_interval_and_each_sessions_paired_ratio():
    from parity.report.compare import compare_runs
    from parity.report.rundata import load_run
    from parity.report.sections import sessions_table

    data = Path(__file__).parent.parent / "data" / "report"
    doc = compare_runs(load_run(data / "control"), load_run(data / "candidate"), ["decode_agg_tps", "ttft_mean_ms"], stats.Rule())
    row = next(r for r in doc["rows"] if (r["engine"], r["n"], r["metric"]) == ("paged", 4, "decode_agg_tps"))
    assert row["verdict"] == "improved" and row["unpaired"]["outcome"] == "improved" and row["unpaired"]["low"] > 1.02
    assert doc["unpaired_method"].startswith("unpaired (different sessions)")
    s = next(x for x in doc["sessions"] if (x["engine"], x["n"], x["metric"]) == ("paged", 4, "decode_agg_tps"))
    assert s["a"]["n_blocks"] == s["b"]["n_blocks"] == 5 and s["change"]["ratio"] == pytest.approx(s["b"]["ratio"] / s["a"]["ratio"], rel=1e-4)
    assert len(sessions_table(doc)) == len(doc["sessions"]) == 4  # paged x N=1,4 x two metrics (stock is the reference)
    other = compare_runs(load_run(data / "control"), load_run(data / "captured"), ["decode_agg_tps"], stats.Rule())  # 1 repeat: no interval
    assert all(r["unpaired"]["low"] is None and "fewer than 2" in r["unpaired"]["reason"] for r in other["rows"])


def test_report_ab_table_has_the_unpaired_columns(tmp_path):
    from parity.config import load_profile
    from parity.report.render import ReportRequest, render_report

    data = Path(__file__).parent.parent / "data" / "report"
    res = render_report(load_profile("smoke"), ReportRequest(run=str(data / "candidate"), compare=str(data / "control"), out_dir=str(tmp_path), date="2026-11-22", plots=False))
    text = Path(res["report"]).read_text()
    assert "| consistent | verdict | unpaired B/A | unpaired outcome |" in text and "paired statistics do not apply" in text
    assert "| paged | 4 | decode_agg_tps | higher |" in text and "| A: paired ratio (blocks) | B: paired ratio (blocks) | change B/A | change outcome |" in text
    assert "users' rule, A vs B: 4 improved" in res["verdict_rule"] and "within B's session, paired blocks" in res["verdict_rule"]


def test_snapshot_human_output_shows_paired_outcomes_and_intervals_beside_the_users_rule():
    from parity.cli.snapshot import paired_rows, render_summary

    doc, _ = written_summary()
    rows = paired_rows(doc)
    assert ["paged", 8, "decode_agg_tps", "0.8953", "[0.8534, 0.9391]", 5, "regressed", "-", "within noise"] in rows
    seen = []
    out = SimpleNamespace(table=lambda title, cols, rs: seen.append((title, cols, rs)), info=seen.append, warn=seen.append)
    render_summary(out, {**doc, "run_dir": "run"})
    (paired,) = [t for t in seen if isinstance(t, tuple) and t[0].startswith("paired block statistics")]
    assert paired[1][-3:] == ["outcome", "blocks needed", "users' rule"] and paired[2] == rows
    assert any(isinstance(x, str) and x.startswith("paged/stock N=8:") and x.endswith("[users' rule: within noise; paired: regressed]") for x in seen)
