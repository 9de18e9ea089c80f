"""A bisection probe judged by a gate kind of the registry (parity.bisect.probe over GATES),
without a bisection around it: the good endpoint's reference, then a probe's verdict, for the
oracle criterion around the REAL test-backend-ops (the smoke paged build, wrapped as in
test_op_oracle_closed_world) and for the md5 criterion on real captured transcripts."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from gate_helpers import make_ctx, values, write_profile

from parity.bisect import probe
from parity.bisect.search import BAD, GOOD, UNDECIDED
from parity.errors import InfraError
from parity.gates.checks import ERROR, FAIL, PASS
from tests.integration.test_op_oracle_closed_world import WRAPPERS  # each runs the real binary ("$REAL" "$@")

pytestmark = pytest.mark.slow

DATA = Path(__file__).resolve().parents[1] / "data" / "gates"


@pytest.fixture(scope="module")
def real_tbo() -> Path:
    from parity.config import load_profile
    from parity.llamacpp.build import ensure_built
    from parity.engines.bound import bind
    from parity.runners.local import LocalRunner
    from parity.ui import Output

    res = ensure_built(bind(load_profile("smoke"), "paged"), LocalRunner(), Output(json_mode=True))
    return Path(res.bin_dir) / "test-backend-ops"


def _engine(tmp_path: Path, name: str, tbo: str, transcript: str) -> str:
    """A bin dir whose test-backend-ops runs the real one through a wrapper and whose
    llama-completion replays a real transcript; its engine section."""
    bin_dir = tmp_path / f"bin-{name}"
    bin_dir.mkdir()
    for tool, body in (("test-backend-ops", tbo), ("llama-completion", f"cat {DATA / transcript}")):
        f = bin_dir / tool
        f.write_text(f"#!/bin/bash\n{body}\n")
        f.chmod(f.stat().st_mode | stat.S_IXUSR)
    return f"  {name}: {{kind: llama, bin_dir: {bin_dir}, paths: {{paged: {{}}}}, default_path: paged}}\n"


def ctx_with(tmp_path: Path, real_tbo: Path, engines: dict[str, tuple[str, str]]):
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF fake model: the fake llama-completion never reads it")
    sections = "".join(_engine(tmp_path, n, f'REAL="{real_tbo}"\n{WRAPPERS[w]}', t) for n, (w, t) in engines.items())
    prof = write_profile(tmp_path / "probe.yaml", f"""extends: smoke
models:
  m: {{path: {model}}}
engines:
{sections}gates:
  reference_engine: null
  op_backend: CPU
  op_timeout_s: 300
  completion_retries: 1
lock: {{dir: {tmp_path / 'lock'}, poll_s: 0.2, preflight: false}}
""")
    return make_ctx(tmp_path, prof)


def test_oracle_probe_bad_undecided_and_good(real_tbo, tmp_path):
    stdout = "completion-no-cnv.stdout"
    ctx = ctx_with(tmp_path, real_tbo, {"good": ("real", stdout), "bad": ("headerless", stdout), "mute": ("silent", stdout), "same": ("real", stdout)})
    judge = probe.Judge("oracle", ops=["RMS_NORM"], backend="CPU")
    inputs, run = values(ctx)
    ref = probe.Reference(inputs, run, "good", judge)
    assert ref.ops == {"RMS_NORM": PASS} and (ctx.run.path / "gates/reference-op-RMS_NORM-CPU-1.txt").is_file()
    verdict, words, ev = probe.judge(ref, inputs, "bad", "p1-")
    assert verdict == BAD and ev["RMS_NORM"]["status"] == FAIL and "Backend CPU: FAIL" in words
    verdict, words, ev = probe.judge(ref, inputs, "mute", "p2-")  # no evidence where the good endpoint passed: undecided
    assert verdict == UNDECIDED and ev["RMS_NORM"]["status"] == ERROR and ev["RMS_NORM"]["reference"] == PASS
    verdict, words, _ = probe.judge(ref, inputs, "same", "p3-")
    n = words.split()[1]
    assert verdict == GOOD and n.split("/")[0] == n.split("/")[1] != "0"


def test_md5_probe_against_the_good_endpoints_md5(real_tbo, tmp_path):
    ctx = ctx_with(tmp_path, real_tbo, {"good": ("real", "completion-no-cnv.stdout"), "moved": ("real", "completion-chat.stdout"), "same": ("real", "completion-no-cnv.stdout")})
    judge = probe.Judge("md5", model="m", path="paged")
    inputs, run = values(ctx)
    ref = probe.Reference(inputs, run, "good", judge)
    assert ref.md5 and ref.result() == f"md5 {ref.md5}" and (ctx.run.path / "gates/reference-md5-m-paged.out").read_bytes() == (DATA / "completion-no-cnv.stdout").read_bytes()
    verdict, words, ev = probe.judge(ref, inputs, "moved", "p1-")
    assert verdict == BAD and ev["status"] == FAIL and ev["expected"] == ref.md5 != ev["got"] and ev["detail"] == "md5 mismatch"
    assert probe.judge(ref, inputs, "same", "p2-")[:2] == (GOOD, f"md5 {ref.md5} = reference")


def test_a_good_endpoint_without_a_transcript_cannot_be_the_reference(real_tbo, tmp_path):
    ctx = ctx_with(tmp_path, real_tbo, {"good": ("real", "completion-no-cnv.stderr")})  # no final blank line: incomplete
    with pytest.raises(InfraError, match="the good endpoint cannot be gated: stdout incomplete"):
        probe.Reference(*values(ctx), "good", probe.Judge("md5", model="m", path="paged"))
