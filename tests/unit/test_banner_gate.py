"""The runtime banner gate (parity.gates.banner): its parsers on real captured output (the smoke and
pin CPU builds, the pin on a lent H200, the users' series on a lent H100, ggml-ci's V100 runs) and
on banners written from the pin's format strings (GB10, B200: tests/data/runtime/README.md); its
verdict against the build, the not-applicable CPU row, and its place in the gate registry."""

from __future__ import annotations

from pathlib import Path

import pytest

from parity.gates import banner
from parity.gates.checks import FAIL, PASS
from parity.gates.kinds import GATES, red_in_summary

DATA = Path(__file__).resolve().parents[1] / "data"
RUNTIME = DATA / "runtime"


def text(name: str) -> str:
    return (RUNTIME / name).read_text()


# ---- parsers on real output -----------------------------------------------------------------


@pytest.mark.parametrize("name", ["smoke-cpu-llama-server.log", "pin-cpu-llama-completion.stderr"])
def test_system_info_of_the_real_cpu_builds(name):
    info = banner.parse_system_info(text(name))
    assert info["n_threads"] == 1
    assert list(info["backends"]) == ["CPU"]  # no CUDA backend in a CPU build
    assert info["backends"]["CPU"] == {
        k: "1" for k in ("SSE3", "SSSE3", "AVX", "AVX2", "F16C", "FMA", "BMI2", "LLAMAFILE", "OPENMP", "REPACK")
    }
    assert info["line"].startswith("CPU : SSE3 = 1 | ") and info["line"].endswith("REPACK = 1")


def test_system_info_of_the_real_cuda_build_names_its_archs():
    info = banner.parse_system_info(text("h100-real-series-llama-perplexity-tail.txt"))
    assert info["n_threads"] == 16
    assert info["backends"]["CUDA"] == {"ARCHS": "900", "USE_GRAPHS": "1", "PEER_MAX_BATCH_SIZE": "128"}
    assert info["backends"]["CPU"]["AMX_INT8"] == "1" and len(info["backends"]["CPU"]) == 16


def test_cuda_init_of_the_pin_on_a_real_h200():
    init = banner.parse_cuda_init(text("h200-pin-ggml-cuda-init.txt"))
    assert init == {
        "found": 1,
        "total_vram_mib": 143155,
        "devices": [{"id": 0, "name": "NVIDIA H200", "cc": 900, "cc_text": "9.0", "vmm": True, "vram_mib": 143155}],
    }


@pytest.mark.parametrize("year, vmm", [("2023", None), ("2024", True)])
def test_cuda_init_of_older_ggml_formats(year, vmm):
    """2024: 'ggml_cuda_init: found 1 CUDA devices:' with VMM and no VRAM; 2023: ggml_init_cublas, no VMM."""
    init = banner.parse_cuda_init((DATA / "gates" / f"tbo-old-{year}-ggml-ci-v100-excerpt.txt").read_text())
    assert init["found"] == 1 and init["total_vram_mib"] is None
    assert init["devices"] == [
        {"id": 0, "name": "Tesla V100-PCIE-16GB", "cc": 700, "cc_text": "7.0", "vmm": vmm, "vram_mib": None}
    ]


def test_no_banner_no_parse():
    assert banner.parse_cuda_init(text("smoke-cpu-llama-server.log")) is None
    assert banner.parse_system_info("llama_server: listening on http://127.0.0.1:8080") is None


def test_backend_without_features_and_the_arch_lists():
    info = banner.parse_system_info("system_info: n_threads = 4 / 8 | BLAS : CPU : SSE3 = 1 | ")
    assert info["backends"] == {"BLAS": {}, "CPU": {"SSE3": "1"}}
    assert banner.built_archs("90;121a-real") == [900, 1210] and banner.built_archs("100a") == [1000]
    assert banner.runtime_archs("900,1000") == [900, 1000] and banner.runtime_archs("sm_90") is None


