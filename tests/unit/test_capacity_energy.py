"""Energy per token in a capacity run (parity.capacity.energy) on two real H200 runs' probes: the
A/A pairs to no change, the knob without -kvu (0.704 against 0.577 J per output token, the medians
those runs recorded) to a regression; and a block pairs only loads both engines probed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from parity.capacity import energy
from parity.stats.paired import EQUIVALENT, REGRESSED

DATA = Path(__file__).resolve().parents[1] / "data" / "capacity"


def run(name: str) -> dict:
    return json.loads((DATA / f"h200-1130b-{name}-capacity.json").read_text())


def ratio(doc: dict, quantity: str = "j_per_output_tok") -> dict:
    engines, ref = list(doc["engines"]), doc["plan"]["reference"]
    (r,) = [x for x in energy.paired_ratios(doc["probes"], engines, ref, 2.0, 0.95) if x["quantity"] == quantity]
    return r


def test_the_per_engine_medians_are_the_ones_the_runs_recorded():
    for name in ("aa", "knob"):
        doc = run(name)
        assert energy.per_engine(doc["probes"], list(doc["engines"])) == doc["energy"]


def test_an_engine_against_itself_pairs_to_no_change():
    r = ratio(run("aa"))
    assert r["outcome"] == EQUIVALENT and r["n_blocks"] == 6
    assert abs(r["ratio"] - 1) < 0.01 and r["low"] < 1 < r["high"]
    # block 0 probed stock_b at 9, 10, 12, 13 and stock at 9, 10, 11, 13 (before ba412a5): three loads pair
    assert r["loads"]["0"] == [9.0, 10.0, 13.0] and all(len(r["loads"][str(b)]) == 4 for b in range(1, 6))


def test_the_knob_spends_more_per_token_and_the_pair_says_so():
    doc = run("knob")
    r = ratio(doc)
    med = doc["energy"]
    assert r["outcome"] == REGRESSED and r["low"] > 1.1
    assert r["ratio"] == pytest.approx(med["stock_split"]["j_per_output_tok_median"] / med["stock"]["j_per_output_tok_median"], rel=0.05)
    assert ratio(doc, "j_per_total_tok")["outcome"] == REGRESSED


def test_a_block_pairs_only_the_loads_both_engines_probed():
    def probe(e, b, load, j):
        return {"engine": e, "block": b, "load": load, "j_per_output_tok": j, "j_per_total_tok": j / 3, "energy_why": None}

    probes = [probe("A", 0, 9.0, 1.0), probe("A", 0, 10.0, 0.9), probe("B", 0, 10.0, 0.99), probe("B", 0, 11.0, 0.5),
              probe("A", 1, 9.0, 1.0), probe("B", 1, 12.0, 0.5), probe("A", -1, 8.0, 2.0), probe("B", -1, 8.0, 0.1)]
    a, b, loads = energy.block_values(probes, "B", "A", "j_per_output_tok")
    assert loads == {0: [10.0]} and a == {0: 0.9} and b == {0: 0.99}  # block 1 shares no load; the bracket (-1) never pairs
    nan = [{**p, "j_per_output_tok": float("nan")} if p["engine"] == "B" else p for p in probes]
    assert energy.block_values(nan, "B", "A", "j_per_output_tok")[0] == {}


def test_the_result_prints_the_paired_energy_line():
    from parity.cli.capacity import render_result
    from tests.lines import Lines

    doc = run("knob")
    doc.update(run_dir="runs/x", energy_ratios=energy.paired_ratios(doc["probes"], list(doc["engines"]), "stock", 2.0, 0.95))
    out = Lines()
    render_result(out, doc)
    (line,) = [x for x in out.lines if "J per output token at the same loads" in x]
    assert line.startswith("stock_split/stock J per output token at the same loads: 1.2160 [1.2025, 1.2296] over 5 blocks -> regressed")
