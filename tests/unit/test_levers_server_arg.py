"""`parity ab --server-arg`: a runtime lever on llama-server's arguments, like --env: arm B's server
gets the arguments after the engine's own, the lever is named by the argument string, and bad
input is one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_parity
from parity.errors import UsageError
from parity.levers.arms import derive, identical, make_lever, parse_server_args


def _profile():
    from parity.config import profile_from_dict

    return profile_from_dict({"sources": {"s": {"kind": "path", "path": "/nonexistent"}},
                              "engines": {"stock": {"source": "s", "server_args": ["-t", "2"]}, "v": {"kind": "vllm"}}}, "t")  # fmt: skip


def test_server_arg_lever_is_named_by_its_string_and_appended_to_arm_b():
    lever = make_lever(None, None, None, None, None, server_args=["--cache-ram   0", "--no-cache-idle-slots"])
    assert lever.label() == "--cache-ram 0 --no-cache-idle-slots" and lever.kind == "runtime" and not lever.builds()
    prof, a, b = derive(_profile(), "stock", lever)
    assert prof.engine(a).server_args == ["-t", "2"] and prof.engine(b).server_args == ["-t", "2", "--cache-ram", "0", "--no-cache-idle-slots"]
    assert "server arguments --cache-ram 0 --no-cache-idle-slots on stock's server" in lever.changes(a)
    # the same build and env: only the arguments tell the arms apart
    assert identical(prof, a, b, {a: {"key": "k"}, b: {"key": "k"}}) is None
    assert make_lever(["A=1"], None, None, None, None, server_args=["-fa off"]).label() == "A=1 -fa off"


@pytest.mark.parametrize("items, msg", [
    (["cache-ram 0"], "expected a server option"),
    ([""], "expected a server option"),
    (["--x 'open"], "No closing quotation"),
    (["--cache-ram 0", "--cache-ram  0"], "given twice"),
])  # fmt: skip
def test_server_arg_bad_items(items, msg):
    with pytest.raises(UsageError, match=msg):
        parse_server_args(items)


def test_server_arg_needs_a_llama_engine():
    with pytest.raises(UsageError, match="needs a llama engine"):
        derive(_profile(), "v", make_lever(None, None, None, None, None, server_args=["--x 1"]))


def test_ab_server_arg_without_serving_is_one_line_exit_2(tmp_path):
    r = run_parity("--artifacts", str(tmp_path), "ab", "--profile", "smoke", "--engine", "stock", "--server-arg", "--cache-ram 0", "--dry-run")
    assert r.returncode == 2 and "--server-arg changes llama-server's arguments: measure it with --serving" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not list(tmp_path.glob("*/manifest.json"))


def test_ab_server_arg_dry_run_plans_a_serving_lever_keyed_by_the_argument(tmp_path):
    r = run_parity("--artifacts", str(tmp_path), "ab", "--profile", "smoke", "--engine", "stock", "--server-arg", "--cache-ram 0", "--serving", "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["lever"] == "--cache-ram 0" and d["kind"] == "runtime" and d["measure"]["kind"] == "serving"
    assert d["builds"]["stock"]["key"] == d["builds"]["stock+lever"]["key"]  # one build, two servers
    assert "server arguments --cache-ram 0" in d["changes"] and d["map"]["identity"]["lever"] == "--cache-ram 0"


def test_a_ttft_lever_is_judged_on_ttft_with_metric():
    """The real H200 A/B of --cache-ram 0 (docs/evidence/device-h200-ttft): on the headline decode
    metric it reads FLAT (and the map would close a 3x TTFT lever as FLAT); with --metric
    ttft_mean_ms the same paired rows read GO at 0.3211 [0.3080, 0.3348]."""
    from parity.levers.ab import decide, expected_points, measure_cells

    doc = json.loads((Path(__file__).resolve().parents[1] / "data" / "levers" / "h200-cache-ram-0-serving.json").read_text())
    gate = {"ok": True, "problem": None}
    flat = decide(gate, measure_cells(doc, True, "decode_agg_tps"), "decode_agg_tps", expected_points(doc, True))
    assert flat["verdict"] == "FLAT"
    go = decide(gate, measure_cells(doc, True, "ttft_mean_ms"), "ttft_mean_ms", expected_points(doc, True))
    assert go["verdict"] == "GO" and go["key"]["metric"] == "ttft_mean_ms"
    assert (go["key"]["ratio"], go["key"]["low"], go["key"]["high"]) == (0.321128, 0.30803, 0.334783)


def test_metric_is_one_of_the_paired_headline_metrics_and_needs_serving(tmp_path):
    base = ["--artifacts", str(tmp_path), "ab", "-p", "smoke", "-e", "stock", "--dry-run"]
    ok = run_parity(*base, "--server-arg", "--cache-ram 0", "--serving", "--metric", "ttft_mean_ms")
    assert ok.returncode == 0 and "measure: serving on tiny-hf, ttft_mean_ms B/A" in ok.stdout + ok.stderr, ok.stderr
    for extra, said in ((["--server-arg", "--cache-ram 0", "--serving", "--metric", "ttft_p99"], "--metric ttft_p99: not a paired headline metric"),
                        (["--env", "PARITY_DEMO_BANNER=1", "--metric", "ttft_mean_ms"], "--metric names the serving verdict's metric")):
        r = run_parity(*base, *extra)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and said in lines[0], r.stderr
