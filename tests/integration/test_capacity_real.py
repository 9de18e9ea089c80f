"""`parity capacity` for real, on CPU: llama-server (the smoke profile's stock build) against a
second engine of the same build, and vLLM-CPU against a second vLLM engine: the capacity ratio
reads no change (inside +-2 %, equivalent or inconclusive, never improved or regressed); every
engine of a block got the same token ids; each server started once per block and engine, in ABBA
order.  The dry run prints the plan and writes nothing; a bad option is one line, exit 2, no run
dir.

The objectives are ones the engines meet at a few clients on 2 cores: at 8 llama-server slots
(vLLM: 8 sequences) the time to first token climbs once clients queue past them."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from box_load import OtherWork

from tests.integration.test_workloads_real import (  # noqa: F401 (fixtures)
    smoke_engine,
    vllm_engine,
    vllm_profile,
    workload_profile,
)

# The limit that binds must lie where its percentile climbs steeply with the load, or a few % of noise
# moves the crossing by a client.  ITL p90 plateaus once the 8 slots are full (30-46 ms here: 30 ms read
# 1.086 [0.965, 1.223]), so ITL's limit sits well above it.  TTFT p90 is flat below the 8 slots and
# steep past them, where clients queue (2026-11-30, quiet: 82, 93, 99 ms at 6-8 clients, then 136, 190,
# 244, 293 ms at 9-12).  100 ms bound at ~7.3 clients, on the flat part (slope -1.3; per-block ratios
# 0.86-1.15; A/A 1.0528 .. 0.9682 over 9 runs, 4 outside +-2 %); 160 and 200 ms bind at 9.4 and 10.3
# clients on the knee (slope -2.7 .. -2.9; per-block ratios 0.98-1.03; A/A 1.0042, 0.9951, 0.9947,
# 1.0045).  200 ms stays past the knee on a box up to twice as slow.
SLO = "itl_p90_ms=100,ttft_p90_ms=200"
# vLLM runs 8 sequences at once; its TTFT p90 (quiet, 2026-11-30) read 7-12 ms at 1-8 clients, then 32, 46,
# 48, 60, 68, 80 ms at 9-14: 60 ms binds at ~12 clients on that climb (slope -1.9; per-block ratios
# 0.968-1.043).  200 ms bound at ~22 clients (slope -1.2, blocks 0.965-1.033), 100 ms at ~14 (one block
# 1.227).  Its blocks spread more than llama-server's (its scheduler, API server and our client share the
# two cores: paired probes' throughput differs 5.6 %, llama-server's 1.8 %), so blocks are added until the
# ratio's interval is +-2 % wide rather than a fixed six, and a probe is 200 requests: at 100, 16 blocks
# (13 min) read 0.9820 [0.9648, 0.9994], blocks 0.898-1.032; at 200, 10 blocks (10 min) read 1.0028
# [0.9900, 1.0159] equivalent, blocks 0.971-1.032 (quiet, 2026-11-30).
VLLM_SLO = "itl_p90_ms=60,ttft_p90_ms=60"
VLLM_UNTIL = ("--until-ci", "2", "--max-repeats", "16")
STOCK_TARGETS = ["llama-server", "llama-completion", "llama-batched-bench", "llama-perplexity", "test-backend-ops",
                 "llama-quantize"]


def capacity(parity_cli, tmp_path, *args, timeout=900):
    return parity_cli("--artifacts", str(tmp_path / "runs"), "capacity", *args, timeout=timeout)


@pytest.mark.quiet
@pytest.mark.slow
def test_llama_server_against_itself_reads_no_change(parity_cli, workload_profile, tmp_path):  # noqa: F811
    # stock_b: the stock build (the same build key: its targets too), a second engine name
    prof = workload_profile({}, engines={"stock_b": smoke_engine(targets=STOCK_TARGETS)}, settle_s=0.2)
    with OtherWork() as box:
        r = capacity(parity_cli, tmp_path, "--profile", str(prof), "--engines", "stock,stock_b", "--slo", SLO,
                     "--requests", "40", "--no-gates", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    # the reference: serving.reference_engine (stock)
    no_change(json.loads(r.stdout), "stock", "stock_b", "stock", ("itl_p90_ms", "ttft_p90_ms"), box=box)


@pytest.mark.quiet
@pytest.mark.slow
def test_vllm_against_itself_reads_no_change(parity_cli, workload_profile, tmp_path, vllm_engine):  # noqa: F811
    engine, models = vllm_engine
    prof = vllm_profile(workload_profile, tmp_path, models, {"vllm": engine(), "vllm_b": engine()}, {})
    with OtherWork() as box:
        r = capacity(parity_cli, tmp_path, "--profile", str(prof), "--engines", "vllm,vllm_b", "--slo", VLLM_SLO,
                     "--requests", "200", *VLLM_UNTIL, "--no-gates", "--json", timeout=2400)
    # beside another agent's servers its margins went non-monotone (0.12 at 8 clients, 2.30 at 9) and 5
    # of 6 blocks crossed nowhere: the run ends on that named problem (exit 6), never on a ratio
    if r.returncode == 6 and not box.quiet and "no capacity ratio with an interval" in r.stderr:
        warnings.warn(f"vLLM capacity A/A: no ratio; {box}")
        return
    assert r.returncode == 0, (r.stderr[-3000:], str(box))
    # the reference: the last engine (serving.reference_engine, stock, is not among them)
    no_change(json.loads(r.stdout), "vllm", "vllm_b", "vllm_b", ("itl_p90_ms", "ttft_p90_ms"), requests=200, box=box,
              most=16)


def no_change(doc: dict, a: str, b: str, reference: str, objectives: tuple, requests: int = 40,
              within_pct: float = 2.0, box: OtherWork | None = None, most: int | None = None) -> None:
    """An engine against itself (--engines a,b): no claim, the ratio inside +-within_pct %; what the
    run shows of itself.  box: the other work beside it; where the box was quiet, at least 3 of the
    blocks give a capacity (all of them alone), else at least the 2 an interval needs.  most: --until-ci's
    --max-repeats (6 blocks, at most `most`), else a fixed 6."""
    run = Path(doc["run_dir"])
    (ratio,) = doc["ratios"]
    n = doc["stop"]["blocks"]
    assert n == 6 if most is None else 6 <= n <= most, doc["stop"]
    other = b if reference == a else a
    # a block whose margin line does not cross inside its levels gives no capacity (a loaded box: 4 of 6)
    least = 3 if box is not None and box.quiet else 2
    assert (ratio["engine"], ratio["reference"]) == (other, reference) and least <= ratio["n_blocks"] <= n, str(box)
    if ratio["n_blocks"] < 3:
        warnings.warn(f"capacity A/A: {ratio['n_blocks']} usable blocks of {n}; {box}")
    assert ratio["outcome"] in ("equivalent", "inconclusive"), ratio  # never a claim
    assert ratio["low"] < ratio["ratio"] < ratio["high"], ratio
    # the acceptance, on a quiet box (SLO's comment: what it held at which limits)
    if box is not None and box.quiet:
        assert abs(ratio["ratio"] - 1) * 100 <= within_pct, (ratio, str(box))
    elif abs(ratio["ratio"] - 1) * 100 > within_pct:  # beside other work 1.125 [0.98, 1.29], 1.0406 [0.96, 1.13]
        warnings.warn(f"capacity A/A {ratio['ratio']:.4f} [{ratio['low']:.4f}, {ratio['high']:.4f}], {ratio['n_blocks']} blocks: past +-{within_pct:g} %")
    for e in (a, b):
        cap = doc["engines"][e]["capacity"]
        assert least <= cap["n"] <= n and cap["low"] < cap["value"] < cap["high"] and doc["engines"][e]["binds"] in objectives
        assert doc["engines"][e]["capacity_pct_per_pct"] > 0  # how far 1 % on the binding percentile moves it
        energy = doc["energy"][e]  # a CPU box: no energy counter, the reason instead of a number
        assert energy["j_per_output_tok_median"] is None and energy["why"].startswith("not applicable")
        assert doc["frontier"][e] and any(f["pareto"] for f in doc["frontier"][e])
    assert [(r["quantity"], r["ratio"], r["reason"]) for r in doc["energy_ratios"]] == [
        (q, None, "no block has both arms") for q in ("j_per_output_tok", "j_per_total_tok")]
    assert doc["problems"] == [] and doc["valid"] and doc["stop"]["rule"] in (("fixed",) if most is None else ("until-ci", "max-repeats"))
    # one server per engine for the bracket, then one per engine and block, the engines rotated per block
    runs = [(s["engine"], s["run"]) for s in doc["servers"]]
    blocks = [[(a, f"b{k}"), (b, f"b{k}")][:: 1 if k % 2 == 0 else -1] for k in range(n)]
    assert runs == [(a, "bracket"), (b, "bracket")] + [x for pair in blocks for x in pair]
    assert all(s["probes"] == 4 for s in doc["servers"][2:]) and all(s["warmup"]["valid"] == 2 for s in doc["servers"])
    # the k-th probe of a block: the same token ids for both engines, at matched levels; every request counted
    by: dict = {}
    for p in doc["probes"]:
        if p["block"] >= 0:
            by.setdefault((p["block"], p["probe"]), {})[p["engine"]] = p
    assert len(by) == n * 4 and all(set(v) == {a, b} for v in by.values())
    assert all(v[a]["prompt_digest"] == v[b]["prompt_digest"] for v in by.values())
    assert len({v[a]["prompt_digest"] for v in by.values()}) == len(by)  # every probe of a server its own prompts
    for p in doc["probes"]:
        assert p["invalid"] == 0 and p["measured"] == (requests if p["block"] >= 0 else max(20, requests // 3))
        assert p["sent"] == p["measured"] + 2 * p["load"]  # a warm-up and a cool-down request per client
        assert (run / p["requests_file"]).is_file()
    saved = json.loads((run / "capacity.json").read_text())
    assert saved["ratios"] == doc["ratios"] and len(saved["probes"]) == len(doc["probes"])


def test_the_dry_run_prints_the_plan_and_writes_nothing(parity_cli, tmp_path):
    r = capacity(parity_cli, tmp_path, "--profile", "smoke", "--engines", "paged,stock", "-m", "small", "--slo", SLO,
                 "--until-ci", "1.5", "--dry-run", "--json", timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert doc["engines"] == ["paged", "stock"] and doc["reference"] == "stock" and doc["ratio"] == ["paged / stock"]
    assert doc["objectives"] == ["90 % of itl within 100 ms", "90 % of ttft within 200 ms"]
    assert doc["order"][:2] == ["block 0: paged (levels up), stock (levels up)",
                                "block 1: stock (levels up), paged (levels up)"]
    assert doc["order"][2:4] == ["block 2: paged (levels down), stock (levels down)",
                                 "block 3: stock (levels down), paged (levels down)"]
    assert "every engine's server started once per block" in doc["blocks"]
    assert "until every headline half-width <= 1.5%" in doc["stop"]
    assert [c["engine"] for c in doc["commands"]] == ["paged", "stock"]
    assert all("llama-server" in c["argv"][0] for c in doc["commands"])
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("args, says", [
    (["--slo", "ttft_p99=5"], "--slo 'ttft_p99=5'"),
    (["--slo", SLO, "--attainment", "99"], "--attainment 99.0"),
    (["--slo", SLO, "--load", "qps"], "--load 'qps'"),
    (["--slo", SLO, "--until-ci", "-1"], "--until-ci"),
    (["--slo", SLO, "--budget-s", "60"], "--budget-s bounds adaptive blocks"),
    (["--slo", SLO, "--engines", "stock,stock"], "listed twice"),
    ([], "no objective"),
])  # fmt: skip
def test_a_bad_option_is_one_line_exit_2_and_no_run_dir(parity_cli, tmp_path, args, says):
    r = capacity(parity_cli, tmp_path, "--profile", "smoke", *args, timeout=120)
    assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "runs").exists()
