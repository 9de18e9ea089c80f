"""Fault injection: every way a gate run can go wrong yields a non-PASS check.

Faults a real binary cannot be made to produce on demand come from small fake
executables in a temp bin dir (engines.fake.bin_dir) that replay captured real
output (tests/data/gates/) with the fault applied."""

from __future__ import annotations

import hashlib
import stat
import time
from pathlib import Path

import pytest
from gate_helpers import make_ctx, values, write_profile

from parity.gates.checks import ERROR, FAIL, FLAKY, PASS, overall
from parity.gates.kl import kl_gate
from parity.gates.md5 import md5_gate
from parity.gates.oracle import op_gate

DATA = Path(__file__).resolve().parents[1] / "data" / "gates"
REAL = DATA / "completion-no-cnv.stdout"  # a complete real transcript
REAL_MD5 = hashlib.md5(REAL.read_bytes()).hexdigest()


def fake_ctx(tmp_path: Path, tools: dict[str, str], extra: str = ""):
    """A context whose gate engine runs the given shell scripts."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in tools.items():
        f = bin_dir / name
        f.write_text("#!/bin/bash\n" + body + "\n")
        f.chmod(f.stat().st_mode | stat.S_IXUSR)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF fake model: the fakes never read it")
    prof = write_profile(
        tmp_path / "fake.yaml",
        f"""extends: smoke
models:
  m: {{path: {model}}}
  ghost: {{path: {tmp_path / 'missing.gguf'}}}
engines:
  fake: {{kind: llama, bin_dir: {bin_dir}, paths: {{paged: {{}}}}, default_path: paged}}
