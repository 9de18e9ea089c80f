"""The drift canary in a real serving sweep: paged vs stock llama-server on the tiny model, four
blocks; the probe runs before every arm, summary.json keeps its samples and what it flagged, the
report says it, and its cost per block is measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ports import free_port
from tests.conftest import run_parity

pytestmark = pytest.mark.slow


def test_the_canary_samples_every_arm_and_the_report_says_what_it_flagged(tmp_path, engine_bins, tiny_model):
    port = free_port()
    shape = {"port": port, "npl": [1], "ptok": 32, "gen": 16, "parallel": 1, "ctx": 1024, "model": "tiny", "min_window_s": 0,
             "warmup": {"requests": 1, "gen": 4}, "settle_s": 0, "repeat": 4, "output_parity": {"enabled": False}}  # fmt: skip
    prof = tmp_path / "profile.yaml"
    prof.write_text(f"extends: smoke\nlock: {{dir: {tmp_path}/lock, poll_s: 0.5, timeout_s: 60}}\nserving: {json.dumps(shape)}\n")
    r = run_parity("--artifacts", str(tmp_path / "runs"), "snapshot", "--profile", str(prof), "--engines", "paged,stock", "--no-gates", "--json", timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    run = Path(json.loads(r.stdout)["run_dir"])
    c = json.loads((run / "summary.json").read_text())["canary"]
    assert c["policy"] == "flag" and len(c["samples"]) == 8  # 4 blocks x 2 arms
    assert {(s["block"], s["engine"]) for s in c["samples"]} == {(b, e) for b in range(4) for e in ("paged", "stock")}
    assert c["median_ms"] > 0 and c["median_stretch"] >= 0.99 and c["threshold_pct"] >= 15.0 and c["overhead_ms_per_block"] > 0
    assert set(c["blocks_flagged"]) <= set(range(4))
    assert "drift canary: probe " in r.stderr and "wall/CPU" in r.stderr
    rep = run_parity("--artifacts", str(tmp_path / "runs"), "report", str(run), "--profile", str(prof), "--out-dir", str(tmp_path / "rep"), "--json")
    assert rep.returncode == 0, rep.stderr
    text = Path(json.loads(rep.stdout)["report"]).read_text()
    assert "## Drift canary" in text and "wall/CPU" in text
