"""The tracer's statistics: its cost (traced/untraced, paired), the paired bucket table (the
buckets and the remainder add up to the engine's decode time), the gap chain's kernel link,
and the one-line refusal on a machine without a CUDA device."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from parity.errors import UsageError
from parity.profiles.analysis import analyze_file, difference
from parity.profiles.buckets import default_table
from parity.profiles.synthetic import Kernel, write_export
from parity.tracer import chain, overhead, pairs

DATA = Path(__file__).resolve().parents[1] / "data"
MMQ = "void mul_mat_q<(ggml_type)8, 64, false>(char const*, int const*, float*)"
FA = "void flash_attn_ext_f16<128, 128, 4, 1, false, false>(char const*, char const*, float*)"
NORM = "void rms_norm_f32<1024, true, false>(float const*, float*, int)"


def test_tracer_cost_pairs_runs_by_block():
    rows = [{"engine": "paged", "block": b, "traced": t, "s_tg": v} for b, t, v in [(0, False, 100.0), (0, True, 90.0), (1, False, 110.0), (1, True, 100.0), (2, False, 105.0), (2, True, 93.0)]]
    (d,) = overhead.tracer_overhead(rows, "cupti")
    assert d["blocks"] == 3 and d["ratio"] == pytest.approx(math.exp(sum(math.log(x) for x in (0.9, 100 / 110, 93 / 105)) / 3), rel=1e-6)
    assert d["low"] < d["ratio"] < d["high"] < 1 and d["slowdown_pct"] == pytest.approx((1 - d["ratio"]) * 100, abs=1e-3)
    assert "slower traced" in overhead.line(d)
    (one,) = overhead.tracer_overhead(rows[:2], "cupti")
    assert one["low"] is None and "one block" in one["reason"] and "no interval" in overhead.line(one)


def _capture(path, ntg, mmq_ns, fa_ns, steps_gap=500):
    """ntg decode steps of three kernels each (graph nodes), after a prefill of two plain launches."""
    ks, t = [Kernel(MMQ, 0, 40_000), Kernel(FA, 40_000, 60_000)], 100_000
    for i in range(ntg):
        for j, (name, dur) in enumerate(((MMQ, mmq_ns), (FA, fa_ns), (NORM, 1_000))):
            ks.append(Kernel(name, t, t + dur, graph_node_id=j + 1, graph_id=3, correlation=10 + i))
            t += dur + steps_gap
    return analyze_file(str(write_export(path, ks)), default_table(), label=path.stem, ntg=ntg, npl=2)


def _cells(tmp_path, arm, mmq, fa, engine_ms, blocks=3):
    out = {}
    for b in range(blocks):
        jitter = 1 + 0.01 * b
        long = _capture(tmp_path / f"{arm}-ntg16-b{b}.sqlite", 16, int(mmq * jitter), fa)
        short = _capture(tmp_path / f"{arm}-ntg4-b{b}.sqlite", 4, int(mmq * jitter), fa)
        d = difference(long, short, npl=2)
        out[(arm, b)] = pairs.arm_block(d, engine_ms * jitter)
    return out


def test_paired_buckets_add_up_and_find_the_bucket_that_moved(tmp_path):
    cells = {**_cells(tmp_path, "stock", 20_000, 8_000, 0.020), **_cells(tmp_path, "paged", 20_000, 12_000, 0.023)}
    doc = pairs.paired_buckets(cells, "stock", "paged", order=default_table().order())
    rows = {r["bucket"]: r for r in doc["rows"]}
    assert doc["blocks"] == [0, 1, 2] and not doc["engine_time_missing"]
    # flash attention got 4 us slower per step = 2 us per token (npl 2): the only bucket that moved
    assert rows["fa"]["delta_ms_per_token"] == pytest.approx(0.002, rel=1e-6) and rows["fa"]["excludes_zero"]
    assert rows["mmq_other"]["delta_ms_per_token"] == pytest.approx(0, abs=1e-9)
    k, rem, eng = rows["kernels (sum)"], rows["remainder"], rows["engine decode"]
    assert sum(r["delta_ms_per_token"] for r in doc["rows"] if r["kind"] == "bucket") == pytest.approx(k["delta_ms_per_token"], abs=1e-9)
    assert eng["delta_ms_per_token"] == pytest.approx(k["delta_ms_per_token"] + rem["delta_ms_per_token"], abs=1e-9)
    assert eng["a_ms_per_token"] == pytest.approx(k["a_ms_per_token"] + rem["a_ms_per_token"], abs=1e-9)
    assert doc["check"]["a_kernel_share_of_engine"] == pytest.approx(k["a_ms_per_token"] / eng["a_ms_per_token"], rel=1e-5)
    assert any("fa" in ln and "*" in ln for ln in pairs.table_lines(doc))


def test_a_lost_engine_time_is_named_not_a_zero_remainder(tmp_path):
    cells = {**_cells(tmp_path, "stock", 20_000, 8_000, 0.020, 2), **_cells(tmp_path, "paged", 20_000, 8_000, 0.020, 2)}
    cells[("paged", 1)]["engine decode"] = None
    cells[("paged", 1)]["remainder"] = None
    doc = pairs.paired_buckets(cells, "stock", "paged")
    rows = {r["bucket"]: r for r in doc["rows"]}
    assert doc["engine_time_missing"] == ["paged block 1"] and rows["remainder"]["blocks"] == 1 and rows["remainder"]["delta_low"] is None
    assert pairs.engine_ms_per_token([{"t_tg": 2.0}], [], 8, 2) is None
    assert pairs.engine_ms_per_token([{"t_tg": 2.0}], [{"t_tg": 0.4}], 8, 2) == pytest.approx(100.0)
    # S_TG (= B x TG / t_tg, 2 decimals) carries the TG time to more digits than T_TG's 3 decimals: it wins
    long, short = {"tg": 32, "b": 8, "t_tg": 0.323, "s_tg": 792.64}, {"tg": 8, "b": 8, "t_tg": 0.104, "s_tg": 613.88}
    assert pairs.engine_ms_per_token([long], [short], 24, 8) == pytest.approx((256 / 792.64 - 64 / 613.88) * 1000 / 192, rel=1e-12)
    assert pairs.engine_seconds([long], [{**short, "s_tg": 0.0}]) == pytest.approx((256 / 792.64, 0.104))


def test_the_kernel_link_on_the_h100_lever_bench(tmp_path):
    """The static delta of the recorded H100 lever A/B (paged_nofg vs paged, Q8_0 MoE) at B=32,
    split over a paired bucket table: static = buckets + remainder, with quadrature intervals."""
    bench = json.loads((DATA / "h100-noise" / "lever-bench.json").read_text())
    st = chain.static_delta(bench["rows"], "paged_nofg", "paged", 32)
    assert st["n"] == 8 and st["mean"] > 0 and st["low"] > 0  # forced graphs off: decode costs more per token
    cells = {**_cells(tmp_path, "paged", 20_000, 8_000, 0.020), **_cells(tmp_path, "paged_nofg", 22_000, 8_000, 0.022)}
    pb = pairs.paired_buckets(cells, "paged", "paged_nofg")
    link = chain.kernel_link(st, pb, "paged_nofg", "paged")
    s, k, r = link["static"], link["kernels"], link["remainder"]
    assert s["delta_ms_per_token"] == pytest.approx(k["delta_ms_per_token"] + r["delta_ms_per_token"], abs=1e-8)
    hs, hk, hr = ((x["high"] - x["low"]) / 2 for x in (s, k, r))
    assert hr == pytest.approx(math.hypot(hs, hk), rel=1e-6)
    flipped = chain.kernel_link(st, pairs.paired_buckets(cells, "paged_nofg", "paged"), "paged_nofg", "paged")
    assert flipped["kernels"]["delta_ms_per_token"] == pytest.approx(k["delta_ms_per_token"], abs=1e-9)
    with pytest.raises(UsageError, match="not the bench's"):
        chain.kernel_link(st, pb, "stock", "paged")
    assert "static" in "\n".join(chain.lines(link))
    png = chain.plot(link, str(tmp_path / "gap.png"))
    assert Path(png).stat().st_size > 1000


def test_no_cuda_device_is_one_line_and_exit_2(parity_cli, tmp_path):
    prof = tmp_path / "p.yaml"
    prof.write_text(f"extends: smoke\nlock: {{dir: {tmp_path / 'lock'}}}\n")
    env = {"PATH": "/usr/bin:/bin", "PARITY_ARTIFACTS": str(tmp_path / "runs"), "PARITY_NO_NVML": "1"}
    for tracer in ("cupti", "auto"):  # auto: no nsys on PATH here, so CUPTI, which needs a device
        r = parity_cli("profile", "--graph-node", "--tracer", tracer, "--model", "tiny", "-p", str(prof), env=env)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and "kernel tracing needs a CUDA device" in lines[0], r.stderr
        assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # refused before any run directory


@pytest.mark.parametrize("name, group", [
    ("kernel_unified_attention_2d", "attention"), ("reduce_segments", "attention"),
    ("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>(__nv_bfloat16 const*)", "attention"),
    ("fused_moe_kernel", "MoE/FFN-GEMM"), ("fused_moe_kernel_gptq_awq", "MoE/FFN-GEMM"),
    ("void vllm::moe::topkGatingSoftmax<4, 64, 4, 16, int>(float const*, bool const*, float*)", "MoE-route"),
    ("void vllm::moe::moeSoftmax<256>(float const*, bool const*, float*, int)", "MoE-route"),
    ("void vllm::rms_norm_kernel<c10::BFloat16>(c10::BFloat16*, c10::BFloat16 const*, long)", "elementwise"),
    ("void vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, c10::BFloat16*)", "elementwise"),
    ("void vllm::act_and_mul_kernel<c10::BFloat16, &vllm::silu_kernel<c10::BFloat16>, true>(c10::BFloat16*)", "elementwise"),
])  # fmt: skip
def test_vllm_kernels_land_in_the_macro_groups_of_their_llama_cpp_kin(name, group):
    """Kernel names as vLLM's sources declare them (defaults/buckets.yaml cites where)."""
    t = default_table()
    assert t.groups()[t.classify(name)] == group
