"""The report's workload section and plots, from summary data shaped like a workload run's
(each kind), rendered through the real template."""

from __future__ import annotations

from pathlib import Path

import pytest

from parity.report.render import _env
from parity.report.rundata import RunData
from parity.report.workload_sections import workload_section
from parity.results.model import PointRow
from parity.workloads import WORKLOADS, open_loop, prefill_under_decode, shared_prefix


def med(engine, n, point, **kw):
    return {"engine": engine, "n": n, "point": point, "repeats": 1, "invalid_repeats": 0, **kw}


SUMMARIES = {
    "open-loop": {
        "workload": {"name": "ol", "kind": "open-loop", "rates": [1.0, 8.0, 64.0], "requests_per_rate": 16, "slo": {"ttft_ms": 300}, "gen": 16, "ptok": 32},
        "medians": [med(e, r, f"{r:g} req/s", ttft_p50_ms=5.0 * r, ttft_p99_ms=9.0 * r, e2e_p99_ms=20.0 * r, goodput_rps=min(r, 10.0), held=r < 64, scheduled_rate=r, achieved_rate=r)
                    for e in ("paged", "stock") for r in (1.0, 8.0, 64.0)],  # fmt: skip
        "rows": [{"engine": "stock", "n": 128.0, "valid": False, "ttft_p50_ms": 900.0, "goodput_rps": 3.0, "invalid_reasons": ["the load generator fell behind"]}],
        "ratios": [{"engine": "paged", "reference": "stock", "n": 1.0, "point": "1 req/s", "goodput_rps": 1.0, "ttft_p99_ms": 0.9, "e2e_p99_ms": 0.8, "verdicts": {}, "noise": "noise unknown: 1 valid repeat"}],
        "not_held": ["stock r0 64 req/s: not held: the wait for a first token grew 5400 ms per second of the schedule: the server took 10 req/s of the scheduled 64"],
        "invalid_points": ["stock r0 128 req/s: the load generator fell behind"],
    },
    "prefill-under-decode": {
        "workload": {"name": "pud", "kind": "prefill-under-decode", "decode_streams": 3, "long_prompts": 2, "long_ptok": 512},
        "medians": [med("stock", 3, "3 streams + 2 x 512-token prompts", stall_max_ms=900.0, stall_p99_ms=880.0, decode_gap_p50_ms=10.0, stall_ratio=90.0)],
        "rows": [{"engine": "stock", "n": 3, "repeat": 0, "valid": True, "stall_gaps_ms": [12.0, 40.0, 880.0, 900.0], "decode_gap_p50_ms": 10.0,
                  "long": [{"index": 0, "ttft_ms": 1000.0, "streams_running": 3, "stall_max_ms": 900.0, "stall_p99_ms": 899.0}]}],  # fmt: skip
        "coarse_streams": ["vllm r0 3 streams: the decode streams arrived 7.5 tokens per chunk"],
    },
    "shared-prefix": {
        "workload": {"name": "sp", "kind": "shared-prefix", "groups": 2, "group_size": 3, "prefix_tokens": 256, "suffix_tokens": 16},
        "medians": [med("stock", 6, "2x3", prefix_hit_rate=0.47, prefix_share=0.94, ttft_mean_ms=1400.0), med("real", 6, "2x3", prefix_hits_derived=769.0, prompt_tok_total=1632, prefix_share=0.94)],
        "rows": [],
    },
    "multi-turn": {
        "workload": {"name": "mt", "kind": "multi-turn", "conversations": 2, "turns": 3},
        "medians": [med("stock", k, f"turn {k}", ttft_mean_ms=10.0 * k, prompt_tokens_mean=40.0 * k) for k in (1, 2, 3)],
        "rows": [],
    },
}
for _kind, _summary in SUMMARIES.items():
    _summary["shown"] = list(WORKLOADS[_kind].shown)  # as workload_summary.write records it

FILES = {"open-loop": ["workload_rate_latency.png", "workload_goodput.png"], "prefill-under-decode": ["workload_stalls.png"],
         "shared-prefix": ["workload_prefix_hits.png"], "multi-turn": ["workload_ttft_by_turn.png"]}  # fmt: skip