def test_native_fp4_follows_the_pins_rule():
    """blackwell_mma_available: the highest built arch at or below the cc in [1200, 1300)."""
    assert banner.native_fp4(1210, [1210]) and banner.native_fp4(1210, [1200])
    assert not banner.native_fp4(1000, [1000]) and not banner.native_fp4(1000, [1000, 1210])  # B200: no
    assert not banner.native_fp4(900, [900]) and banner.highest_compiled(1000, [1210]) == -1


# ---- the verdict ------------------------------------------------------------------------------


def test_gb10_and_b200_banners_pass_against_their_builds():
    gb10 = banner.judge("121", text("gb10-banner-from-format-strings.log"), "gb10.log")
    assert gb10["status"] == PASS and gb10["native_fp4"] == {"expected": True, "reported": True}
    assert gb10["got"] == "ARCHS = 1210; BLACKWELL_NATIVE_FP4 = 1; NVIDIA GB10 cc 12.1"
    b200 = banner.judge("100", text("b200-banner-from-format-strings.log"), "b200.log")
    assert b200["status"] == PASS and b200["native_fp4"] == {"expected": False, "reported": False}
    assert b200["expected"].startswith("ARCHS = 1000 (cuda_archs 100); no BLACKWELL_NATIVE_FP4")


def test_a_banner_that_is_not_the_build_fails():
    b200 = text("b200-banner-from-format-strings.log")
    wrong = banner.judge("121", b200, "b200.log")  # archs differ
    assert (
        wrong["status"] == FAIL
        and "built for [1210] (cuda_archs 121), the runtime reports ARCHS = [1000]" in wrong["why"]
    )
    gb10_on_b200 = banner.judge("121", b200.replace("ARCHS = 1000", "ARCHS = 1210"), "b200.log")  # no code for cc 10.0
    assert gb10_on_b200["status"] == FAIL and "has no built arch at or below it" in gb10_on_b200["why"]
    fp4 = b200.replace("PEER_MAX_BATCH_SIZE = 128 |", "PEER_MAX_BATCH_SIZE = 128 | BLACKWELL_NATIVE_FP4 = 1 |")
    assert (
        "BLACKWELL_NATIVE_FP4 reported, but this build on these devices gives none"
        in banner.judge("100", fp4, "b.log")["why"]
    )
    lost = text("gb10-banner-from-format-strings.log").replace(" BLACKWELL_NATIVE_FP4 = 1 |", "")
    assert (
        "BLACKWELL_NATIVE_FP4 absent, but this build on these devices gives it"
        in banner.judge("121", lost, "g.log")["why"]
    )


def test_missing_evidence_is_a_named_failure():
    assert (
        banner.judge("100", None, "servers/paged-r0.log")["why"]
        == "no server log servers/paged-r0.log to read the banner from"
    )
    assert "no `system_info:` line" in banner.judge("100", "ggml_cuda_init: found 1 CUDA devices:", "x.log")["why"]
    cpu_server = banner.judge("90", text("smoke-cpu-llama-server.log"), "x.log")  # a CUDA build that ran without CUDA
    assert cpu_server["status"] == FAIL and "system_info has no CUDA backend (CPU)" in cpu_server["why"]
    no_devices = banner.judge(
        "90", text("h100-real-series-llama-perplexity-tail.txt"), "t.log"
    )  # the tail has no init lines
    assert no_devices["status"] == FAIL and "device line" in no_devices["why"] and no_devices["archs_runtime"] == [900]


def test_a_cpu_build_is_not_applicable_with_its_reason_never_a_pass():
    row = banner.judge(None, text("smoke-cpu-llama-server.log"), "servers/paged-r0.log")
    assert row["status"] == banner.NA and row["status"] != PASS
    assert (
        row["why"] == "a CPU build (cuda_archs unset): llama.cpp prints no CUDA banner (its system_info backends: CPU)"
    )
    assert row["system_info"].startswith("CPU : SSE3 = 1 | ")
    doc = {
        "banner": GATES["banner"].measure(
            [
                {
                    "engine": "paged",
                    "repeat": 0,
                    "log": "l",
                    "text": text("smoke-cpu-llama-server.log"),
                    "cuda_archs": None,
                },
                {
                    "engine": "vllm",
                    "repeat": 0,
                    "log": "v",
                    "text": "",
                    "applies": "a vllm engine prints no llama.cpp banner",
                },
            ]
        )
    }
    assert (
        doc["banner"]["status"] == banner.NA
        and "paged: a CPU build" in doc["banner"]["why"]
        and "vllm: a vllm engine" in doc["banner"]["why"]
    )
    assert (
        GATES["banner"].from_summary(doc) is None and red_in_summary(doc) == []
    )  # nothing held: neither green nor red


