"""The servers' own logs read for real: a CPU sweep of the smoke builds (paged = demo series,
stock) with trace envs on paged's env, through `parity snapshot` -- summary.json's banner row
says "not applicable" with its reason (a CPU build: the real system_info line's backends), never
a pass, the run stays valid, and each trace env set is summarized per arm, with the note that the
build printed no line of it; the report renders both sections."""

from __future__ import annotations

import json
from pathlib import Path

from ports import free_port


def test_a_cpu_sweep_reads_its_servers_logs(parity_cli, engine_bins, tiny_model, tmp_path):
    shape = {
        "port": free_port(),
        "npl": [2],
        "ptok": 16,
        "gen": 8,
        "parallel": 2,
        "ctx": 512,
        "model": "tiny",
        "min_window_s": 0,
        "min_requests": 1,
        "warmup": {"requests": 0, "gen": 4},
        "settle_s": 0,
        "repeat": 1,
        "output_parity": {"enabled": False},
        "engines": ["paged", "stock"],
    }
    prof = tmp_path / "p.yaml"
    prof.write_text(
        "extends: smoke\n"
        f"lock: {{dir: {tmp_path}/lock, poll_s: 0.5, timeout_s: 60}}\n"
        f"serving: {json.dumps(shape)}\n"
        "engines: {paged: {env: {LLAMA_SERVING_TRACE: '1', LLAMA_MOE_MMQ_SHAPE_TRACE: '0', "
        "LLAMA_MUL_MAT_ROUTE_TRACE: '64'}}}\n"
    )
    env = {"PARITY_ARTIFACTS": str(tmp_path / "runs"), "PARITY_NO_NVML": "1"}
    r = parity_cli("snapshot", "-p", str(prof), "--no-gates", "--json", env=env, timeout=600)
    assert r.returncode in (0, 6), r.stderr  # 6: a point the noisy box could not time; the logs are read either way
    run = Path(json.loads(r.stdout)["run_dir"])
    doc = json.loads((run / "summary.json").read_text())
    b = doc["banner"]
    assert b["status"] == "not applicable" and [row["status"] for row in b["rows"]] == ["not applicable"] * 2
    assert (
        b["rows"][0]["why"]
        == "a CPU build (cuda_archs unset): llama.cpp prints no CUDA banner (its system_info backends: CPU)"
    )
    assert b["rows"][0]["system_info"].startswith("CPU : ")  # the real server's line
    assert "kernel_paths" not in doc
    (t,) = doc["traces"]  # stock set none and prints no [L5INSTR]: no entry
    assert (t["engine"], t["repeat"], t["points"]) == ("paged", 0, [2])
    assert [(x["env"], x["lines"], x["verified"]) for x in t["traces"]] == [
        ("LLAMA_MUL_MAT_ROUTE_TRACE", 0, False),
        ("LLAMA_SERVING_TRACE", 0, True),
    ]
    assert all(
        "was set, but the log holds no line of it" in x["note"] for x in t["traces"]
    )  # the demo series prints neither
    assert t["series_counters"] is None and t["graph_reuse"] is None
    out = tmp_path / "reports"
    rep = parity_cli("report", str(run), "--out-dir", str(out), "--no-plots", env=env)
    assert rep.returncode in (0, 3, 5), rep.stderr
    (md,) = out.glob("*-phase*.md")
    text = md.read_text()
    assert "## Runtime banner and kernel path" in text and "Overall: **not applicable**" in text
    assert "| paged r0 | LLAMA_SERVING_TRACE=1 | 0 | - | yes |" in text


def test_a_bench_ab_reads_each_blocks_log(parity_cli, engine_bins, tiny_model, tmp_path):
    """llama-batched-bench blocks of the real smoke builds: bench.json carries, per arm and block,
    the trace env set on paged's env (the demo series prints none of it: said so)."""
    prof = tmp_path / "p.yaml"
    prof.write_text(
        f"extends: smoke\nlock: {{dir: {tmp_path}/lock}}\nengines: {{paged: {{env: {{LLAMA_QUANT_TRACE: '8'}}}}}}\n"
    )
    env = {"PARITY_ARTIFACTS": str(tmp_path / "runs"), "PARITY_NO_NVML": "1"}
    r = parity_cli(
        "bench", "-p", str(prof), "--engines", "paged,stock", "--repeat", "2", "--json", env=env, timeout=600
    )
    assert r.returncode == 0, r.stderr
    run = Path(json.loads(r.stdout)["run_dir"])
    doc = json.loads((run / "bench.json").read_text())
    assert [(t["arm"], t["block"], t["log"]) for t in doc["traces"]] == [
        ("paged", 0, "bench-paged-b0.log"),
        ("paged", 1, "bench-paged-b1.log"),
    ]
    (tr,) = doc["traces"][0]["traces"]
    assert (tr["env"], tr["value"], tr["lines"], tr["verified"]) == ("LLAMA_QUANT_TRACE", "8", 0, True)
    assert "patch 0052" in tr["source"] and "was set, but the log holds no line of it" in tr["note"]
