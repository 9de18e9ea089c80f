"""Difference method, launch normalization, comparison and outputs on small synthetic exports."""

from __future__ import annotations

import json

import pytest

from parity.config import BucketRule
from parity.errors import UsageError
from parity.profiles.analysis import analyze_file, auto_differences, build_doc, compare, difference, write_outputs
from parity.profiles.buckets import BucketTable
from parity.profiles.synthetic import Kernel, write_export

GDN = "void gated_delta_net_cuda<128, false, true>(float const*)"
MMQ = "void mul_mat_q<(ggml_type)40, 128, false, (ggml_prec)0>(char const*)"
TABLE = BucketTable([BucketRule("gdn_core", "gated_delta_net"), BucketRule("mmq_nvfp4", r"mul_mat_q<\(ggml_type\)40")], "test")


def capture(path, ntg, *, prefill=True, gdn_ns=2_000, mmq_ns=1_000, layers=3, node=True):
    """Prefill (outside graphs): one 50 us GDN + one 80 us MMQ.  Decode: ntg steps,
    each a graph of `layers` x (GDN gdn_ns + MMQ mmq_ns)."""
    ks, t = [], 0
    if prefill:
        ks += [Kernel(GDN, 0, 50_000), Kernel(MMQ, 60_000, 140_000)]
        t = 200_000
    for step in range(ntg):
        for layer in range(layers):
            ks.append(Kernel(GDN, t, t + gdn_ns, 2 * layer + 1 if node else None, 1 if node else None))
            t += gdn_ns + 100
            ks.append(Kernel(MMQ, t, t + mmq_ns, 2 * layer + 2 if node else None, 1 if node else None))
            t += mmq_ns + 100
    return str(write_export(path, ks))


def test_difference_method_hand_computed(tmp_path):
    long = analyze_file(capture(tmp_path / "l.sqlite", 64), TABLE, label="long", engine="paged", ntg=64, npl=4)
    short = analyze_file(capture(tmp_path / "s.sqlite", 16), TABLE, label="short", engine="paged", ntg=16, npl=4)
    # long: prefill 50+80 us, decode 64*3*(2+1) us = 576 us -> 0.706 ms
    assert long["total_ms"] == pytest.approx(0.706) and long["kernels"] == 2 + 64 * 6
    assert long["graph_node_kernels"] == 64 * 6
    d = difference(long, short)
    assert d["steps"] == 48 and d["npl"] == 4
    t = d["total"]
    # delta = 48 steps * 3 layers * 3 us = 432 us; per step 9 us; per token 9/4 us
    assert t["delta_ms"] == pytest.approx(0.432) and t["delta_launches"] == 48 * 6
    assert t["ms_per_step"] == pytest.approx(0.009) and t["us_per_token"] == pytest.approx(2.25)
    assert t["launches_per_step"] == pytest.approx(6.0) and t["ms_per_launch_delta"] == pytest.approx(0.0015)
    g = {r["bucket"]: r for r in d["buckets"]}["gdn_core"]
    # gdn: 48*3 launches of 2 us: 0.288 ms, 6 us/step, 1.5 us/token, 2 us/launch
    assert (g["delta_ms"], g["delta_launches"]) == (pytest.approx(0.288), 144)
    assert g["us_per_token"] == pytest.approx(1.5) and g["ms_per_launch_delta"] == pytest.approx(0.002)
    assert "ntg_long - ntg_short" in d["formula"]


def test_launch_normalization_is_stable_when_launch_counts_drift(tmp_path):
    # Phase141: same per-launch cost, different launch counts -> raw ms differs, ms/launch does not
    a = analyze_file(capture(tmp_path / "a.sqlite", 20, prefill=False), TABLE, label="a")
    b = analyze_file(capture(tmp_path / "b.sqlite", 21, prefill=False), TABLE, label="b")
    ga = {r["bucket"]: r for r in a["buckets"]}["gdn_core"]
    gb = {r["bucket"]: r for r in b["buckets"]}["gdn_core"]
    assert ga["total_ms"] != gb["total_ms"]
    assert ga["ms_per_launch"] == gb["ms_per_launch"] == pytest.approx(0.002)


def test_difference_needs_two_ntgs_and_npl(tmp_path):
    c = analyze_file(capture(tmp_path / "c.sqlite", 4), TABLE, label="c", ntg=4, npl=2)
    with pytest.raises(UsageError, match="ntg_long > ntg_short"):
        difference(c, c)
    no_ntg = analyze_file(capture(tmp_path / "d.sqlite", 4), TABLE, label="d")
    with pytest.raises(UsageError, match="ntg"):
        difference(c, no_ntg)