def test_the_gate_reads_its_verdict_from_the_summary():
    k = GATES["banner"]
    arms = [
        {
            "engine": "paged",
            "repeat": r,
            "log": f"servers/paged-r{r}.log",
            "cuda_archs": "100",
            "text": text("b200-banner-from-format-strings.log"),
        }
        for r in (0, 1)
    ]
    green = {"banner": k.measure(arms)}
    assert green["banner"]["status"] == PASS and k.from_summary(green).status == PASS and red_in_summary(green) == []
    arms[1]["cuda_archs"] = "121"
    red = {"banner": k.measure(arms)}
    (check,) = red_in_summary(red)
    assert check.kind == "banner" and check.status == FAIL and check.got == "1/2 arms as built"
    assert check.detail.startswith("paged r1: built for [1210]")


def test_the_kind_is_registered_measured_elsewhere_with_a_dry_word():
    from parity.config import load_profile
    from parity.context import Context
    from parity.gates.base import Target, gate_inputs
    from parity.runners.local import LocalRunner
    from parity.ui import Output

    k = GATES["banner"]
    assert k.name == "banner" and not k.in_gate_set and k.switch is None and k.reads == ("engines",)
    ctx = Context(load_profile("b200-qwen36"), LocalRunner(), Output(json_mode=True), Path("/nonexistent"))
    inputs = gate_inputs(ctx.profile)
    d = k.dry(inputs, ctx.runner, ctx.out, None, Target("paged"))
    assert d["commands"] == [] and d["files"] == {} and d["expected"].startswith("ARCHS = 1000 (cuda_archs 100)")
    assert k.dry(inputs, ctx.runner, ctx.out, None, Target("paged-121a"))["expected"].startswith(
        "ARCHS = 1210 (cuda_archs 121a); BLACKWELL_NATIVE_FP4 = 1"
    )


def test_the_real_h200_server_log_passes_with_the_hardware_records_cc():
    """A real llama-server log of the pin's sm_90 build on the lent H200 (its first 12 lines): the
    server's own logger takes stderr, so ggml_cuda_init's device lines are not in it; device_info's
    are, without a compute capability.  The gate read it as red ("no device line") and marked a
    real GPU run invalid; now the device comes from device_info and its cc from hardware.json."""
    text = (RUNTIME / "h200-pin-llama-server-head.log").read_text()
    assert banner.parse_cuda_init(text) is None
    assert banner.parse_device_info(text) == [{"id": 0, "name": "NVIDIA H200", "cc": None, "cc_text": "?", "vmm": None, "vram_mib": 143155}]
    row = banner.judge("90", text, "servers/stock-r0.log", ["9.0"])
    assert row["status"] == PASS, row
    assert row["devices"][0]["cc"] == 900 and row["devices"][0]["cc_from"] == "hardware"
    assert row["native_fp4"] == {"expected": False, "reported": False}
    # without a hardware record the cc is a named gap, never a pass
    gap = banner.judge("90", text, "servers/stock-r0.log", None)
    assert gap["status"] == FAIL and "no compute capability" in gap["why"]
    # the same device on a build for another arch is still red
    assert banner.judge("100", text, "servers/stock-r0.log", ["9.0"])["status"] == FAIL


def test_the_compute_capability_comes_from_the_runs_hardware_record(tmp_path):
    """hardware.json of the real H200 run, read through the result model; none or a broken one: no cc."""
    from parity.serving.logs import hardware_cc

    assert hardware_cc(RUNTIME / "h200-run") == ["9.0"]
    assert hardware_cc(tmp_path) == []
    (tmp_path / "hardware.json").write_text("{not json")
    assert hardware_cc(tmp_path) == []
