"""% of roofline per point, the published peak table, memory per engine and the gap chain."""

from __future__ import annotations

import math

import pytest

from parity.engines.vllm import MEMORY_NOTE

from parity.config import SynthSpec
from parity.efficiency import gap, memory, roofline
from parity.gpu import bandwidth as peak
from parity.efficiency.bytes_per_token import decode_bytes
from parity.models.synth import synth_gguf


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    p = tmp_path_factory.mktemp("roof") / "moe.gguf"
    synth_gguf(p, SynthSpec(arch="qwen35moe", dtype="f16", layers=4, embd=64, heads=4, kv_heads=2, ff=64, ctx=4096, experts=8, experts_used=2))
    return str(p)


@pytest.mark.parametrize(
    "cls,name,gbps",
    [("hopper", "NVIDIA H100 80GB HBM3", 3350), ("hopper", "NVIDIA H100 PCIe", 2000), ("hopper", "NVIDIA H100 NVL", 3900), ("hopper", "NVIDIA H200", 4800),
     ("gb10_or_workstation_blackwell", "NVIDIA GB10", 273), ("datacenter_blackwell", "NVIDIA B200", 8000)],
)  # fmt: skip
def test_published_peaks(cls, name, gbps):
    p = peak.published(cls, name)
    assert p["gbps"] == gbps and "datasheet" in p["source"]


def test_no_published_peak_says_why():
    assert peak.published("cpu_only", None)["gbps"] is None and "measured" in peak.published("cpu_only", None)["reason"]
    assert "RTX" in peak.published("ada", "NVIDIA RTX 4090")["reason"]


def test_cpu_copy_measured_small():
    m = peak.measure_cpu(16 << 20, repeats=2)
    assert m["gbps"] > 0 and m["bytes"] == 32 << 20 and "read + bytes written" in m["counted"]


@pytest.fixture
def small_copies(tmp_path, monkeypatch):
    """The real CPU copy at 16 MiB, counted; a cache of its own."""
    monkeypatch.setenv("PARITY_CACHE", str(tmp_path / "cache"))
    real, calls = peak.measure_cpu, []

    def counted():
        calls.append(1)
        return real(16 << 20, repeats=2)

    monkeypatch.setattr(peak, "measure_cpu", counted)
    return calls


def test_measured_copy_is_kept_for_this_boot_and_said_so(small_copies):
    first = peak.bandwidth({"hardware_class": "cpu_only"})["measured"]
    second = peak.bandwidth({"hardware_class": "cpu_only"})["measured"]
    assert len(small_copies) == 1 and first["cached"] is False and second["cached"] is True
    assert second["gbps"] == first["gbps"] > 0 and second["measured_at"] == first["measured_at"]
    assert f"measured {first['measured_at']} this boot (kept from an earlier run)" in peak.line({"published": {"gbps": None}, "measured": second})
    assert "kept" not in peak.line({"published": {"gbps": None}, "measured": first})
    peak.bandwidth({"hardware_class": "cpu_only"}, fresh=True)  # PARITY_BANDWIDTH=fresh
    assert len(small_copies) == 2


def test_failed_measurement_is_not_kept(small_copies, monkeypatch):
    counted = peak.measure_cpu
    monkeypatch.setattr(peak, "measure_cpu", lambda: 1 / 0)
    assert "ZeroDivisionError" in peak.bandwidth({"hardware_class": "cpu_only"})["measured"]["reason"]
    monkeypatch.setattr(peak, "measure_cpu", counted)
    assert peak.bandwidth({"hardware_class": "cpu_only"})["measured"]["cached"] is False and len(small_copies) == 1


def test_a_gpu_figure_is_not_a_cpu_figure(small_copies, monkeypatch):
    monkeypatch.setattr(peak, "measure_gpu", lambda: {"gbps": 3000.0, "method": "torch copy_"})
    gpu = peak.bandwidth({"hardware_class": "hopper", "gpus": [{"name": "NVIDIA H100 80GB HBM3"}]})["measured"]
    cpu = peak.bandwidth({"hardware_class": "cpu_only"})["measured"]
    assert gpu["gbps"] == 3000.0 and cpu["cached"] is False and len(small_copies) == 1


def test_serving_point_arithmetic(model):
    bw = {"published": {"gbps": 100.0, "source": "x"}, "measured": {"gbps": 50.0, "method": "y"}}
    med = [{"engine": "paged", "n": 4, "decode_agg_tps": 400.0}, {"engine": "stock", "n": 4, "decode_agg_tps": None}]
    eff = roofline.serving(med, model, ptok=64, gen=256, bw=bw)
    p, q = eff["points"]
    step = decode_bytes(model, 64 + 128, 4)["total"]
    assert eff["context"] == 192 and p["bytes_per_step"] == step
    assert p["achieved_gbps"] == pytest.approx(100 * step / 1e9, rel=1e-3)  # 400 tok/s / 4 seqs = 100 steps/s
    assert p["pct_published"] == pytest.approx(p["achieved_gbps"], rel=1e-3) and p["pct_measured"] == pytest.approx(2 * p["achieved_gbps"], rel=1e-3)
    assert q["achieved_gbps"] is None and q["why"]
    text = "\n".join(roofline.lines(eff))
    assert "N=4" in text and "% of measured copy" in text


