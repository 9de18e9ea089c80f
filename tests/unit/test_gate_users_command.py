"""The md5 gate runs the users' command: paged-inference-gates.sh's run_completion_gate
(`llama-completion -m M -ngl 99 -fa on -c 4096 --temp 0 --seed 1 -n 48 -p ...` under
LLAMA_KV_PAGED=1 LLAMA_MOE_FORCE_GRAPHS=1 GGML_NO_BACKTRACE=1).  No GB10 here: a
recording llama-completion stands in for the binary, and both harnesses call it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import needs_shared
from parity.config import load_profile

REPO = Path(__file__).resolve().parents[2]
USERS_GATES = REPO.parent / "shared" / "localai-paged" / "paged-inference-gates.sh"
# their command as their script has it (used when ../shared is not there)
USERS_ARGV = ["-m", "{model}", "-ngl", "99", "-fa", "on", "-c", "4096", "--temp", "0", "--seed", "1", "-n", "48", "-p", "The capital of France is"]
USERS_ENV = {"LLAMA_KV_PAGED": "1", "LLAMA_MOE_FORCE_GRAPHS": "1", "GGML_NO_BACKTRACE": "1"}
RECORDER = """#!/bin/sh
python3 - "$@" <<'PY'
import json, os, sys
keep = {k: v for k, v in os.environ.items() if k.startswith(("LLAMA_", "GGML_"))}
with open(os.environ["RECORD"], "a") as f:
    f.write(json.dumps({"argv": sys.argv[1:], "env": keep}) + "\\n")
PY
printf 'The capital of France is Paris.\\n\\n'
"""


def pairs(argv: list[str]) -> list[tuple[str, str]]:
    """llama.cpp's options as (flag, value), order aside (its parser does not care)."""
    assert len(argv) % 2 == 0, argv
    return sorted(zip(argv[::2], argv[1::2]))


@pytest.fixture
def recorder(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "llama-completion"
    exe.write_text(RECORDER)
    exe.chmod(0o755)
    record = tmp_path / "record.jsonl"
    monkeypatch.setenv("RECORD", str(record))
    for k in USERS_ENV:
        monkeypatch.delenv(k, raising=False)
    model = tmp_path / "q36-35b-a3b-nvfp4.gguf"
    model.write_bytes(b"GGUF")
    return bin_dir, record, model


def parity_call(tmp_path, bin_dir, model) -> dict:
    from parity.context import Run
    from parity.gates.base import gate_inputs
    from parity.gates.md5 import md5_gate
    from parity.runners.local import LocalRunner
    from parity.ui import Output

    prof = load_profile("gb10-qwen36")
    prof.engines["paged"].bin_dir = str(bin_dir)
    prof.models["moe"].path = str(model)
    check = md5_gate(gate_inputs(prof), Run(None, Output(json_mode=True), LocalRunner()), "moe", "paged")  # no run dir
    assert check.got != "-", check.detail  # it ran and produced an md5 (the argv is what is under test)
    return check.data


def test_parity_gate_argv_and_env_are_the_users(recorder, tmp_path):
    bin_dir, record, model = recorder
    data = parity_call(tmp_path, bin_dir, model)
    (call,) = [json.loads(x) for x in record.read_text().splitlines()]
    users = [a.format(model=model) for a in USERS_ARGV]
    assert pairs(call["argv"]) == pairs(users)
    assert call["env"] == USERS_ENV
    assert data["argv"][1:] == call["argv"]


@needs_shared("localai-paged/paged-inference-gates.sh")
def test_same_call_as_their_run_completion_gate(recorder, tmp_path):
    """Their own function, cut from their script, runs the recorder; parity must make the same call."""
    bin_dir, record, model = recorder
    art = tmp_path / "art"
    art.mkdir()
    script = f"set -euo pipefail; source <(sed -n '/^run_completion_gate()/,/^}}/p' {USERS_GATES}); run_completion_gate moe {model} any || true"
    env = {**os.environ, "BIN": str(bin_dir), "ART": str(art), "EXTRA_ENV": ""}
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert (art / "moe.md5").is_file(), r.stderr
    parity_call(tmp_path, bin_dir, model)
    theirs, ours = [json.loads(x) for x in record.read_text().splitlines()]
    assert pairs(ours["argv"]) == pairs(theirs["argv"]) and ours["env"] == theirs["env"]
    assert ("-c", "4096") in pairs(theirs["argv"])  # what parity used to drop
