"""A phase report rendered from a real, gated smoke snapshot (real llama-server,
real gates), then compared with itself: green gates are accepted and a run
cannot beat its own noise."""

import json
import re
from pathlib import Path

import pytest

SECTIONS = ["Summary", "Hardware", "Provenance", "Gates (pre / post)", "Results (medians over repeats)", "Ratios vs the reference engine (stock)", "Paired verdicts (same session, per block)",
            "Validity (every point, with its measurement windows)", "Server-side reconciliation", "Drift canary", "Telemetry", "TTFT anatomy",
            "Cross-engine output parity", "Runtime banner and kernel path", "Efficiency (% of the memory-bandwidth roofline)", "Batched-bench", "A/B comparison", "Profile buckets", "Plots", "Verdict", "Metric definitions", "Reproduce"]


@pytest.mark.slow
def test_report_from_a_real_smoke_snapshot(engine_bins, tiny_model, tmp_path, parity_cli):
    arts = tmp_path / "runs"
    # the small model, long enough to time.  min_window_s 0: this test is about the report; on a starved
    # 2-core box a stream can arrive in one burst (seen in CI: 127 tokens in 4 ms after a 251 ms first token),
    # which the window rule rightly marks invalid and test_adaptive / test_workloads_real test.
    from tests.integration.test_snapshot import free_port

    prof = tmp_path / "p.yaml"  # its own lock and port: never waits on another suite's smoke run
    prof.write_text(f"extends: smoke\nlock: {{dir: {tmp_path}/lock, poll_s: 0.5}}\nserving: {{port: {free_port()}, min_window_s: 0, warmup: {{requests: 2, gen: 4}}, settle_s: 0}}\n")
    snap = parity_cli("--artifacts", str(arts), "snapshot", "-p", str(prof), "--engines", "paged,stock", "--model", "small", "--npl", "1,2", "--ptok", "16", "--gen", "128", "--repeat", "2", "--json", timeout=900)
    assert snap.returncode == 0, snap.stderr[-3000:]
    run = Path(json.loads(snap.stdout)["run_dir"])
    for name in ("manifest.json", "hardware.json", "gates.json", "gate_summary.tsv", "summary.json", "builds.json"):
        assert (run / name).is_file(), name

    out = tmp_path / "reports"
    rep = parity_cli("report", str(run), "--out-dir", str(out), "--title", "real smoke", "--json")
    assert rep.returncode == 0, rep.stderr
    doc = json.loads(rep.stdout)
    md = Path(doc["report"])
    text = md.read_text()
    assert re.findall(r"^## (.+)$", text, re.M) == SECTIONS
    assert doc["verdict"] == "measurement-only" and doc["phase"] == 1
    assert "| pre | md5 tiny/paged |" in text and "| post | op RMS_NORM [CPU] |" in text
    assert re.search(r"^\| paged \| 2 \| 2 \| \d", text, re.M)  # medians over 2 repeats
    pngs = [p for p in map(Path, doc["plots"])]
    assert {p.name for p in pngs} == {"decode_tps_vs_n.png", "ratio_vs_n.png", "paired_blocks.png"}
    summary = json.loads((run / "summary.json").read_text())
    assert len(summary["paired"]) == 2 * 4 and all(p["n_blocks"] == 2 for p in summary["paired"])  # N=1,2 x stats.metrics, 2 blocks each
    assert [b["order"] for b in summary["blocks"]] == [["paged", "stock"], ["stock", "paged"]]  # abba, the default
    assert (run / "paired.tsv").read_text().count("\n") == 1 + 8 and "Source: recorded in summary.json." in text
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        p = md.parent / target
        assert p.is_file() and p.stat().st_size > 0, target
    assert (out / "BENCHMARK.md").read_text().count("real smoke") == 1

    same = parity_cli("compare", str(run), str(run), "--json", "--fail-on-regression")
    assert same.returncode == 0, same.stderr
    cmp = json.loads(same.stdout)
    assert not cmp["forced"] and cmp["counts"]["improved"] == cmp["counts"]["regressed"] == 0
    assert {r["delta_pct"] for r in cmp["rows"]} == {0.0}
    assert {r["unpaired"]["ratio"] for r in cmp["rows"]} == {1.0} and cmp["sessions"]  # same engines: each session's paired ratio, unchanged
    assert all(s["change"]["ratio"] == 1.0 for s in cmp["sessions"])