@pytest.mark.parametrize("kind", sorted(SUMMARIES))
def test_each_kind_gets_its_tables_plots_and_definitions(kind, tmp_path):
    rd = RunData(Path("/run"), {}, summary=SUMMARIES[kind])
    w = workload_section(rd, tmp_path / "assets", "assets")
    assert w["kind"] == kind and w["rows"] and w["definitions"]
    assert [p["file"] for p in w["plots"]] == [f"assets/{f}" for f in FILES[kind]]
    for p in w["plots"]:
        assert (tmp_path / "assets" / p["file"].split("/")[-1]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = _env().get_template("_workloads.md.j2").render(workload=w)
    assert text.startswith(f"## Workload: {w['name']} ({kind})")
    assert "\n\n| parameter | value |\n|---|---|\n" in text  # a blank line before every table
    assert all(f"![{p['title']}]({p['file']})" in text for p in w["plots"])
    assert "| metric | unit | better | formula |" in text and w["definitions"][0][0] in text


def test_open_loop_section_says_which_rates_were_not_held_or_invalid(tmp_path):
    w = workload_section(RunData(Path("/run"), {}, summary=SUMMARIES["open-loop"]), tmp_path, "")
    held = {(r[0], r[1]): r[3] for r in w["rows"]}
    assert held[("stock", "64 req/s")] == "NOT HELD" and held[("stock", "1 req/s")] == "held"
    assert w["notes"] == ["NOT HELD: stock r0 64 req/s: not held: the wait for a first token grew 5400 ms per second of the schedule: the server took 10 req/s of the scheduled 64", "INVALID: stock r0 128 req/s: the load generator fell behind"]


def test_prefill_under_decode_lists_each_long_prompt(tmp_path):
    w = workload_section(RunData(Path("/run"), {}, summary=SUMMARIES["prefill-under-decode"]), None, plots=False)
    (table,) = w["tables"]
    assert table["title"] == "Each long prompt's admission" and table["rows"] == [["stock", 0, 0, "1000.0", 3, "900.00", "899.00", ""]] and w["plots"] == []
    assert w["notes"] == ["COARSE STREAM: vllm r0 3 streams: the decode streams arrived 7.5 tokens per chunk"]
    text = _env().get_template("_workloads.md.j2").render(workload=w)
    assert "- COARSE STREAM: vllm r0" in text and "\n\n### Each long prompt's admission\n\n| engine | repeat | long prompt | TTFT ms |" in text


def test_no_section_for_a_plain_sweep_and_no_plot_without_data(tmp_path):
    assert workload_section(RunData(Path("/run"), {}, summary={"medians": []}), tmp_path) is None
    assert workload_section(RunData(Path("/run"), {}, summary=None), tmp_path) is None
    assert open_loop.rate_latency([], tmp_path / "x.png") is None
    assert prefill_under_decode.stall_distribution([PointRow("a", 1, info={"stall_gaps_ms": []})], tmp_path / "y.png") is None
    assert shared_prefix.prefix_hits([{"engine": "a"}], tmp_path / "z.png") is None
    assert not list(tmp_path.glob("*.png"))


def test_a_calibrated_run_says_what_its_trial_chose_from_a_real_summary():
    import json
    real = json.loads((Path(__file__).parent.parent / "data" / "workloads" / "smoke-pud-calibrated-summary.json").read_text())
    w = workload_section(RunData(Path("/run"), {}, summary=real), plots=False)
    assert w["notes"][0].startswith("CALIBRATED: decode_gen 384 -> 919 so every window lasts min_window_s 0.5 s at 2.0 x its trial pace")
    assert "1 trial block not counted" in w["notes"][0] and ["decode_gen", "919"] in w["params"]
    assert not any(n.startswith("CAPPED") for n in w["notes"])
    kept = {**real["calibration"], "gen": 384, "kept_trial": True, "trial_arms": []}
    assert workload_section(RunData(Path("/run"), {}, summary={**real, "calibration": kept}), plots=False)["notes"][0].startswith("calibration: decode_gen 384 kept")
    sweep = {**real, "calibration": {k: v for k, v in real["calibration"].items() if k != "knob"}}  # a run from before the field was recorded
    assert not any("alibrat" in n for n in workload_section(RunData(Path("/run"), {}, summary=sweep), plots=False)["notes"])