gates:
  engine: fake
  reference_engine: null
  timeout_s: 2
  op_timeout_s: 2
  completion_retries: 1
  kl: {{reference: m, candidate: m, baseline: m, timeout_s: 5, min_same_top_p: 90}}
{extra}""",
    )
    return make_ctx(tmp_path, prof)


def md5_check(tmp_path, script: str, expect: str = REAL_MD5):
    ctx = fake_ctx(tmp_path, {"llama-completion": script})
    return md5_gate(*values(ctx), "m", "paged", expect=expect)


def test_fake_control_passes(tmp_path):
    """The harness itself: a fake that replays the real transcript passes (so the faults below can fail)."""
    c = md5_check(tmp_path, f"cat {REAL}")
    assert c.status == PASS and c.got == REAL_MD5


def test_empty_stdout_exit_0(tmp_path):
    c = md5_check(tmp_path, "exit 0", expect="d41d8cd98f00b204e9800998ecf8427e")
    assert c.status == ERROR and "empty stdout" in c.detail
    assert len(c.data["incomplete_attempts"]) == 1  # retried once, recorded


def test_truncated_stdout(tmp_path):
    c = md5_check(tmp_path, f"head -c 40 {REAL}")
    assert c.status == ERROR and "incomplete" in c.detail


def test_truncated_stdout_even_when_md5_matches(tmp_path):
    cut = hashlib.md5(REAL.read_bytes()[:40]).hexdigest()
    c = md5_check(tmp_path, f"head -c 40 {REAL}", expect=cut)
    assert c.status == ERROR


def test_nonzero_exit_with_the_right_output(tmp_path):
    c = md5_check(tmp_path, f"cat {REAL}; echo 'GGML_ASSERT failed' >&2; exit 1")
    assert c.status == ERROR and "exited 1" in c.detail and "GGML_ASSERT" in c.detail


def test_crash_by_signal(tmp_path):
    c = md5_check(tmp_path, f"cat {REAL}; kill -SEGV $$")
    assert c.status == ERROR


def test_timeout(tmp_path):
    t0 = time.monotonic()
    c = md5_check(tmp_path, f"cat {REAL}; sleep 30")
    assert c.status == ERROR and "timed out" in c.detail
    assert time.monotonic() - t0 < 30  # bounded: the process group was killed, not waited for its sleep 30


def test_wrong_output_is_a_fail(tmp_path):
    c = md5_check(tmp_path, f"cat {REAL} | tr a-z A-Z")
    assert c.status == FAIL and c.got != REAL_MD5


def test_missing_binary(tmp_path):
    ctx = fake_ctx(tmp_path, {})
    assert md5_gate(*values(ctx), "m", "paged", expect=REAL_MD5).status == ERROR
    op = op_gate(*values(ctx), "MUL_MAT", "CPU")
    assert op.status == ERROR and "not found" in op.detail
    assert kl_gate(*values(ctx)).status == ERROR


def test_missing_model(tmp_path):
    ctx = fake_ctx(tmp_path, {"llama-completion": f"cat {REAL}"})
    c = md5_gate(*values(ctx), "ghost", "paged", expect=REAL_MD5)
    assert c.status == ERROR and "not found" in c.detail
    k = kl_gate(*values(ctx), candidate="ghost")
    assert k.status == ERROR and "not found" in k.detail


def _one_failure(total_ok: str) -> str:
    """The real RMS_NORM -b CPU capture with one case failing (an 805/806-style result)."""
    lines = (DATA / "tbo-cpu-rms_norm.txt").read_text().splitlines()
    i = next(n for n, line in enumerate(lines) if line.startswith("  RMS_NORM("))
    lines[i] = lines[i].split("): ")[0] + "): [RMS_NORM] NMSE = 0.000123456 > 0.000000100 \x1b[1;31mFAIL\x1b[0m"
    return "\n".join(lines).replace("  51/51 tests passed", total_ok)


def test_op_failure_is_red_with_no_retry_by_default(tmp_path):
    """Zero tolerance: gates.op_retries defaults to 0, so one failing run is the verdict."""
    failing = tmp_path / "failing.txt"
    failing.write_text(_one_failure("  50/51 tests passed"))
    ctx = fake_ctx(tmp_path, {"test-backend-ops": f"cat {failing}; exit 1"})
    assert ctx.profile.gates.op_retries == 0
    c = op_gate(*values(ctx), "RMS_NORM", "CPU")
    assert c.status == FAIL and c.got == "50/51" and c.expected == "51/51" and len(c.attempts) == 1
    assert "RMS_NORM(type=f32,ne=[64,5,4,3],v=0,eps=0.000000,inplace=0)" in c.detail and "NMSE" in c.detail
    assert (ctx.run.path / c.attempts[0]["output"]).read_text().count("FAIL") >= 1


def test_op_failure_fails_after_an_asked_retry(tmp_path):
    failing = tmp_path / "failing.txt"
    failing.write_text(_one_failure("  50/51 tests passed"))
    ctx = fake_ctx(tmp_path, {"test-backend-ops": f"cat {failing}; exit 1"}, "  op_retries: 1\n")
    c = op_gate(*values(ctx), "RMS_NORM", "CPU")
    assert c.status == FAIL and c.got == "50/51" and c.expected == "51/51"
    assert [a["got"] for a in c.attempts] == ["50/51", "50/51"]
    for a in c.attempts:  # both attempts stay in the artifact
        assert (ctx.run.path / a["output"]).read_text().count("FAIL") >= 1


def test_op_pass_on_an_asked_retry_is_flaky_not_pass(tmp_path):
    failing = tmp_path / "failing.txt"
    failing.write_text(_one_failure("  50/51 tests passed"))
    flag = tmp_path / "ran-once"
    script = f"if [ -e {flag} ]; then cat {DATA / 'tbo-cpu-rms_norm.txt'}; else touch {flag}; cat {failing}; exit 1; fi"
    c = op_gate(*values(fake_ctx(tmp_path, {"test-backend-ops": script}, "  op_retries: 1\n")), "RMS_NORM", "CPU")
    assert c.status == FLAKY and c.got == "51/51"
    assert [a["status"] for a in c.attempts] == [FAIL, PASS] and c.detail.startswith("flaky: passed on attempt 2")
    assert overall([c]) == FAIL


def test_op_summary_without_cases_and_timeout(tmp_path):
    ctx = fake_ctx(tmp_path, {"test-backend-ops": "echo 'Testing 1 devices'; echo; echo 'Backend 1/1: CPU'; sleep 30"})
    c = op_gate(*values(ctx), "RMS_NORM", "CPU")
    assert c.status == ERROR and "timed out" in c.detail and len(c.attempts) == 1


PERPLEXITY = """
for a in "$@"; do
  if [ "$prev" = "--kl-divergence-base" ]; then logits="$a"; fi
  if [ "$a" = "--kl-divergence" ]; then kl=1; fi
  prev="$a"
