"""A capacity run whose server dies between two probes (the fake vLLM of tests/fakes: a crash
cannot be ordered from a real server on this box): the error names the engine, the signal and
the probe it waited for, not the client's reset connection, and capacity.json keeps what was
measured, marked incomplete.  The H200 llama-server that did this: tests/data/servers/README.md."""

from __future__ import annotations

import json

from ports import free_port
from tests.conftest import REPO

FAKE_BIN = REPO / "tests" / "fakes" / "bin"


def test_a_server_that_dies_between_probes_is_named_and_the_probes_kept(parity_cli, tmp_path):
    (tmp_path / "hf").mkdir()
    serving = {"port": free_port(), "npl": [1], "ptok": 32, "gen": 16, "parallel": 4, "ctx": 1024, "model": "tiny",
               "min_window_s": 0, "min_requests": 1, "warmup": {"requests": 2, "gen": 4}, "settle_s": 0, "repeat": 1,
               "output_parity": {"enabled": False}}  # fmt: skip
    prof = tmp_path / "profile.yaml"
    prof.write_text(
        "extends: smoke\n"
        f"lock: {{dir: {tmp_path}/lock, poll_s: 0.5, timeout_s: 60}}\n"
        f"serving: {json.dumps(serving)}\n"
        f"models: {{tiny: {{vllm_path: {tmp_path}/hf, served_name: tiny-hf}}}}\n"
        f"engines: {{vllm: {{kind: vllm, vllm_bin: {FAKE_BIN}/vllm, ready_timeout_s: 30, max_model_len: 1024}}}}\n"
    )
    # 24 completions: the server's 2 warm-ups, then the first bracket probe's 1 + 20 + 1; the next
    # request (the second probe's) finds it crashing, as a reset connection
    r = parity_cli("--artifacts", str(tmp_path / "runs"), "capacity", "--profile", str(prof), "--engines", "vllm",
                   "--slo", "itl_p90_ms=60,ttft_p90_ms=200", "--requests", "20", "--no-gates", "--json",
                   env={"FAKE_VLLM_SEGV_IDLE_AFTER": "24"}, timeout=300)  # fmt: skip
    assert r.returncode == 4, r.stderr[-2000:]
    last = r.stderr.strip().splitlines()[-1]
    assert "Traceback" not in r.stderr and "internal error" not in last
    assert "vllm server exited on signal 11 (SIGSEGV) during the probe at 2 (bracket, probe 1 on this server)" in last
    assert "servers/vllm-bracket.log" in last
    (run,) = (tmp_path / "runs").glob("*")
    assert json.loads((run / "manifest.json").read_text())["status"] == "failed"
    doc = json.loads((run / "capacity.json").read_text())
    assert doc["complete"] is False and doc["valid"] is False and "SIGSEGV" in doc["error"]
    assert [(p["engine"], p["load"], p["measured"]) for p in doc["probes"]] == [("vllm", 1.0, 20)]