def test_compare_two_engines(tmp_path):
    a = analyze_file(capture(tmp_path / "p.sqlite", 8, prefill=False), TABLE, label="paged", engine="paged")
    b = analyze_file(capture(tmp_path / "v.sqlite", 8, prefill=False, gdn_ns=1_000, mmq_ns=3_000), TABLE, label="vllm", engine="vllm")
    c = {r["bucket"]: r for r in compare(a, b)["buckets"]}
    assert c["gdn_core"]["ratio"] == pytest.approx(0.5) and c["mmq_nvfp4"]["ratio"] == pytest.approx(3.0)
    assert c["gdn_core"]["a_ms_per_launch"] == pytest.approx(0.002) and c["gdn_core"]["b_ms_per_launch"] == pytest.approx(0.001)


def test_collapsed_capture_is_marked_and_attribution_loses_decode(tmp_path):
    node = analyze_file(capture(tmp_path / "n.sqlite", 8), TABLE, label="node", ntg=8, npl=1)
    coll = analyze_file(capture(tmp_path / "c.sqlite", 8, node=False), TABLE, label="coll", ntg=8, npl=1, collapsed=True)
    assert coll["collapsed"] and not node["collapsed"] and coll["graph_node_kernels"] == 0
    doc = build_doc([node, coll])
    assert doc["collapsed"] is True and "COLLAPSED" in doc["note"]
    # a non-collapsed capture with no graph-node kernels gets a warning
    plain = analyze_file(capture(tmp_path / "p.sqlite", 8, node=False), TABLE, label="p")
    assert "graphNodeId" in plain["warning"]


def test_outputs_json_and_tsv(tmp_path):
    caps = [analyze_file(capture(tmp_path / f"x{n}.sqlite", n), TABLE, label=f"x{n}", engine="paged", ntg=n, npl=2) for n in (8, 4)]
    diffs = auto_differences(caps)
    assert len(diffs) == 1 and diffs[0]["ntg_long"] == 8
    doc = build_doc(caps, diff=diffs, bucket_table="test")
    files = write_outputs(tmp_path / "profile", doc)
    data = json.loads((tmp_path / "profile" / "analysis.json").read_text())
    cap = data["captures"][0]
    assert {"label", "engine", "ntg", "buckets", "unmatched_top"} <= set(cap)
    assert set(cap["buckets"][0]) >= {"bucket", "total_ms", "share", "instances", "ms_per_launch"}
    assert data["difference"][0]["total"]["us_per_token"] == pytest.approx(4 * 3 * 3 / (4 * 2))
    lines = (tmp_path / "profile" / "buckets.tsv").read_text().splitlines()
    assert lines[0].split("\t") == ["label", "engine", "ntg", "collapsed", "bucket", "total_ms", "share", "instances", "ms_per_launch"]
    assert len(lines) == 1 + 2 * 2
    dl = (tmp_path / "profile" / "difference.tsv").read_text().splitlines()
    assert dl[1].split("\t")[7] == "total" and "us_per_token" in dl[0]
    assert set(files) == {"analysis", "buckets", "difference"}


def test_graph_mode_export_is_collapsed_whatever_was_asked(tmp_path):
    """Graph mode: decode launches sit in CUPTI_ACTIVITY_KIND_GRAPH_TRACE, the kernel table holds
    only prefill; the capture is collapsed even when the caller thought it traced nodes."""
    ks = [Kernel(GDN, 0, 50_000), Kernel(MMQ, 60_000, 140_000)]
    launches = [(200_000 + i * 10_000, 200_000 + i * 10_000 + 9_000, 3) for i in range(16)]
    db = write_export(tmp_path / "g.sqlite", ks, graph_launches=launches, capture_meta={"CUDA_GRAPH_TRACE_OPTIONS:MODE": "graph"},
                      export_meta=("META_DATA_EXPORT", {"NSIGHT_SYSTEMS_VERSION": "2024.7.1", "EXPORT_SCHEMA_VERSION": "3.15.1"}))  # fmt: skip
    cap = analyze_file(str(db), TABLE, label="g", ntg=16, npl=1)
    assert cap["collapsed"] is True and cap["graph_trace_mode"] == "graph" and cap["kernels"] == 2
    assert cap["graph_launches"] == {"launches": 16, "total_ms": 0.144}
    assert "16 CUDA-graph launches (0.144 ms) are in CUPTI_ACTIVITY_KIND_GRAPH_TRACE" in cap["warning"] and "META_DATA_CAPTURE" in cap["warning"]
    assert cap["export"] == {"table": "META_DATA_EXPORT", "nsys_version": "2024.7.1", "schema_version": "3.15.1"}
    assert build_doc([cap])["collapsed"] is True


def test_node_mode_recorded_changes_the_no_graph_node_warning(tmp_path):
    db = write_export(tmp_path / "n.sqlite", [Kernel(GDN, 0, 50_000)], capture_meta={"CUDA_GRAPH_TRACE_OPTIONS:MODE": "node"})
    cap = analyze_file(str(db), TABLE, label="n")
    assert not cap["collapsed"] and cap["graph_trace_mode"] == "node" and cap["graph_launches"] is None
    assert "although the export records --cuda-graph-trace=node" in cap["warning"]
