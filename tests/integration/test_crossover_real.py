"""Crossover for real (parity.serving.crossover): two llama-server builds (paged demo series, stock)
on the small model, a 2-block snapshot with --gpus 0,1.  The CPU builds ignore CUDA_VISIBLE_DEVICES,
which is what lets this box run it: what is held is the orchestration -- both servers up and their
points overlapping in each block, the GPU per block swapped in the rows, the arms, the servers'
recorded env and summary.json's placement, each GPU's arm on its own cores (or, on a box too small to
split, neither pinned and why), the lock record naming the GPUs, and paired ratios over the two
blocks; a Ctrl-C while both arms stream stops both servers and frees the lock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from parity.config import load_profile
from parity.ports import port_free
from parity.runners.local import LocalRunner
from parity.serving import crossover
from ports import free_port
from tests.conftest import REPO
from tests.integration.test_snapshot import interrupt, servers_on


def span(path: Path) -> tuple[float, float]:
    """[first send, last token] of a point's request records (perf_counter, one process: comparable)."""
    recs = json.loads(path.read_text())
    return min(r["send"] for r in recs), max(r["token_times"][-1] for r in recs)


def test_a_two_block_crossover_runs_both_arms_at_once_and_swaps_gpus(parity_cli, engine_bins, tmp_path):
    port = free_port()
    while not port_free(port + 1):  # the second arm's server listens on port + 1
        port = free_port()
    # ~0.7 s a stream at gen 384 on the small model (tests/integration/test_snapshot.py): points long enough to overlap
    shape = {"port": port, "npl": [2], "ptok": 32, "parallel": 2, "ctx": 2048, "model": "small", "min_window_s": 0, "min_requests": 1,
             "warmup": {"requests": 1, "gen": 4}, "settle_s": 0, "output_parity": {"enabled": False}}
    prof = tmp_path / "profile.yaml"
    prof.write_text(f"extends: smoke\nlock: {{dir: {tmp_path}/lock, poll_s: 0.5, timeout_s: 60}}\nserving: {json.dumps(shape)}\n")
    r = parity_cli("--artifacts", str(tmp_path / "runs"), "snapshot", "--profile", str(prof), "--engines", "paged,stock", "--gpus", "0,1",
                   "--repeat", "2", "--gen", "384", "--no-gates", "--json", timeout=900)  # --gen: calibration off, block 0 counts
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    run = Path(doc["run_dir"])
    summary = json.loads((run / "summary.json").read_text())

    assert summary["placement"] == [{"block": 0, "paged": 0, "stock": 1}, {"block": 1, "paged": 1, "stock": 0}]
    rows = {(row["engine"], row["repeat"]): row for row in summary["rows"]}
    assert {k: row["gpu"] for k, row in rows.items()} == {("paged", 0): 0, ("stock", 0): 1, ("paged", 1): 1, ("stock", 1): 0}
    assert {(a["engine"], a["repeat"]): (a["gpu"], a["port"]) for a in summary["arms"]} == {
        ("paged", 0): (0, port), ("stock", 0): (1, port + 1), ("paged", 1): (1, port), ("stock", 1): (0, port + 1)}
    shares = crossover.cpu_shares(load_profile(str(prof)).serving.telemetry, LocalRunner(), [0, 1])  # this box's cores
    assert {(a["engine"], a["repeat"]): a["cpus"] for a in summary["arms"]} == {
        (e, k): crossover.cores(shares[gpu]) for (e, k), gpu in {k: row["gpu"] for k, row in rows.items()}.items()}
    for (engine, k), row in rows.items():
        srv = json.loads((run / f"servers/{engine}-r{k}.json").read_text())
        assert srv["env"]["CUDA_VISIBLE_DEVICES"] == str(row["gpu"]) and srv["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert srv["argv"][srv["argv"].index("--port") + 1] == str(port if engine == "paged" else port + 1)
        share = shares[row["gpu"]]
        if share["applied"]:  # the server under its GPU's cores, the client's thread on its own
            assert srv["argv"][:3] == ["taskset", "-c", share["server_cpus"]]
            tel = row["telemetry"]
            assert (tel["server_cpus"], tel["client_cpus"]) == (share["server_cpus"], share["client_cpus"])
        else:  # too few cores to split: neither arm pinned (not both on the same cores)
            assert srv["argv"][0] != "taskset" and srv["affinity"] == share
    for k in (0, 1):  # the two arms' points ran at the same time
        (a0, a1), (b0, b1) = span(run / f"requests/paged-r{k}-n2.json"), span(run / f"requests/stock-r{k}-n2.json")
        assert max(a0, b0) < min(a1, b1), f"block {k}: paged {a0:.2f}-{a1:.2f}, stock {b0:.2f}-{b1:.2f} do not overlap"
    assert "gpus=0,1" in json.loads((run / "lock.json").read_text())["owner"]
    paired = [p for p in summary["paired"] if p["metric"] == "decode_agg_tps"]
    assert paired and paired[0]["engine"] == "paged" and paired[0]["n_blocks"] == 2 and paired[0]["ratio"] > 0


def test_sigint_mid_crossover_stops_both_servers_and_frees_the_lock(engine_bins, tmp_path):
    port = free_port()
    while not port_free(port + 1):
        port = free_port()
    # a long generation: the interrupt lands while both arms stream (the small model's slots hold 2048 tokens)
    shape = {"port": port, "npl": [2], "ptok": 32, "gen": 1900, "parallel": 2, "ctx": 4096, "model": "small", "min_window_s": 0,
             "min_requests": 1, "warmup": {"requests": 0}, "settle_s": 0, "output_parity": {"enabled": False}}
    prof = tmp_path / "profile.yaml"
    prof.write_text(f"extends: smoke\nlock: {{dir: {tmp_path}/lock, poll_s: 0.5, timeout_s: 60}}\nserving: {json.dumps(shape)}\n")
    runs = tmp_path / "runs"
    p = subprocess.Popen([sys.executable, "-m", "parity", "--artifacts", str(runs), "snapshot", "--profile", str(prof), "--engines", "paged,stock",
                          "--gpus", "0,1", "--gen", "1900", "--no-gates"], cwd=REPO, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        logs = []
        while time.monotonic() < deadline and len(logs) < 2:
            logs = [f for e in ("paged", "stock") for f in runs.glob(f"*/servers/{e}-r0.log")]
            time.sleep(0.2)
        while time.monotonic() < deadline and not all("launch_slot_" in f.read_text(errors="replace") for f in logs):
            time.sleep(0.1)  # both arms' N=2 points are being served
        assert servers_on(port) and servers_on(port + 1), "both servers should be up at once"
        out = interrupt(p)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, out.decode(errors="replace")[-2000:]
    assert servers_on(port) == [] and servers_on(port + 1) == []
    run = next(runs.glob("*snapshot*"))
    assert json.loads((run / "manifest.json").read_text())["status"] == "interrupted"
    owner = tmp_path / "lock" / "owner"
    assert not owner.exists() or owner.read_text().startswith("FREE")