done
if [ -z "$kl" ]; then printf 'logits' > "$logits"; cat {base}; exit 0; fi
{kl_body}
"""


def kl_ctx(tmp_path, monkeypatch, kl_body: str):
    from parity.gates import common, kl

    monkeypatch.setattr(kl, "cache_dir", lambda: tmp_path / "cache")
    monkeypatch.setattr(common, "cache_dir", lambda: tmp_path / "cache")
    script = PERPLEXITY.replace("{base}", str(DATA / "ppl-base.txt")).replace("{kl_body}", kl_body)
    return fake_ctx(tmp_path, {"llama-perplexity": script})


def test_kl_fake_control_passes(tmp_path, monkeypatch):
    ctx = kl_ctx(tmp_path, monkeypatch, f"cat {DATA / 'ppl-kl-p1.txt'}")
    assert kl_gate(*values(ctx)).status == PASS  # KLD equals the baseline's: inside the band


@pytest.mark.parametrize("nan", ["nan", "-nan"])
def test_kl_nan_kld(tmp_path, monkeypatch, nan):
    nan_txt = tmp_path / "nan.txt"
    nan_txt.write_text((DATA / "ppl-kl-p1.txt").read_text().replace("Mean    KLD:   0.000579 ±   0.000015", f"Mean    KLD:   {nan} ±   {nan}"))
    c = kl_gate(*values(kl_ctx(tmp_path, monkeypatch, f"cat {nan_txt}")))
    assert c.status == ERROR and "not a finite number" in c.detail


def test_kl_crash_and_missing_stats(tmp_path, monkeypatch):
    c = kl_gate(*values(kl_ctx(tmp_path, monkeypatch, "echo 'error: failed to load model' >&2; exit 1")))
    assert c.status == ERROR and "exit 1" in c.detail
    head = tmp_path / "head.txt"
    head.write_text("\n".join((DATA / "ppl-kl-p1.txt").read_text().splitlines()[:12]))
    c = kl_gate(*values(kl_ctx(tmp_path, monkeypatch, f"cat {head}")))  # exit 0 but the statistics never came
    assert c.status == ERROR and len(c.data["candidate"]["retried"]) == 3
    assert "gave no KLD (exit 0, 4 runs)" in c.detail


def test_kl_fewer_chunks_than_asked_is_an_error(tmp_path, monkeypatch):
    """llama-perplexity evaluates fewer chunks, silently, when the text tokenizes short: never a pass."""
    short = tmp_path / "short.txt"
    short.write_text((DATA / "ppl-kl-p1.txt").read_text().replace("computing over 4 chunks", "computing over 2 chunks"))
    c = kl_gate(*values(kl_ctx(tmp_path, monkeypatch, f"cat {short}")))
    assert c.status == ERROR and c.got == "2" and c.detail.startswith("llama-perplexity evaluated 2 of 4 chunks at ctx 128")


def test_kl_base_logits_failure(tmp_path, monkeypatch):
    from parity.gates import common, kl

    monkeypatch.setattr(kl, "cache_dir", lambda: tmp_path / "cache")
    monkeypatch.setattr(common, "cache_dir", lambda: tmp_path / "cache")
    ctx = fake_ctx(tmp_path, {"llama-perplexity": "exit 0"})  # exits 0 but writes no logits
    c = kl_gate(*values(ctx))
    assert c.status == ERROR and "reference logits" in c.detail
    assert not list((tmp_path / "cache" / "kl").glob("*.kld"))
