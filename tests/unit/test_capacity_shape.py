"""The capacity search names an engine whose output rate falls as its load rises
(parity.capacity.shape), held on the probes of a real run: llama-server on a 4 GB f16 model on a
lent H200 (tests/data/capacity/h200-dense-4g-capacity.json, docs/evidence/device-h200-1129b/),
and never on the simulator, whose rate rises with its load."""

from __future__ import annotations

import json
from pathlib import Path

from parity.capacity.estimate import Probed
from parity.capacity.shape import falling_output
from test_capacity_search import search

RUN = Path(__file__).parents[1] / "data" / "capacity" / "h200-dense-4g-capacity.json"
KEYS = ("engine", "load", "block", "margins", "attainment", "throughput_tps", "user_tps", "sent", "seconds")


def h200_probes() -> list[Probed]:
    doc = json.loads(RUN.read_text())
    raw = doc["bracket_probes"] + [p for b in doc["blocks"] for e in b["engines"].values() for p in e["probes"]]
    return [Probed(**{k: p[k] for k in KEYS}) for p in raw]


def test_the_h200_run_fell_from_three_clients_to_six():
    probes = h200_probes()
    # stock_b's rates by hand: at 3 clients (791.1 + 1023.5) / 2 = 907.3 tok/s, at 6 730.7: 1 - 730.7 / 907.3 = 19.5 %
    line = falling_output(probes, "stock_b")
    assert line.startswith("stock_b: the output rate fell 19 % from 907 tok/s at load 3 to 731 at 6")
    assert all(falling_output(probes, e) for e in ("stock", "stock_nog"))
    assert falling_output(probes, "stock_b", drop=0.20) is None  # 19.5 % is the largest fall


def test_the_simulator_whose_rate_rises_is_not_named():
    r = search({"B": 1.03}, slo="tpot_p90_ms=60")
    assert not [n for n in r["notes"] if "output rate fell" in n]
    assert r["frontier"]["A"]  # the probes were there to judge


def test_a_fall_between_near_loads_is_drift_not_shape():
    probes = h200_probes()
    assert falling_output(probes, "stock_b", span=2.01) is None  # 3 -> 6 is the only fall that wide
