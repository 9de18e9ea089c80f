"""`parity capacity`'s plan (parity.capacity.plan) on the smoke profile: every bad option is one
UsageError naming it, before anything is bound or built; the defaults the real run takes; the
prompts the real probe draws (parity.capacity.real.lengths); and the search's engine-grouped
order (Plan.arms "engine": one server start per engine and block) on the simulator."""

from __future__ import annotations

import pytest

from parity.capacity.plan import CapacityRequest, make_plan
from parity.capacity.real import lengths
from parity.capacity.search import Plan, Search
from parity.capacity.simulator import Simulator, Workload
from parity.capacity.slo import parse_slo
from parity.config import load_profile
from parity.errors import UsageError
from parity.stats import adaptive

SLO = "ttft_p99_ms=500,itl_p99_ms=50"


@pytest.fixture(scope="module")
def smoke():
    return load_profile("smoke")


@pytest.mark.parametrize("over, says", [
    ({"slo": None}, "no objective: give --slo"),
    ({"slo": "ttft=5"}, "--slo 'ttft=5': expected"),
    ({"attainment": 99}, "--attainment 99: a fraction"),
    ({"attainment": 0}, "--attainment 0: a fraction"),
    ({"load": "qps"}, "--load 'qps'"),
    ({"start": 1.5}, "--start 1.5: a whole number of clients"),
    ({"start": 0}, "--start 0"),
    ({"load": "rate", "start": -1.0}, "--start -1.0: a positive number of requests per second"),
    ({"start": 8, "max_load": 8}, "--max-load 8 must be above --start 8"),
    ({"requests": 5}, "--requests must be an integer >= 10"),
    ({"ptok": 8}, "--ptok must be an integer >= 32"),
    ({"gen": 2}, "--gen must be an integer >= 4"),
    ({"repeat": 1}, "--repeat 1: an interval over blocks needs at least 2"),
    ({"repeat": 0}, "--repeat must be a positive integer"),
    ({"max_repeats": 8}, "--max-repeats bounds adaptive blocks"),
    ({"budget_s": 60.0}, "--budget-s bounds adaptive blocks"),
    ({"until_ci": "x"}, "--until-ci must be a positive number"),
    ({"until_ci": "capacity=1"}, "capacity watches one interval"),
    ({"until_ci": 1.5, "engines": ["stock"]}, "--until-ci needs two engines"),
    ({"until_ci": 1.5, "repeat": 8, "max_repeats": 6}, "--max-repeats 6 is below the minimum of 8 blocks"),
    ({"engines": ["stock", "stock"]}, "an engine is listed twice"),
    ({"engines": ["stock", "nope"]}, "nope"),
    ({"model": "no-such-model"}, "--model 'no-such-model': neither a model"),
    ({"ptok": 4096, "gen": 4096}, "does not fit engine"),
])  # fmt: skip
def test_a_bad_option_is_one_usage_error_naming_it(smoke, over, says):
    req = CapacityRequest(**{"slo": SLO, "engines": ["paged", "stock"], "model": "tiny", **over})
    with pytest.raises(UsageError) as e:
        make_plan(smoke, req)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_the_defaults_the_real_run_takes(smoke):
    plan = make_plan(smoke, CapacityRequest(slo="ttft_p99_ms=500,itl_ms=50", engines=["paged", "stock"], model="tiny"))
    p = plan.search
    assert plan.reference == "stock" == p.reference  # serving.reference_engine
    assert [o.name for o in p.objectives] == ["ttft_p99_ms", "itl_p99_ms"]  # itl_ms took the 0.99 attainment
    assert (p.kind, p.start, p.min_load, p.max_load, p.arms) == ("concurrency", 1.0, 1.0, 4096.0, "engine")
    assert (p.requests, p.bracket_requests, p.budget.adaptive, p.budget.min_blocks) == (300, 100, False, 6)
    s = smoke.serving
    assert (plan.ptok, plan.gen) == (s.ptok, s.gen)
    # the server shape holds the longest request drawn, checked against each engine's request limit
    assert (plan.serving.shape.ptok, plan.serving.shape.gen) == (s.ptok * 3 // 2, s.gen * 3 // 2)
    assert set(plan.serving.bound) == {"paged", "stock"} and set(plan.serving.model_files) == {"paged", "stock"}


def test_until_ci_budgets_and_the_last_engine_is_the_reference_without_one(smoke):
    req = CapacityRequest(slo=SLO, engines=["paged", "vllm"], model="tiny-hf", until_ci="1.5", max_repeats=10,
                          budget_s=600.0, attainment=0.95, load="rate", start=2.0)  # fmt: skip
    plan = make_plan(smoke, req)
    b = plan.search.budget
    assert (b.until_ci_pct, b.min_blocks, b.max_blocks, b.max_seconds) == (1.5, 6, 10, 600.0)
    assert plan.reference == "vllm" and plan.search.kind == "rate" and plan.search.min_load == 2.0 / 64


def test_the_prompts_are_seeded_by_the_block_and_the_measured_ones_ignore_the_warmups():
    draw = lengths(64, 16, seed=3)
    a, b = draw(0, 50, 8), draw(0, 50, 20)
    assert (a.prompt_tokens[:50] == b.prompt_tokens[:50]).all() and (a.gen_tokens[:50] == b.gen_tokens[:50]).all()
    assert a.seed == b.seed != draw(1, 50, 8).seed
    assert (a.prompt_tokens != draw(1, 50, 8).prompt_tokens).any()
    big = draw(2, 4000, 4000)
    p, g = big.prompt_tokens, big.gen_tokens
    assert p.min() == 32 and p.max() == 96 and g[:4000].min() == 8 and g[:4000].max() == 24
    assert g[4000:].min() == 1 and g[4000:].max() == 24  # warm-ups: clients out of step
    assert big.warmup == 4000 and big.measured == 4000


def test_engine_arms_run_each_engines_levels_back_to_back_rotated_per_block():
    """Plan.arms "engine" (the real engines: a server start per engine and block): each engine's
    levels in a row, up for two blocks and down for the next two (each engine first and second
    in blocks of each way), the engines rotated per block (abba);
    the result stays what the level-interleaved search gives (an engine against itself: no claim)."""
    calls = []
    sim = Simulator(seed=4)

    def probe(engine, load, block, prompts):
        calls.append((block, engine, load))
        return sim(engine, load, block, prompts)

    plan = Plan(engines=["A", "B"], reference="A", objectives=parse_slo(SLO), arms="engine",
                budget=adaptive.Budget(None, 4, 4))  # fmt: skip
    r = Search(probe, lambda b, m, w: Workload().prompts(4, b, m, w), plan).run()
    for blk in r["blocks"]:
        b, levels = blk["block"], blk["levels"]
        mine = [(e, load) for bb, e, load in calls if bb == b]
        first, second = ("A", "B") if b % 2 == 0 else ("B", "A")
        way = 1 if b in (0, 1) else -1  # 4 blocks: up, up, down, down
        assert mine == [(first, x) for x in levels[first][::way]] + [(second, x) for x in levels[second][::way]]
        assert blk["order"] == [f"{e}@{x:g}" for e, x in mine]
        assert [g["load"] for g in blk["engines"]["A"]["probes"]] == levels["A"]  # kept in level order
    assert r["ratios"][0]["outcome"] in ("equivalent", "inconclusive") and r["problems"] == []