def test_bench_points(model):
    rows = [{"pp": 32, "tg": 8, "b": 2, "s_tg": 50.0}]
    eff = roofline.bench(rows, model, {"published": {"gbps": None}, "measured": {"gbps": 10.0}}, engine="paged")
    p = eff["points"][0]
    assert p["context"] == 36 and p["pct_published"] is None
    assert p["achieved_gbps"] == pytest.approx(25 * decode_bytes(model, 36, 2)["total"] / 1e9, rel=1e-3)


def test_no_model_file_says_why():
    eff = roofline.serving([], None, 1, 2, None)
    assert eff["points"] == [] and "GGUF" in eff["why"] and roofline.lines(eff) == [f"efficiency: {eff['why']}"]


def test_memory_summary_and_ratio():
    arms = [
        {"engine": "stock", "memory": {"before": 1000, "peak": 1500, "steady": 1400, "source": "meminfo", "process_peak": 400, "process_steady": 380, "process_source": "VmRSS"}},
        {"engine": "vllm", "memory": {"before": 1000, "peak": 3000, "steady": 2900, "source": "meminfo", "process_peak": 1600, "process_steady": 1520, "process_source": "VmRSS", "note": MEMORY_NOTE}},
    ]
    s = memory.summary(arms, "stock")
    assert s["engines"]["vllm"]["peak_mib"] == 1600 and s["engines"]["vllm"]["note"]
    assert s["ratios"] == [{"engine": "vllm", "reference": "stock", "peak": 4.0, "steady": 4.0}]
    del arms[0]["memory"]["process_peak"]  # one arm without a process figure: the device deltas for all
    s = memory.summary(arms, "stock")
    assert s["basis"] == "device total delta" and s["engines"]["stock"]["peak_mib"] == 500 and s["ratios"][0]["peak"] == 4.0


def test_memory_track_on_this_process():
    import os

    class P:
        pid = os.getpid()

    t = memory.start(None, "meminfo", P())
    t.sample("N=1")
    r = t.result()
    assert r["process_peak"] > 0 and r["process_source"].startswith("VmRSS") and [s["at"] for s in r["samples"]] == ["ready", "N=1", "end"]


def test_gap_chain_multiplies_and_combines_in_quadrature():
    s = {"ratio": 0.8, "low": 0.8 / 1.05, "high": 0.8 * 1.05}
    b = {"ratio": 0.9, "low": 0.9 / 1.02, "high": 0.9 * 1.02}
    doc = gap.chain(s, b, "paged", "vllm")
    serv, stat, over = doc["links"]
    assert over["ratio"] == pytest.approx(0.8 / 0.9, rel=1e-6)
    assert stat["ratio"] * over["ratio"] == pytest.approx(serv["ratio"], rel=1e-6)
    h = math.sqrt(math.log(1.05) ** 2 + math.log(1.02) ** 2)
    assert over["high"] == pytest.approx(0.8 / 0.9 * math.exp(h), rel=1e-5) and over["half_width_pct"] == pytest.approx((math.exp(h) - 1) * 100, rel=1e-3)
    assert "quadrature" in doc["method"] and "static" in "\n".join(gap.lines(doc))


def test_gap_from_rows():
    rows = [{"engine": e, "n": 4, "repeat": r, "valid": True, "decode_agg_tps": v} for e, r, v in
            [("a", 0, 100), ("b", 0, 90), ("a", 1, 102), ("b", 1, 93), ("a", 2, 98), ("b", 2, 88)]]  # fmt: skip
    s = gap.serving_ratio({"rows": rows}, "b", "a", 4)
    assert s["blocks"] == 3 and s["low"] < s["ratio"] < s["high"]
    bench = [{"engine": e, "b": 4, "repeat": r, "s_tg": v} for e, r, v in [("a", 0, 200), ("b", 0, 190), ("a", 1, 210), ("b", 1, 196)]]
    st = gap.static_ratio(bench, "b", "a", 4)
    assert st["blocks"] == 2 and gap.chain(s, st)["links"][2]["low"] is not None


def test_report_section_and_plot(model, tmp_path):
    import json
    from types import SimpleNamespace

    from parity.report.efficiency_sections import efficiency_section

    bw = {"published": {"gbps": None, "reason": "no GPU"}, "measured": {"gbps": 20.0, "method": "numpy copy", "counted": "bytes read + bytes written"}}
    (tmp_path / "bandwidth.json").write_text(json.dumps(bw))
    med = [{"engine": e, "n": n, "decode_agg_tps": 50.0 * n} for e in ("paged", "stock") for n in (1, 4)]
    eff = roofline.serving(med, model, 64, 256, bw)
    eff["memory"] = memory.summary([{"engine": "stock", "memory": {"before": 1, "peak": 5, "steady": 4, "process_peak": 30, "process_steady": 29, "process_source": "VmRSS"}}], "stock")
    rd = SimpleNamespace(path=tmp_path, summary={"efficiency": eff}, bench={"efficiency": roofline.bench([{"pp": 32, "tg": 8, "b": 2, "s_tg": 80.0}], model, bw, engine="paged")})
    sec = efficiency_section(rd, tmp_path / "assets", "assets")
    md = sec["markdown"]
    assert "20 GB/s (numpy copy" in md and "| paged | 4 |" in md and "| paged | 32 | 8 | 2 |" in md and "Memory per engine" in md
    assert sec["plots"] and (tmp_path / "assets" / "roofline_vs_n.png").stat().st_size > 1000
    assert efficiency_section(SimpleNamespace(path=tmp_path, summary={}, bench=None), tmp_path, "x") is None
