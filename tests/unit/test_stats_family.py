"""Family-wise control (parity.stats.family): Holm's step-down, each cell's p from the test its
interval inverts, and the verdicts that read several cells (a lever's points, compare's rows)
held to their family, on recorded H100 cells."""

from __future__ import annotations

import json
import math

import pytest

from parity.stats import family, paired
from tests.conftest import DATA, REPO

LEVERS = sorted((REPO / "docs" / "evidence" / "device-h100-levers" / "runs").glob("2026*/summary.json"))  # real H100 lever A/Bs


def test_holm_on_the_textbook_example():
    # Holm (1979) as in most texts: p = .01 .04 .03 .005 at alpha .05 -> H1 and H4 rejected
    marks = family.holm([0.01, 0.04, 0.03, 0.005], 0.05)
    assert [m["rejected"] for m in marks] == [True, False, False, True]
    assert [round(m["level"], 5) for m in marks] == [0.01667, 0.05, 0.025, 0.0125]
    assert family.holm([None, 0.001], 0.05)[0]["rejected"] is False  # no p: never claimed, still counted in m
    assert family.holm([None, 0.001], 0.05)[1]["level"] == 0.025


def test_a_cells_p_is_the_t_test_its_interval_inverts():
    from scipy import stats

    for cell in (c for f in LEVERS for c in json.loads(f.read_text())["measurement"]["points"]):
        logs = [math.log(r) for r in cell["ratios"]]
        assert family.paired_cell_p(cell) == pytest.approx(stats.ttest_1samp(logs, 0.0).pvalue, rel=1e-9)
        assert (family.paired_cell_p(cell) < 0.05) == (cell["low"] > 1 or cell["high"] < 1)
        low, high = family.interval_at(cell, 0.05)  # at alpha itself: the cell's own interval
        assert (round(low, 6), round(high, 6)) == (pytest.approx(cell["low"], abs=2e-6), pytest.approx(cell["high"], abs=2e-6))


@pytest.mark.parametrize("summary", LEVERS, ids=lambda f: f.parent.name)
def test_the_recorded_lever_verdicts_hold_in_their_family(summary):
    from parity.levers.ab import decide

    lever = json.loads(summary.read_text())
    cells = family.adjust([{**c, "sd_log": None} for c in lever["measurement"]["points"]], 0.05)
    assert {c["family"]["m"] for c in cells} == {len(cells)} == {3}
    assert decide({"ok": True}, cells, "s_tg")["verdict"] == lever["verdict"]  # NO-GO at B=32 (p ~1e-4 and 0.004) stands
    line = family.family_line(cells, "s_tg at every point")
    assert line.startswith("family: 3 cells (s_tg at every point); Holm at alpha 0.05, levels in p order 0.01667, 0.025, 0.05")


def test_holm_takes_a_weak_claim_away_and_the_verdict_with_it():
    """Three points, one of them 'regressed' at p = 0.03: alone a NO-GO, in a family of three it
    needs p <= 0.05 / 3 and becomes inconclusive (the lever map would otherwise close the lever)."""
    from parity.levers.ab import decide

    weak = paired.paired({i: 1.0 for i in range(6)}, {i: r for i, r in enumerate([0.955, 0.99, 0.93, 0.985, 0.99, 0.94])}, "higher").to_dict()
    assert weak["outcome"] == paired.REGRESSED and 0.0167 < family.paired_cell_p(weak) < 0.05
    flat = paired.paired({i: 1.0 for i in range(6)}, {i: r for i, r in enumerate([1.0, 0.998, 1.003, 1.001, 0.999, 1.0])}, "higher").to_dict()
    cells = [{**c, "point": f"B={b}"} for c, b in ((flat, 1), (flat, 8), (weak, 32))]
    assert decide({"ok": True}, cells, "s_tg")["verdict"] == "NO-GO"
    adjusted = family.adjust(cells, 0.05)
    assert adjusted[2]["outcome"] == paired.INCONCLUSIVE and adjusted[2]["family"]["unadjusted"] == paired.REGRESSED
    assert adjusted[0]["outcome"] == paired.EQUIVALENT  # equivalence is untouched (every cell must be)
    assert decide({"ok": True}, adjusted, "s_tg")["verdict"] == "INCONCLUSIVE"
    assert "1 per-cell claim(s) did not survive the family" in family.family_line(adjusted, "s_tg")


def test_compare_holds_its_unpaired_rows_to_the_family():
    from parity import stats
    from parity.report.compare import compare_runs
    from parity.report.rundata import load_run

    doc = compare_runs(load_run(DATA / "report" / "control"), load_run(DATA / "report" / "candidate"), ["decode_agg_tps", "agg_tps"], stats.Rule())
    fams = [r["unpaired"]["family"] for r in doc["rows"]]
    assert {f["m"] for f in fams} == {len(doc["rows"])} and sorted(f["rank"] for f in fams) == list(range(len(fams)))
    for r in doc["rows"]:
        u = r["unpaired"]
        if u["family"]["unadjusted"] in (paired.IMPROVED, paired.REGRESSED):
            assert u["outcome"] == (u["family"]["unadjusted"] if u["p"] <= u["family"]["level"] or u["family"]["rejected"] else paired.INCONCLUSIVE)
    assert doc["family"]["unpaired"].startswith(f"family: {len(doc['rows'])} cells")
