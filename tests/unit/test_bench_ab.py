"""The bench A/B (parity.bench.ab) on real llama-batched-bench tables: blocks replayed
from captured logs of real sessions (tests/data/bench/ab, README there), the arms' naming
(A/A), the stop rule, the paired table and its rendering."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from parity.errors import ConfigError, UsageError
from parity.bench.batched_bench import parse
from parity.bench import ab as bench_ab
from parity.bench.ab import Arm, arms_for, block_order, paired_table, per_arm, reference_arm, run_blocks, tsv
from parity.bench.table import table
from parity.stats import adaptive

AB = Path(__file__).resolve().parent.parent / "data" / "bench" / "ab"


def capture(session: str, arm: str, block: int) -> list[dict]:
    return parse((AB / session / f"bench-{arm}-b{block}.log").read_text())


def blocks_in(session: str) -> int:
    return len({p.name.rsplit("-b", 1)[1] for p in (AB / session).glob("bench-*-b*.log")})


class Replay:
    """run_one for run_blocks: the captured table of that arm's run in that block (cycling past the end)."""

    def __init__(self, session: str):
        self.session, self.n, self.calls = session, blocks_in(session), []

    def __call__(self, arm: Arm, block: int) -> list[dict]:
        self.calls.append((arm.name, block))
        return capture(self.session, arm.name, block % self.n)


def test_aa_arms_are_one_build_named_twice():
    arms = arms_for(["stock"], aa=True)
    assert [(a.name, a.engine) for a in arms] == [("stock", "stock"), ("stock#2", "stock")]
    assert reference_arm(arms, "paged", aa=True) == "stock"
    assert [(a.name, a.engine) for a in arms_for(["stock", "stock"], aa=True)] == [("stock", "stock"), ("stock#2", "stock")]
    with pytest.raises(UsageError, match="listed twice.*--aa --engines stock"):
        arms_for(["stock", "stock"])
    with pytest.raises(UsageError, match="--aa measures one engine"):
        arms_for(["paged", "stock"], aa=True)


def test_reference_is_serving_reference_when_listed_else_the_last():
    arms = arms_for(["paged", "stock"])
    assert reference_arm(arms, "stock") == "stock" and reference_arm(arms, "paged") == "paged"
    assert reference_arm(arms, "vllm") == "stock" and reference_arm(arms_for(["stock", "paged"]), None) == "paged"
    assert reference_arm(arms_for(["paged"]), "stock") is None  # one arm: repeats, no pairing


def test_block_order_rotates_abba_and_keeps_abab():
    arms = arms_for(["paged", "stock"])
    assert [[a.name for a in block_order(arms, k)] for k in range(4)] == [["paged", "stock"], ["stock", "paged"]] * 2
    assert [[a.name for a in block_order(arms, k, "abab")] for k in range(3)] == [["paged", "stock"]] * 3
    with pytest.raises(UsageError, match="--order"):
        block_order(arms, 0, "aabb")


def test_block_loop_replays_real_tables_and_pairs_them_by_block():
    arms, replay = arms_for(["paged", "stock"]), Replay("paged-stock")
    n = replay.n
    res = run_blocks(arms, replay, adaptive.Budget(None, min_blocks=n), "abba", "stock")
    assert res["blocks"] == n and res["stop"]["rule"] == adaptive.FIXED
    assert replay.calls[:4] == [("paged", 0), ("stock", 0), ("stock", 1), ("paged", 1)]  # back to back, order recorded
    assert res["order"][:2] == [["paged", "stock"], ["stock", "paged"]]
    pts = sorted({(r["pp"], r["tg"], r["b"]) for r in capture("paged-stock", "stock", 0)})
    assert len(res["rows"]) == 2 * n * len(pts)
    paired = paired_table(res["rows"], "stock")
    assert len(paired) == len(pts) * 3 and {p["metric"] for p in paired} == {"s_tg", "s_pp", "s"}
    for p in (p for p in paired if p["metric"] == "s_tg"):
        # B/A per block straight from the captured tables, independent of the loop
        want = []
        for k in range(n):
            a = next(r["s_tg"] for r in capture("paged-stock", "stock", k) if (r["pp"], r["tg"], r["b"]) == (p["pp"], p["tg"], p["b"]))
            b = next(r["s_tg"] for r in capture("paged-stock", "paged", k) if (r["pp"], r["tg"], r["b"]) == (p["pp"], p["tg"], p["b"]))
            want.append(b / a)
        assert p["ratios"] == pytest.approx(want, abs=1e-6) and p["n_blocks"] == n
        assert p["ratio"] == pytest.approx(math.exp(sum(map(math.log, want)) / n), abs=1e-6)
        assert p["low"] < p["ratio"] < p["high"] and p["outcome"] in ("improved", "regressed", "equivalent", "inconclusive")
        assert p["users_rule"]["verdict"] and p["reference"] == "stock" and p["engine"] == "paged"


