"""`parity bench --engines A,B` for real on the smoke engines (paged, stock): blocks of the real
llama-batched-bench, paired entries in bench.json, the A/A of one build, and the report."""

from __future__ import annotations

import json
from pathlib import Path


def _profile(tmp_path: Path) -> Path:
    prof = tmp_path / "p.yaml"
    prof.write_text(f"extends: smoke\nlock: {{dir: {tmp_path}/lock, poll_s: 0.5}}\n")
    return prof


def test_parity_bench_ab_real(parity_cli, engine_bins, tiny_model, tmp_path):
    prof = _profile(tmp_path)
    r = parity_cli("--artifacts", str(tmp_path / "runs"), "bench", "--profile", str(prof), "--model", "tiny", "--engines", "paged,stock",
                   "--repeat", "2", "--npp", "32", "--ntg", "8", "--npl", "1,2", "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    run = Path(doc["run_dir"])
    bench = json.loads((run / "bench.json").read_text())
    assert bench["reference"] == "stock" and bench["engines"] == ["paged", "stock"] and bench["blocks"] == 2
    assert bench["order"] == [["paged", "stock"], ["stock", "paged"]]  # abba: reversed every other block
    assert bench["stop"]["rule"] == "fixed"
    assert len(bench["rows"]) == 2 * 2 * 2 and all(x["s_tg"] > 0 for x in bench["rows"])
    s_tg = [p for p in bench["paired"] if p["metric"] == "s_tg"]
    assert [(p["engine"], p["reference"], p["b"], p["n_blocks"]) for p in s_tg] == [("paged", "stock", 1, 2), ("paged", "stock", 2, 2)]
    for p in s_tg:  # the ratio is the geometric mean of the recorded blocks' B/A
        ratios = [next(x["s_tg"] for x in bench["rows"] if x["engine"] == "paged" and x["repeat"] == k and x["b"] == p["b"]) /
                  next(x["s_tg"] for x in bench["rows"] if x["engine"] == "stock" and x["repeat"] == k and x["b"] == p["b"]) for k in (0, 1)]  # fmt: skip
        assert abs(p["ratio"] - (ratios[0] * ratios[1]) ** 0.5) < 1e-5 and p["low"] <= p["ratio"] <= p["high"]
        assert p["outcome"] in ("improved", "regressed", "equivalent", "inconclusive") and p["users_rule"]["verdict"]
    assert {f.name for f in run.glob("bench-*.log")} == {f"bench-{e}-b{k}.log" for e in ("paged", "stock") for k in (0, 1)}
    assert (run / "hardware.txt").is_file() and set(json.loads((run / "builds.json").read_text())) >= {"paged", "stock"}
    tsv = (run / "bench_ab.tsv").read_text().splitlines()
    assert tsv[0].startswith("kind\tengine") and sum(1 for line in tsv if line.startswith("paired\t")) == len(bench["paired"])
    # the report renders the paired table and the stop rule
    r = parity_cli("--artifacts", str(tmp_path / "runs"), "report", str(run), "--profile", str(prof), "--out-dir", str(tmp_path / "reports"), "--no-plots", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    md = Path(json.loads(r.stdout)["report"]).read_text()
    assert "paged/stock [low, high]" in md and "Stop rule: fixed: 2 blocks as asked" in md


def test_parity_bench_aa_real(parity_cli, engine_bins, tiny_model, tmp_path):
    prof = _profile(tmp_path)
    r = parity_cli("--artifacts", str(tmp_path / "runs"), "bench", "--profile", str(prof), "--model", "tiny", "--engines", "stock,stock", "--npp", "32", "--ntg", "8", "--npl", "1")
    assert r.returncode == 2 and "--aa" in r.stderr
    r = parity_cli("--artifacts", str(tmp_path / "runs"), "bench", "--profile", str(prof), "--model", "tiny", "--aa", "--engines", "stock",
                   "--repeat", "2", "--npp", "32", "--ntg", "8", "--npl", "1", "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    bench = json.loads((Path(json.loads(r.stdout)["run_dir"]) / "bench.json").read_text())
    assert bench["aa"] and bench["engines"] == ["stock", "stock#2"] and bench["reference"] == "stock"
    assert {a["engine"] for a in bench["arms"]} == {"stock"} and bench["order"] == [["stock", "stock#2"], ["stock#2", "stock"]]
    assert [(p["engine"], p["metric"]) for p in bench["paired"]] == [("stock#2", "s_tg"), ("stock#2", "s_pp"), ("stock#2", "s")]
    assert all(p["n_blocks"] == 2 for p in bench["paired"])
