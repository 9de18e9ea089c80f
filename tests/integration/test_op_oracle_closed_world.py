"""Closed-world op-oracle verdicts around the REAL test-backend-ops (the smoke paged build):
wrapper scripts run the real binary and drop, truncate or alter its output, and exit 0.
Nothing but a seen pass (the backend block, its N/N summary, as many OK cases) is green,
neither for one check, nor for a gated phase, nor for `parity gate` (issue 17, case 1)."""

from __future__ import annotations

import hashlib
import json
import stat
from pathlib import Path

import pytest
from gate_helpers import make_ctx, values, write_profile

from parity.errors import GateFailed
from parity.gates.checks import ERROR, FAIL, PASS
from parity.gates.oracle import op_gate
from parity.gates.prepost import GateSpec, run_phase

pytestmark = pytest.mark.slow

DATA = Path(__file__).resolve().parents[1] / "data" / "gates"
TRANSCRIPT = DATA / "completion-no-cnv.stdout"  # a complete real llama-completion transcript

# each body runs the real binary ("$REAL" "$@"); all of them exit 0
WRAPPERS = {
    "real": 'exec "$REAL" "$@"',
    "silent": '"$REAL" "$@" >/dev/null 2>&1; exit 0',
    # `805/806 tests passed` and `Backend CPU: FAIL` without the `Backend 1/1: CPU` header
    "headerless": (
        '"$REAL" "$@" 2>&1 | awk \'/^Backend [0-9]+\\/[0-9]+: /{next} '
        '/^  [0-9]+\\/[0-9]+ tests passed/{split($1,a,"/"); print "  " a[1]-1 "/" a[2] " tests passed"; next} '
        '{sub(/Backend CPU: .*OK.*/, "Backend CPU: FAIL"); print}\'; exit 0'
    ),
    "truncated": '"$REAL" "$@" 2>&1 | head -n 8; exit 0',
}


@pytest.fixture(scope="module")
def real_tbo() -> Path:
    """test-backend-ops of the smoke profile's paged build (built once, cached)."""
    from parity.config import load_profile
    from parity.llamacpp.build import ensure_built
    from parity.engines.bound import bind
    from parity.runners.local import LocalRunner
    from parity.ui import Output

    res = ensure_built(bind(load_profile("smoke"), "paged"), LocalRunner(), Output(json_mode=True))
    return Path(res.bin_dir) / "test-backend-ops"


def _profile(tmp_path: Path, real_tbo: Path, wrapper: str) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    tools = {
        "test-backend-ops": f'#!/bin/bash\nREAL="{real_tbo}"\n{WRAPPERS[wrapper]}\n',
        "llama-completion": f"#!/bin/bash\ncat {TRANSCRIPT}\n",  # a green md5 check beside the op check
    }
    for name, body in tools.items():
        f = bin_dir / name
        f.write_text(body)
        f.chmod(f.stat().st_mode | stat.S_IXUSR)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF fake model: the fake llama-completion never reads it")
    md5 = hashlib.md5(TRANSCRIPT.read_bytes()).hexdigest()
    return write_profile(
        tmp_path / "closed-world.yaml",
        f"""extends: smoke
models:
  m: {{path: {model}, canonical: [{{md5: {md5}, path: paged, form: no-cnv}}]}}
engines:
  fake: {{kind: llama, bin_dir: {bin_dir}, paths: {{paged: {{}}}}, default_path: paged}}
gates:
  engine: fake
  reference_engine: null
  models: [m]
  paths: [paged]
  ops: [RMS_NORM]
  op_backend: CPU
  op_timeout_s: 300
  completion_retries: 1
lock: {{dir: {tmp_path / 'lock'}, poll_s: 0.2, preflight: false}}
""",
    )


def test_real_binary_through_the_plain_wrapper_passes(real_tbo, tmp_path):
    c = op_gate(*values(make_ctx(tmp_path, _profile(tmp_path, real_tbo, "real"))), "RMS_NORM")
    n = int(c.got.split("/")[1])
    assert c.status == PASS and n > 0 and c.got == f"{n}/{n}"


@pytest.mark.parametrize("wrapper,status,words", [
    ("silent", ERROR, "no 'Backend i/n: CPU' block"),
    ("headerless", FAIL, "Backend CPU: FAIL"),
    ("truncated", ERROR, "no 'N/N tests passed' summary"),
])
def test_op_check_without_evidence_of_a_pass_is_not_a_pass(real_tbo, tmp_path, wrapper, status, words):
    c = op_gate(*values(make_ctx(tmp_path, _profile(tmp_path, real_tbo, wrapper))), "RMS_NORM")
    assert c.attempts[0]["rc"] == 0  # the wrapper said all was well
    assert c.status == status and words in c.detail, c.detail


@pytest.mark.parametrize("wrapper", ["silent", "headerless"])
def test_gated_pre_phase_with_an_op_fault_is_red(real_tbo, tmp_path, wrapper):
    """The md5 check passes; the op oracle exits 0 without a pass: the pre-gate is red."""
    ctx = make_ctx(tmp_path, _profile(tmp_path, real_tbo, wrapper))
    with pytest.raises(GateFailed, match="pre-gate red"):
        run_phase(*values(ctx), "pre", GateSpec.from_profile(ctx.profile))
    pre = ctx.run.read_json("gates.json")["pre"]
    assert pre["status"] == FAIL and [c["status"] for c in pre["checks"]] == [PASS, ERROR if wrapper == "silent" else FAIL]


@pytest.mark.parametrize("wrapper", ["silent", "headerless"])
def test_parity_gate_with_an_op_fault_is_red_exit_3(real_tbo, tmp_path, parity_cli, wrapper):
    prof = _profile(tmp_path, real_tbo, wrapper)
    res = parity_cli("--artifacts", str(tmp_path / "runs"), "gate", "--profile", str(prof), "--json")
    assert res.returncode == 3, res.stderr
    doc = json.loads(res.stdout)
    assert doc["green"] is False and doc["status"] == FAIL
    (run,) = (tmp_path / "runs").iterdir()
    assert json.loads((run / "manifest.json").read_text())["valid"] is False