def test_until_ci_stops_on_the_s_tg_half_widths():
    arms = arms_for(["paged", "stock"])
    n = blocks_in("paged-stock")
    full = run_blocks(arms, Replay("paged-stock"), adaptive.Budget(None, min_blocks=n), "abba", "stock")
    widest = max(full["stop"]["half_widths"].values())  # after every captured block
    assert set(full["stop"]["half_widths"]) == {f"paged PP={p} TG={t} B={b}" for p, t, b in {(r["pp"], r["tg"], r["b"]) for r in full["rows"]}}
    # a target the captured spread meets after n blocks: stops there, by until-ci
    loose = run_blocks(arms, Replay("paged-stock"), adaptive.Budget(widest * 1.001, min_blocks=n, max_blocks=n + 5), "abba", "stock")
    assert loose["blocks"] == n and loose["stop"]["rule"] == adaptive.UNTIL_CI
    # a target it never meets: the block cap ends it, and says which half-widths are still open
    tight = run_blocks(arms, Replay("paged-stock"), adaptive.Budget(1e-6, min_blocks=2, max_blocks=n), "abba", "stock")
    assert tight["blocks"] == n and tight["stop"]["rule"] == adaptive.MAX_REPEATS and "paged PP=" in tight["stop"]["why"]
    # the time budget: a fake clock where each block takes 10 s; after 2 (20 s) a third would pass 25 s
    t = iter([s for k in range(100) for s in (10 * k, 10 * k + 10)])  # (block start, block end) pairs: the loop reads the clock around each block
    timed = run_blocks(arms, Replay("paged-stock"), adaptive.Budget(1e-6, min_blocks=2, max_blocks=50, max_seconds=25), "abba", "stock", clock=lambda: next(t))
    assert timed["stop"]["rule"] == adaptive.TIME_BUDGET and timed["blocks"] == 2


def test_aa_of_real_stock_runs_pairs_one_binary_with_itself():
    arms = arms_for(["stock"], aa=True)
    n = blocks_in("stock-aa")
    replay = Replay("stock-aa")
    res = run_blocks(arms, replay, adaptive.Budget(None, min_blocks=n), "abba", "stock")
    assert replay.calls[:4] == [("stock", 0), ("stock#2", 0), ("stock#2", 1), ("stock", 1)]
    assert {r["build"] for r in res["rows"]} == {"stock"}
    paired = paired_table(res["rows"], "stock")
    assert {p["engine"] for p in paired} == {"stock#2"} and all(p["n_blocks"] == n for p in paired)
    # the headline makes no claim: every S_TG interval holds 1 (CV 17-46 % per point on the busy box)
    assert all(p["low"] < 1 < p["high"] and p["outcome"] == "inconclusive" for p in paired if p["metric"] == "s_tg")
    # ... but one S_PP cell of this recorded A/A is a false claim, as a 95 % interval per cell allows
    # (tests/data/bench/README.md); the users' rule, with 3 x CV as its threshold, calls every cell noise
    claims = [(p["metric"], p["pp"], p["b"], round(p["ratio"], 4)) for p in paired if p["outcome"] in ("improved", "regressed")]
    assert claims == [("s_pp", 128, 2, 0.7251)]
    assert {p["users_rule"]["verdict"] for p in paired} == {"within noise"}


def test_one_engine_repeats_give_the_cv_per_point_without_pairing():
    arms = arms_for(["stock"])
    n = blocks_in("paged-stock")
    res = run_blocks(arms, lambda a, k: capture("paged-stock", "stock", k), adaptive.Budget(None, min_blocks=n))
    assert paired_table(res["rows"], None) == [] and res["stop"]["half_widths"] == {}
    arm = per_arm(res["rows"], arms)
    for a in arm:
        vals = [r["s_tg"] for k in range(n) for r in capture("paged-stock", "stock", k) if (r["pp"], r["tg"], r["b"]) == (a["pp"], a["tg"], a["b"])]
        mean = sum(vals) / n
        cv = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1)) / mean * 100
        assert a["s_tg"]["values"] == vals and a["s_tg"]["cv_pct"] == pytest.approx(cv, abs=1e-3)
    doc = {"engines": ["stock"], "reference": None, "per_engine": arm, "paired": []}
    cols, rows = table(doc)
    assert cols == ["PP", "TG", "B", "S_TG stock", "CV % stock"] and len(rows) == len(arm)


