"""Gate parsers on captured real output (tests/data/gates/, see its README)."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import pytest

from parity.gates import completion, perplexity
from parity.gates import test_backend_ops as tbo
from parity.gates.checks import ERROR, FAIL, PASS

G = Path(__file__).resolve().parents[1] / "data" / "gates"


def text(name: str) -> str:
    return (G / name).read_text(encoding="utf-8", errors="replace")


# --------------------------------------------------------------------------- test-backend-ops


@pytest.mark.parametrize("name,op,total", [("tbo-cpu-rms_norm.txt", "RMS_NORM", 51), ("tbo-cpu-soft_max.txt", "SOFT_MAX", 214)])
def test_tbo_cpu_against_itself(name, op, total):
    run = tbo.parse(text(name))
    b = run.backend("CPU")
    assert (b.passed, b.total, b.ok_cases, b.failing, b.skipped) == (total, total, total, [], None)
    assert run.backends_passed == (1, 1)
    assert tbo.verdict(run, "CPU", 0) == (PASS, f"{total}/{total}", "")


def test_tbo_default_mode_cpu_only_is_skipped_not_passed():
    run = tbo.parse(text("tbo-default-cpu-only.txt"))
    assert run.backend("CPU").skipped == "Skipping CPU backend"
    assert run.backends_passed == (1, 1)  # the tool itself says "1/1 backends passed"...
    status, got, detail = tbo.verdict(run, "CPU", 0)
    assert status == ERROR and "Skipping CPU backend" in detail  # ...but nothing was tested: never a pass


def test_tbo_unknown_op_is_an_error():
    run = tbo.parse(text("tbo-cpu-unknown-op.txt"))
    assert tbo.verdict(run, "CPU", 0)[:2] == (ERROR, "0/0")


def test_tbo_requested_backend_missing():
    run = tbo.parse(text("tbo-cpu-rms_norm.txt"))
    status, _, detail = tbo.verdict(run, "CUDA0", 0)
    assert status == ERROR and "no 'Backend i/n: CUDA0' block" in detail and "backends seen: CPU" in detail
    assert tbo.verdict(run, "CUDA0", 1)[0] == ERROR


# closed world (issue 17, case 1): exit 0 with no evidence of a pass is never a pass


def test_tbo_closed_world_empty_output_exit_0_is_an_error():
    status, got, detail = tbo.verdict(tbo.parse(""), "CPU", 0)
    assert (status, got) == (ERROR, "-") and "no 'Backend i/n: CPU' block" in detail and "0 non-empty lines" in detail


def _headerless_failure() -> str:
    """The real RMS_NORM capture without its `Backend 1/1: CPU` header, one case short, the tool saying FAIL."""
    raw = text("tbo-cpu-rms_norm.txt")
    out = "\n".join(ln for ln in raw.splitlines() if not ln.startswith("Backend 1/1:"))
    return out.replace("  51/51 tests passed", "  50/51 tests passed").replace("Backend CPU: \x1b[1;32mOK", "Backend CPU: \x1b[1;31mFAIL")


def test_tbo_closed_world_headerless_failing_summary_is_red():
    run = tbo.parse(_headerless_failure())
    assert run.backend("CPU") is None and "50/51 tests passed" in run.orphans
    status, got, detail = tbo.verdict(run, "CPU", 0)
    assert (status, got) == (FAIL, "50/51")
    assert "no 'Backend i/n: CPU' block" in detail and "Backend CPU: FAIL" in detail


def test_tbo_closed_world_headerless_clean_summary_is_an_error():
    raw = "\n".join(ln for ln in text("tbo-cpu-rms_norm.txt").splitlines() if not ln.startswith("Backend 1/1:"))
    status, _, detail = tbo.verdict(tbo.parse(raw), "CPU", 0)
    assert status == ERROR and "51/51 tests passed" in detail  # says what it saw, and what was missing


@pytest.mark.parametrize("cut", ["  51/51 tests passed", "  RMS_NORM(type=f32,ne=[64,5,4,3],v=0,eps=0.000001,inplace=1)"])
def test_tbo_closed_world_truncated_output_is_an_error(cut):
    raw = text("tbo-cpu-rms_norm.txt")
    status, _, detail = tbo.verdict(tbo.parse(raw[: raw.index(cut)]), "CPU", 0)
    assert status == ERROR and "no 'N/N tests passed' summary" in detail


def test_tbo_closed_world_summary_needs_its_case_lines():
    """A block whose summary claims more OK cases than were printed: altered output, not a pass."""
    raw = text("tbo-cpu-rms_norm.txt")
    lines = [ln for ln in raw.splitlines() if not (ln.startswith("  RMS_NORM(") and "v=1" in ln)]
    status, got, detail = tbo.verdict(tbo.parse("\n".join(lines)), "CPU", 0)
    assert (status, got) == (ERROR, "51/51") and "OK case lines" in detail


def test_tbo_closed_world_backend_fail_line_is_red():
    raw = text("tbo-cpu-rms_norm.txt").replace("Backend CPU: \x1b[1;32mOK", "Backend CPU: \x1b[1;31mFAIL")
    assert tbo.verdict(tbo.parse(raw), "CPU", 0)[0] == FAIL


CUDA = [("test-backend-ops-cuda-h100-mul_mat.txt", "MUL_MAT", 1304, 385), ("test-backend-ops-cuda-h100-mul_mat_id.txt", "MUL_MAT_ID", 931, 14)]


@pytest.mark.parametrize("name,op,total,unsupported", CUDA)
def test_tbo_cuda_h100_capture(name, op, total, unsupported):
    raw = text(name)
    assert "ggml_backend_cuda_graph_compute: CUDA graph warmup complete" in raw  # interleaved log lines
    run = tbo.parse(raw)
    cuda, cpu = run.backend("CUDA0"), run.backend("CPU")
    assert (cuda.passed, cuda.total, cuda.ok_cases, cuda.unsupported) == (total, total, total, unsupported)
    assert cpu.skipped == "Skipping" and run.backends_passed == (2, 2)
    status, got, _ = tbo.verdict(run, "CUDA0", 0)
    assert (status, got) == (PASS, f"{total}/{total}")


def test_tbo_older_backend_header_2024():
    """`Backend 2/2 (CUDA0)` (builds before mid-2025): the CUDA0 section is found and its FAILs listed."""
    run = tbo.parse(text("tbo-old-2024-ggml-ci-v100-excerpt.txt"))
    assert [b.name for b in run.backends] == ["CPU", "CUDA0"] and run.backends_passed == (1, 2)
    cuda = run.backend("CUDA0")
    assert (cuda.passed, cuda.total, cuda.unsupported, len(cuda.failing)) == (1028, 1124, 4, 3)
    assert cuda.failing[0].startswith("ROPE(type=f32,ne=[64,8,10,1]") and "NMSE = 1.148189415" in cuda.failing[0]
    assert run.backend("CPU").skipped == "Skipping CPU backend"
    status, got, _ = tbo.verdict(run, "CUDA0", 1)
    assert (status, got) == (FAIL, "1028/1124")


def test_tbo_older_backend_header_2023():
    """The oldest shape: `Backend name: CUDA` under `(CUDA0)`, bare `OP: not supported`; CPU passes, CUDA0 fails."""
    run = tbo.parse(text("tbo-old-2023-ggml-ci-v100-excerpt.txt"))
    assert [b.name for b in run.backends] == ["CPU", "CUDA0"]
    cpu = run.backend("CPU")
    assert (cpu.passed, cpu.total, cpu.status) == (83, 83, "OK")
    # an excerpt (8 of the 83 case lines kept): closed-world verdicts refuse what they cannot see
    status, got, why = tbo.verdict(run, "CPU", None)
    assert (status, got) == (ERROR, "83/83") and "8 OK case lines" in why
    cuda = run.backend("CUDA0")
    assert [f.split(")")[0] + ")" for f in cuda.failing] == [
        "ADD(type=f32,ne=[16,10,10,1],nr=[1,1,1,1])", "ADD(type=f32,ne=[16,10,10,10],nr=[1,1,1,1])",
        "MUL(type=f32,ne=[16,10,10,1],nr=[1,1,1,1])", "NORM(type=f32,ne=[64,10,10,10],eps=0.001000)"]
    assert tbo.verdict(run, "CUDA0", 1)[:2] == (FAIL, "67/83")


def _fail_one_case(raw: str) -> tuple[str, str]:
    """Turn the real 931-case capture into a 930/931 run: one case FAILs as test-backend-ops prints it."""
    lines = raw.splitlines()
    i = next(n for n, l in enumerate(lines) if l.startswith("  MUL_MAT_ID(") and l.endswith("OK\x1b[0m"))
    case = lines[i].split("): ")[0] + ")"
    lines[i] = f"{case}: [MUL_MAT_ID] NMSE = 0.000612345 > 0.000500000 \x1b[1;31mFAIL\x1b[0m"
    out = "\n".join(lines).replace("  931/931 tests passed", "  930/931 tests passed").replace("2/2 backends passed", "1/2 backends passed")
    return out, case


def test_tbo_one_failing_case_is_listed():
    raw, case = _fail_one_case(text("test-backend-ops-cuda-h100-mul_mat_id.txt"))
    run = tbo.parse(raw)
    status, got, detail = tbo.verdict(run, "CUDA0", 1)
    assert (status, got) == (FAIL, "930/931")
    assert case.strip() in detail and "NMSE" in detail


def test_tbo_truncated_output_is_an_error():
    raw = text("test-backend-ops-cuda-h100-mul_mat_id.txt")
    cut = raw[: len(raw) // 2]
    status, got, detail = tbo.verdict(tbo.parse(cut), "CUDA0", None)
    assert status == ERROR and "no 'N/N tests passed' summary" in detail


def test_tbo_log_line_inside_a_result_line():
    """A 2>&1 capture can put a stderr log line between `  OP(...): ` and its status."""
    lines = text("tbo-cpu-rms_norm.txt").splitlines()
    i = next(n for n, l in enumerate(lines) if l.startswith("  RMS_NORM("))
    head, status = lines[i].split("): ")
    lines[i : i + 1] = [f"{head}): ggml_backend_cuda_graph_compute: CUDA graph warmup complete", status]
    b = tbo.parse("\n".join(lines)).backend("CPU")
    assert (b.ok_cases, b.passed, b.total) == (51, 51, 51)


def test_tbo_capture_without_escape_bytes():
    raw = text("tbo-cpu-rms_norm.txt").replace("\x1b", "")
    assert tbo.parse(raw).backend("CPU").ok_cases == 51


# --------------------------------------------------------------------------- llama-perplexity


def test_perplexity_kl_run():
    s = perplexity.parse(text("ppl-kl-p1.txt"))
    assert (s["kld"].value, s["kld"].err) == (0.000579, 0.000015)
    assert (s["same_top_p"].value, s["same_top_p"].err) == (96.429, 1.171)
    assert (s["ppl_q"].value, s["ppl_base"].value) == (419.483207, 420.238305)
    assert (s["ln_ppl_ratio"].value, s["ln_ppl_ratio"].err) == (-0.001798, 0.002258)
    assert (s["ppl_ratio"].value, s["ppl_ratio"].err) == (0.998203, 0.002254)


def test_perplexity_noisier_variant_has_larger_kld():
    assert perplexity.parse(text("ppl-kl-p5.txt"))["kld"].value == 0.013269 > perplexity.parse(text("ppl-kl-p1.txt"))["kld"].value


def test_perplexity_base_run():
    s = perplexity.parse(text("ppl-base.txt"))
    assert (s["ppl"].value, s["ppl"].err) == (420.2390, 42.54139)
    assert "kld" not in s


@pytest.mark.parametrize("nan", ["nan", "-nan", "NaN"])
def test_perplexity_nan_kld_is_parsed_not_skipped(nan):
    raw = text("ppl-kl-p1.txt").replace("Mean    KLD:   0.000579 ±   0.000015", f"Mean    KLD:   {nan} ±   {nan}")
    s = perplexity.parse(raw)
    assert math.isnan(s["kld"].value) and not perplexity.is_finite(s, "kld")


def test_perplexity_missing_model_output_has_no_stats():
    assert perplexity.parse(text("ppl-missing-model.txt")) == {}


def test_perplexity_argv():
    assert perplexity.kl_argv("pp", "m.gguf", "b.kld", 128, 4, ["-t", "1"]) == ["pp", "-m", "m.gguf", "-c", "128", "--chunks", "4", "--kl-divergence-base", "b.kld", "--kl-divergence", "-t", "1"]
    assert "--kl-divergence" not in perplexity.base_argv("pp", "m", "t.txt", 128, 4, "b.kld", [])


# --------------------------------------------------------------------------- llama-completion


def test_completion_argv_forms():
    chat = completion.greedy_argv("lc", "m.gguf", "The capital of France is", 48, 1, "chat", ["-ngl", "99", "-fa", "on", "--temp", "0"])
    assert chat == ["lc", "-m", "m.gguf", "-ngl", "99", "-fa", "on", "--temp", "0", "-p", "The capital of France is", "-n", "48", "--seed", "1"]
    assert completion.greedy_argv("lc", "m", "p", 48, 1, "no-cnv", [])[-1] == "-no-cnv"
    assert completion.greedy_argv("lc", "m", "p", 48, 1, "chat", [], 4096)[:5] == ["lc", "-m", "m", "-c", "4096"]


def test_completion_captured_transcripts():
    for form in ("chat", "no-cnv"):
        out = (G / f"completion-{form}.stdout").read_bytes()
        assert out and hashlib.md5(out).hexdigest() != completion.EMPTY_MD5
    assert hashlib.md5(b"").hexdigest() == completion.EMPTY_MD5


def test_first_divergence():
    ref = (G / "completion-no-cnv.stdout").read_bytes()
    got = ref[:30] + b"X" + ref[31:]
    msg = completion.first_divergence(got, ref)
    assert msg.startswith("first difference at byte 30")
    assert completion.first_divergence(ref[:20], ref).startswith("first difference at byte 20")
    assert completion.first_divergence(ref, ref) == "identical"


# --------------------------------------------------------------------------- the real series' counters


def test_series_counters_on_the_paged_and_nonpaged_paths():
    paged = completion.series_counters(text("completion-real-qwen35moe-paged.stderr"))
    nonpaged = completion.series_counters(text("completion-real-qwen35moe-nonpaged.stderr"))
    assert paged == {"get_block_table": 96, "set_inputs": 49, "hostproc": 49, "graph_reuse": [47, 49]}
    assert nonpaged == {"get_block_table": 0, "set_inputs": 49, "hostproc": 49, "graph_reuse": [47, 49]}
    assert completion.series_counters(text("completion-chat.stderr")) is None  # stock llama.cpp has none


def test_series_case_on_cuda0_and_its_counter_line():
    raw = text("tbo-cuda-h100-real-moe_swiglu_down.txt")
    assert tbo.verdict(tbo.parse(raw), "CUDA0", 0) == (PASS, "7/7", "")
    assert completion.series_counters(raw)["get_block_table"] == 0


def test_op_params_filter_argv():
    assert tbo.argv("tbo", "MOE_SWIGLU_DOWN", "CPU", "type_a=f32") == ["tbo", "-o", "MOE_SWIGLU_DOWN", "-b", "CPU", "-p", "type_a=f32"]
    assert tbo.argv("tbo", "ADD", "CUDA0") == ["tbo", "-o", "ADD", "-b", "CUDA0"]
