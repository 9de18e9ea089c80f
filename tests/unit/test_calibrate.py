"""Calibrated windows: the gen at which every point's windows reach min_window_s x margin."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from parity.config import load_profile
from parity.errors import ConfigError
from parity.metrics.serving import RequestRecord, decode_window_reads
from parity.stats.calibrate import burst, choose, needed_gen, outran, outran_line

CAPTURE = Path(__file__).resolve().parents[1] / "data" / "calibration" / "outran-summary.json"  # a real run (README there)


def test_needed_gen_scales_the_token_pace_of_each_window():
    # decode window: 255 gaps in 0.45 s at gen 256 -> 1 + ceil(0.75 / (0.45 / 255)) = 1 + 425
    assert needed_gen(256, 0.45, 0.75) == 426
    # wall window: 256 tokens in 0.6 s -> ceil(0.75 / (0.6 / 256)) = 320
    assert needed_gen(256, 0.6, 0.75, "wall_s") == 320
    assert needed_gen(256, None, 0.75) is None and needed_gen(256, 0.0, 0.75) is None and needed_gen(1, 0.2, 0.75) is None
    assert needed_gen(64, 2.0, 1.0) < 64  # already long enough: the need is below what ran


def row(engine, n, dec, wall, rep=0):
    return {"engine": engine, "n": n, "repeat": rep, "decode_window_s": dec, "wall_s": wall}


def test_windows_long_enough_keep_the_trial_block_and_its_gen():
    cal = choose([row("p", 4, 1.2, 1.4), row("s", 4, 1.0, 1.1)], gen=256, min_window_s=0.5, margin=1.5, caps={"p": (448, "x"), "s": (448, "y")}, max_gen=4096)
    assert cal.gen == 256 and cal.kept_trial and not cal.capped and cal.warning() is None
    assert cal.shortest == "s N=4" and len(cal.points) == 2 and "block 0 counts" in cal.line()


def test_a_short_window_raises_gen_for_every_engine_to_the_slowest_need():
    rows = [row("p", 1, 0.45, 0.5), row("p", 2, 0.60, 0.65), row("s", 1, 0.30, 0.35), row("s", 2, 0.5, 0.55)]
    cal = choose(rows, gen=256, min_window_s=0.5, margin=1.5, caps={"p": (960, "a"), "s": (960, "b")}, max_gen=4096)
    assert cal.need == needed_gen(256, 0.30, 0.75) == cal.gen and cal.shortest == "s N=1"
    assert not cal.kept_trial and not cal.capped and "256 -> " in cal.line()
    assert [p["need"] for p in cal.points][2] == cal.need


def test_the_cap_stops_gen_and_says_so_in_one_line():
    cal = choose([row("p", 1, 0.45, 0.5), row("v", 1, 0.3, 0.4)], gen=256, min_window_s=0.5, margin=2.0, caps={"p": (448, "engine p's 512-token slot"), "v": (960, "v")}, max_gen=4096)
    assert cal.gen == 448 and cal.capped and not cal.kept_trial and cal.cap_by == "engine p's 512-token slot"
    w = cal.warning()
    assert "\n" not in w and "v N=1 needs gen" in w and "capped at 448" in w
    # max_gen caps too, and never lowers the gen that ran
    cal = choose([row("p", 1, 0.1, 0.12)], gen=256, min_window_s=0.5, margin=2.0, caps={}, max_gen=300)
    assert cal.gen == 300 and cal.capped and "max_gen" in cal.cap_by
    cal = choose([row("p", 1, 0.1, 0.12)], gen=256, min_window_s=0.5, margin=2.0, caps={"p": (200, "tight")}, max_gen=4096)
    assert cal.gen == 256 and cal.kept_trial and cal.capped


def test_no_window_no_change():
    cal = choose([row("p", 1, None, None)], gen=64, min_window_s=0.5, margin=1.5)
    assert cal.gen == 64 and cal.kept_trial and cal.need is None


def test_a_decode_window_read_in_one_burst_is_not_a_pace():
    """Seen under load (2026-11-25): paged N=2 at an 8-token trial, every chunk read at once,
    a decode window of 0.2 ms in a 99 ms request; taken as a pace it asked for gen 35001."""
    t0 = 10.0
    a = RequestRecord(send=t0, first=t0 + 0.0988, token_times=[t0 + 0.0988] * 8, tokens=8)
    b = RequestRecord(send=t0, first=t0 + 0.0988, token_times=[t0 + 0.0988] * 7 + [t0 + 0.099], tokens=8)
    assert decode_window_reads([a, b]) == 1
    starved = {**row("p", 2, 0.0002, 0.099), "decode_window_reads": 1}
    cal = choose([starved], gen=8, min_window_s=0.5, margin=1.5, caps={"p": (992, "slot")}, max_gen=4096)
    assert cal.need == needed_gen(8, 0.099, 0.75, "wall_s") == 61 and cal.gen == 61 and not cal.capped
    assert cal.points[0]["decode_window_reads"] == 1 and cal.bursts == ["p N=2 (1 read)"]
    note = cal.burst_note()
    assert "\n" not in note and "p N=2 (1 read)" in note and "7 token gaps" in note and "wall window decided" in note
    # the same row without the count: the burst is taken as a pace and only the cap stops it
    blind = choose([row("p", 2, 0.0002, 0.099)], gen=8, min_window_s=0.5, margin=1.5, caps={"p": (992, "slot")}, max_gen=4096)
    assert blind.need > 20000 and blind.capped and blind.gen == 992 and blind.burst_note() is None


def test_a_streamed_decode_window_stays_a_pace():
    # one read per token of each of two streams: 2 x 7 reads after the last first token
    t0 = 10.0
    recs = [RequestRecord(send=t0, first=t0 + 0.1 + d, token_times=[t0 + 0.1 + d + 0.003 * i for i in range(8)], tokens=8) for d in (0.0, 0.001)]
    assert decode_window_reads(recs) == 14
    cal = choose([{**row("p", 2, 0.022, 0.122), "decode_window_reads": 14}], gen=8, min_window_s=0.5, margin=1.5)
    assert cal.need == needed_gen(8, 0.022, 0.75) and cal.bursts == [] and cal.burst_note() is None
    # the boundary: half the token gaps (and at least 2 reads)
    assert burst(8, 3) and not burst(8, 4) and burst(256, 127) and not burst(256, 128) and burst(3, 1) and not burst(3, 2)
    assert not burst(8, None) and not burst(1, 0)


def write(tmp_path, text):
    p = tmp_path / "p.yaml"
    p.write_text(textwrap.dedent(text))
    return str(p)


def test_profile_keys_have_defaults():
    prof = load_profile("gb10-qwen36")
    assert prof.stats.until_ci_pct is None and prof.stats.max_repeats == 20 and prof.stats.budget_s == 7200.0
    assert prof.serving.calibrate.enabled is True and prof.serving.calibrate.margin == 1.5 and prof.serving.calibrate.max_gen == 4096
    assert load_profile("smoke").serving.calibrate.margin == 2.0  # the 2-core VM's pace changes up to 1.74x between blocks


@pytest.mark.parametrize(
    "yaml,key,message",
    [
        ("stats: {until_ci_pct: 0}", "stats.until_ci_pct", "must be a positive percentage"),
        ("stats: {until_ci_pct: -1.5}", "stats.until_ci_pct", "must be a positive percentage"),
        ("stats: {max_repeats: 1}", "stats.max_repeats", "must be an integer >= 2"),
        ("stats: {budget_s: 0}", "stats.budget_s", "must be a finite number of seconds > 0"),
        ("serving: {calibrate: {margin: 0.5}}", "serving.calibrate.margin", "must be >= 1"),
        ("serving: {calibrate: {max_gen: 0}}", "serving.calibrate.max_gen", "must be a positive number of tokens"),
        ("serving: {calibrate: {enable: true}}", "serving.calibrate.enable", "unknown key"),
    ],
)
def test_bad_keys_are_one_line_config_errors(tmp_path, yaml, key, message):
    with pytest.raises(ConfigError) as e:
        load_profile(write(tmp_path, f"extends: smoke\n{yaml}\n"))
    assert key in str(e.value) and message in str(e.value) and "\n" not in str(e.value)


def test_good_keys_load(tmp_path):
    prof = load_profile(write(tmp_path, "extends: smoke\nstats: {until_ci_pct: 1.5, max_repeats: 8, budget_s: 900}\nserving: {calibrate: {enabled: false, margin: 2, max_gen: 1024}}\n"))
    assert (prof.stats.until_ci_pct, prof.stats.max_repeats, prof.stats.budget_s) == (1.5, 8, 900)
    assert (prof.serving.calibrate.enabled, prof.serving.calibrate.margin, prof.serving.calibrate.max_gen) == (False, 2, 1024)


def _capture():
    s = json.loads(CAPTURE.read_text())
    cal = s["calibration"]
    return s, cal, [r for a in cal["trial_arms"] for r in a["rows"]]


def test_outran_names_every_short_calibrated_window_and_how_much_faster_than_the_trial_it_ran():
    s, cal, trial = _capture()
    assert (cal["trial_gen"], cal["gen"], cal["margin"]) == (16, 179, 1.0)
    items = outran(cal, trial, s["rows"], 0.5)
    short = {(r["engine"], r["repeat"], r["n"], w) for r in s["rows"] for w in ("decode_window_s", "wall_s") if r[w] < 0.5}
    assert {(o["engine"], o["repeat"], o["n"], o["window"]) for o in items} == short and len(short) == 11
    # stock r1 N=1: the trial's decode window over 15 token gaps, the measured one over 178
    t = next(p for p in cal["points"] if (p["engine"], p["n"]) == ("stock", 1))
    o = next(o for o in items if (o["engine"], o["repeat"], o["n"], o["window"]) == ("stock", 1, 1, "decode_window_s"))
    assert o["window_s"] == 0.3629 and o["pace_ms"] == round(0.3629 / 178 * 1000, 4) == 2.0388
    assert o["trial_pace_ms"] == round(t["decode_window_s"] / 15 * 1000, 4) and o["faster"] == round(t["decode_window_s"] / 15 / (0.3629 / 178), 3)
    w = next(o for o in items if (o["engine"], o["repeat"], o["n"], o["window"]) == ("stock", 1, 1, "wall_s"))
    assert w["pace_ms"] == round(0.3875 / 179 * 1000, 4) and w["trial_pace_ms"] == round(t["wall_s"] / 16 * 1000, 4)  # wall: gen tokens
    assert all(o["faster"] > 1 for o in items)  # margin 1: a short window means a faster pace than the trial's
    line = outran_line(items, cal["margin"], 0.5)
    assert "\n" not in line and line.startswith("calibration: 11 calibrated window(s) fell under min_window_s 0.5 s: ")
    assert "stock r1 N=1 decode_window_s: 1.596x the trial's pace (" in line and "raise the margin" in line and "defect" not in line
    assert "calibration defect" in outran_line(items, 2.0, 0.5)  # the same windows within a margin of 2: the trial failed to predict them
    assert outran(cal, trial, [r for r in s["rows"] if r["valid"]], 0.5) == [] and outran_line([], 1.0, 0.5) is None


def test_outran_leaves_out_windows_no_rule_timed_and_has_no_pace_for_a_burst_trial():
    s, cal, trial = _capture()
    row = next(r for r in s["rows"] if (r["engine"], r["repeat"], r["n"]) == ("paged", 1, 1))
    assert [o["window"] for o in outran(cal, trial, [row], 0.5, windows=("wall_s",))] == ["wall_s"]  # as open-loop's rule: wall only
    burst_trial = [{**r, "decode_window_reads": 1} if (r["engine"], r["n"]) == ("paged", 1) else r for r in trial]
    o = outran(cal, burst_trial, [row], 0.5)[0]
    assert o["window"] == "decode_window_s" and o["trial_pace_ms"] is None and o["faster"] is None
    assert "(no pace to compare: the trial's window came in a burst" in outran_line([o], 1.0, 0.5)


def test_the_report_says_which_calibrated_windows_fell_short_and_why():
    from parity.report.rundata import RunData
    from parity.report.sections import validity_section

    s, cal, trial = _capture()
    assert validity_section(RunData(path=CAPTURE.parent, manifest={}, summary=s))["outran"] is None
    s["calibration"]["outran"] = outran(cal, trial, s["rows"], 0.5)
    sec = validity_section(RunData(path=CAPTURE.parent, manifest={}, summary=s))
    assert sec["outran"] == outran_line(s["calibration"]["outran"], 1.0, 0.5) and len(sec["invalid"]) == 7
