"""The paired bucket table on the three profiles the lead ran on the H100 (tests/data/profile/cupti/
h100-runs, README there): paged vs stock on dense-16g and on the Q8_0 MoE (2 blocks, npl 8), and the
MoE lever paged_nofg vs paged (3 blocks, npl 32).  Recomputed from each run's analysis.json: the
bucket deltas are the ones the device printed, a negative bucket value only ever comes from a bucket
that ran no decode launch in that arm and block, such buckets are marked, the engine's decode time
is read off S_TG (the same time as T_TG, with more digits), and a block whose kernels outlast the
engine's decode time is named."""

from __future__ import annotations

import json
import lzma
from pathlib import Path

import pytest

from parity.profiles.buckets import default_table
from parity.profiles.capture import paired_from_captures
from parity.tracer import pairs

RUNS = Path(__file__).resolve().parents[1] / "data" / "profile" / "cupti" / "h100-runs"
NAMES = ("dense-16g", "moe-big-q8", "lever-moe-npl32")


def _run(name: str) -> dict:
    return json.loads(lzma.decompress((RUNS / f"{name}.analysis.json.xz").read_bytes()))


@pytest.fixture(scope="module", params=NAMES)
def run(request):
    doc = _run(request.param)
    old = doc["paired_buckets"]
    new = paired_from_captures(doc["captures"], doc["difference"], [old["candidate"], old["reference"]], default_table())
    return request.param, doc, old, new


def test_the_bucket_deltas_are_the_ones_the_device_printed(run):
    _, _, old, new = run
    was = {r["bucket"]: r for r in old["rows"] if r["kind"] == "bucket"}
    assert (new["reference"], new["candidate"], new["blocks"]) == (old["reference"], old["candidate"], old["blocks"])
    for r in new["rows"]:
        if r["kind"] == "bucket":
            w = was[r["bucket"]]
            assert (r["a_ms_per_token"], r["b_ms_per_token"], r["delta_ms_per_token"], r["delta_low"], r["delta_high"]) == (
                w["a_ms_per_token"], w["b_ms_per_token"], w["delta_ms_per_token"], w["delta_low"], w["delta_high"])  # fmt: skip


def test_negative_bucket_values_come_only_from_buckets_without_decode_launches(run):
    """Per arm and block, from the recorded difference tables: a bucket below zero ms/token never
    ran more often in the long capture than in the short one (prefill/warmup jitter)."""
    name, doc, _, new = run
    negative = [(d["engine"], d["block"], r["bucket"], r["delta_launches"]) for d in doc["difference"] for r in d["buckets"] if r["us_per_token"] < 0]
    assert negative and all(n == 0 for *_, n in negative), negative
    no_decode = {r["bucket"] for r in new["rows"] if r["kind"] == "bucket" and r["in_decode"] is False}
    launched = {r["bucket"] for d in doc["difference"] for r in d["buckets"] if r["delta_launches"]}
    assert no_decode == {r["bucket"] for d in doc["difference"] for r in d["buckets"]} - launched
    assert all(r["ratio"] is None for r in new["rows"] if r["bucket"] in no_decode)
    marked = [ln.split()[0] for ln in pairs.table_lines(new) if "] o " in ln]
    assert no_decode and sorted(marked) == sorted(no_decode)
    assert any(x.startswith("no decode launches") and all(b in x for b in no_decode) for x in new["noise"])


def test_buckets_no_arm_ran_are_left_out_of_the_table(run):
    _, doc, _, new = run
    ran = {r["bucket"] for d in doc["difference"] for r in d["buckets"]}
    skipped = [r["bucket"] for r in new["rows"] if r["kind"] == "bucket" and not r["ran"]]
    assert skipped and not set(skipped) & ran
    lines = pairs.table_lines(new)
    assert not any(ln.split()[0] in skipped for ln in lines if ln and not ln.startswith("not run"))
    assert any(ln.startswith("not run in either arm: ") and skipped[0] in ln for ln in lines)


def test_the_engine_time_is_read_off_s_tg_which_agrees_with_t_tg(run):
    """llama-batched-bench prints T_TG to 1 ms and S_TG = B x TG / t_tg to 5-6 digits: the TG time
    from S_TG lies within T_TG's rounding for every recorded row."""
    _, doc, _, new = run
    rows = [w for c in doc["captures"] for w in c["workload_rows"]]
    assert rows and all(abs(pairs.tg_seconds(w) - w["t_tg"]) <= 0.0005 + 1e-9 for w in rows)
    assert all(pairs.tg_seconds(w) != w["t_tg"] for w in rows)  # more digits than the 3 of T_TG
    for arm, per in new["per_block"].items():
        for c in per.values():
            assert c["engine decode"] == pytest.approx(c["kernels (sum)"] + c["remainder"], abs=1e-8)