def test_human_table_and_tsv_of_a_real_ab():
    arms = arms_for(["paged", "stock"])
    res = run_blocks(arms, Replay("paged-stock"), adaptive.Budget(None, min_blocks=blocks_in("paged-stock")), "abba", "stock")
    doc = {"engines": ["paged", "stock"], "reference": "stock", "rows": res["rows"], "per_engine": per_arm(res["rows"], arms), "paired": paired_table(res["rows"], "stock")}
    cols, rows = table(doc)
    assert cols == ["PP", "TG", "B", "S_TG stock", "S_TG paged", "CV % stock", "CV % paged", "paged/stock [low, high]", "outcome", "users' rule"]
    p = next(p for p in doc["paired"] if p["metric"] == "s_tg")
    first = rows[0]
    assert first[:3] == [p["pp"], p["tg"], p["b"]] and first[7] == f"{p['ratio']:.4f} [{p['low']:.4f}, {p['high']:.4f}]" and first[8].startswith(p["outcome"])
    lines = tsv(doc).splitlines()
    kinds = [line.split("\t")[0] for line in lines[1:]]
    assert kinds.count("row") == len(res["rows"]) * 3 and kinds.count("arm") == len(doc["per_engine"]) * 3 and kinds.count("paired") == len(doc["paired"])


def test_budget_from_flags_and_profile_defaults():
    plain = SimpleNamespace()  # a StatsConfig without the adaptive keys
    assert bench_ab.budget_for(bench_ab.ABRequest(repeat=5), plain, 2) == adaptive.Budget(None, 5, 5)  # fixed: N blocks
    assert bench_ab.budget_for(bench_ab.ABRequest(), plain, 2).min_blocks == 3
    b = bench_ab.budget_for(bench_ab.ABRequest(until_ci=1.5, max_repeats=8, budget_s=600), plain, 2)
    assert (b.until_ci_pct, b.min_blocks, b.max_blocks, b.max_seconds) == (1.5, 3, 8, 600)
    prof = SimpleNamespace(until_ci_pct=2.0, max_repeats=12, budget_s=900)
    assert bench_ab.budget_for(bench_ab.ABRequest(), prof, 2) == adaptive.Budget(2.0, 3, 12, 900)
    assert bench_ab.budget_for(bench_ab.ABRequest(repeat=4), prof, 2).until_ci_pct is None  # --repeat alone: fixed
    with pytest.raises(UsageError, match="needs two arms"):
        bench_ab.budget_for(bench_ab.ABRequest(until_ci=2.0), plain, 1)
    with pytest.raises(UsageError, match="exceeds --max-repeats"):
        bench_ab.budget_for(bench_ab.ABRequest(until_ci=2.0, repeat=6, max_repeats=4), plain, 2)
    with pytest.raises(UsageError, match="--repeat"):
        bench_ab.budget_for(bench_ab.ABRequest(repeat=0), plain, 2)


def test_campaign_bench_step_options():
    from parity.campaign import check_step_options
    from parity.bench.request import BenchRequest
    from parity.bench.run import STEP_OPTIONS

    check_step_options("bench", {"engines": ["paged", "stock"], "repeat": 3, "until_ci": 1.5, "max_repeats": 10}, STEP_OPTIONS)
    with pytest.raises(ConfigError, match="unknown bench option"):
        check_step_options("bench", {"until_cl": 1.5}, STEP_OPTIONS)
    req = BenchRequest(engines=["paged", "stock"], until_ci=1.5)
    assert req.blocks() and req.ab_request().engines == ["paged", "stock"]
    assert not BenchRequest(engine="paged").blocks()  # the single run, as before
    with pytest.raises(UsageError, match="--engine or --engines"):
        BenchRequest(engine="paged", engines=["stock"], repeat=2).ab_request()


def test_report_section_renders_the_paired_table():
    from parity.report.bench_sections import bench_ab_section

    arms = arms_for(["paged", "stock"])
    res = run_blocks(arms, Replay("paged-stock"), adaptive.Budget(None, min_blocks=2), "abba", "stock")
    doc = {"kind": "bench", "engines": ["paged", "stock"], "arms": [{"name": "paged", "engine": "paged"}, {"name": "stock", "engine": "stock"}], "reference": "stock",
           "blocks": 2, "order": res["order"], "order_rule": "abba", "stop": res["stop"], "rows": res["rows"], "per_engine": per_arm(res["rows"], arms), "paired": paired_table(res["rows"], "stock")}  # fmt: skip
    sec = bench_ab_section(SimpleNamespace(bench=doc))
    assert [t["metric"] for t in sec["tables"]] == ["S_TG", "S_PP"] and sec["order"] == "paged stock; stock paged"
    assert sec["stop"].startswith("fixed: 2 blocks as asked")
    assert bench_ab_section(SimpleNamespace(bench={"kind": "bench", "rows": []})) is None  # a single run keeps the old table