def test_a_block_whose_kernels_outlast_the_engine_is_named():
    """Q8_0 MoE, npl 8, block 1: both arms' short runs spent 17-22 ms more in TG than in block 0
    (T_TG 0.063 / 0.072 s against 0.046 / 0.050 s) while their kernels did not change."""
    doc = _run("moe-big-q8")
    pb = paired_from_captures(doc["captures"], doc["difference"], ["paged", "stock"], default_table())
    named = [ln for ln in pb["noise"] if "exceed the engine's decode time" in ln]
    assert [ln.split(":")[0] for ln in named] == ["stock block 1", "paged block 1"]
    assert pb["per_block"]["stock"]["1"]["remainder"] < 0 and pb["per_block"]["stock"]["0"]["remainder"] > 0
    rem = next(r for r in pb["rows"] if r["bucket"] == "remainder")
    assert rem["ratio"] is None  # a negative block: no B/A over the other block alone
    dense = _run("dense-16g")
    pd = paired_from_captures(dense["captures"], dense["difference"], ["paged", "stock"], default_table())
    assert not [ln for ln in pd["noise"] if "exceed" in ln] and pd["t_quantile"] == pytest.approx(12.706, abs=1e-3)


def test_the_lever_kernels_and_the_remainder_noise():
    """The lever (3 blocks): the kernels' delta is resolved (+0.00221 ms/token, interval above 0) while
    the traced runs' remainder is not, its interval tens of times the kernels'."""
    doc = _run("lever-moe-npl32")
    pb = paired_from_captures(doc["captures"], doc["difference"], ["paged_nofg", "paged"], default_table())
    rows = {r["bucket"]: r for r in pb["rows"]}
    k, rem = rows["kernels (sum)"], rows["remainder"]
    assert k["delta_ms_per_token"] == pytest.approx(0.00221, abs=5e-6) and k["delta_low"] > 0
    assert rem["delta_low"] < 0 < rem["delta_high"]
    assert any("the remainder's interval" in ln and "the kernels'" in ln for ln in pb["noise"])


def test_the_gap_chain_of_the_lever_as_the_device_printed_it(tmp_path):
    """parity gap SNAPSHOT BENCH --kernels PROFILE on the lever's three recorded runs (serving A/B,
    bench A/B, traced profile): the device printed serving 0.9512 = static 0.9089 x overhead 1.0465
    and static +0.01521 ms/token = buckets +0.00221 + remainder +0.01300.  Its paired_buckets.json
    predates the bucket marks, so the table is recomputed from analysis.json; the bench ran TG 128
    and the profile ntg 32 and 8, which the chain says."""
    from parity.efficiency.gap import between_runs, lines

    serving, bench, prof = tmp_path / "snapshot", tmp_path / "bench", tmp_path / "profile-run"
    for d in (serving, bench, prof / "profile"):
        d.mkdir(parents=True)
    (serving / "summary.json").write_bytes(lzma.decompress((RUNS / "lever-serving-summary.json.xz").read_bytes()))
    (bench / "bench.json").write_bytes(lzma.decompress((RUNS / "lever-bench.json.xz").read_bytes()))
    analysis = _run("lever-moe-npl32")
    (prof / "profile" / "analysis.json").write_text(json.dumps(analysis))
    (prof / "profile" / "paired_buckets.json").write_text(json.dumps(analysis["paired_buckets"]))
    doc = between_runs(str(serving), str(bench), str(prof))
    (p,) = doc["points"]
    links = {lk["link"]: lk for lk in p["links"]}
    assert (p["n"], round(links["serving"]["ratio"], 4), round(links["static"]["ratio"], 4), round(links["overhead"]["ratio"], 4)) == (32, 0.9512, 0.9089, 1.0465)
    k = p["kernels"]
    assert k["reads"] == "static +0.01521 ms/token = buckets +0.00221 + remainder +0.01300"
    assert {b["link"] for b in k["buckets"] if b["in_decode"] is False} == {"mmvq", "mmf", "concat_layout", "convert_dtype"}
    text = "\n".join(lines(p))
    assert "decode steps 1-128 after a 128-token prompt" in text and "steps 9-32 after 128" in text
    assert "not run in either arm: gdn_solve" in text and "\n    gdn_solve " not in text


def test_the_arm_without_graphs_is_a_node_mode_trace():
    """The lever's paged_nofg captures: no graph instantiated, none launched, no kernel with a graph
    id (their recorded trace summaries); on the device they were exported without a mode and
    warned that the capture flags might be wrong."""
    from parity.cli.profile import node_check_line
    from parity.tracer.trace import trace_mode

    doc = _run("lever-moe-npl32")
    nofg = [c for c in doc["captures"] if c["engine"] == "paged_nofg"]
    assert len(nofg) == 6 and all(c["trace"]["graph_trace_mode"] is None and "did not use --cuda-graph-trace=node" in c["warning"] for c in nofg)
    for c in nofg:
        t = c["trace"]
        assert trace_mode(t["graph_node_kernels"], t["graph_kernels"], t["graph_launches_seen"], t["processes"][0]["counted"]["graphs"]) == "node"
        assert node_check_line(c["label"], t["node_check"], t["graphs"]).endswith("no CUDA-graph launch (every kernel launched on its own)")
    paged = next(c for c in doc["captures"] if c["engine"] == "paged")["trace"]
    assert trace_mode(paged["graph_node_kernels"], paged["graph_kernels"], paged["graph_launches_seen"], paged["processes"][0]["counted"]["graphs"]) == "node"
    assert trace_mode(0, 0, 31, 1) == "graph"  # the same launches with no node ids: collapsed
