"""The report's TTFT section (parity.report.ttft_sections) from a real sweep's anatomy, and a
crafted summary.json "ttft" refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from parity.errors import UsageError
from parity.report.rundata import RunData
from parity.report.ttft_sections import ttft_section
from parity.ttft import llama_log, split, summary
from tests.unit.test_ttft import DATA, records


@pytest.fixture(scope="module")
def section_doc():
    tasks = llama_log.parse((DATA / "smoke-stock.log").read_text())
    rows = [{"engine": "stock", "n": n, "repeat": 0, "valid": True, "ttft_anatomy": split.point(records(f"smoke-stock-n{n}.json"), tasks)} for n in (1, 4)]
    return summary.section(rows, None, 2.0, 0.95)


def test_the_section_shows_every_part_and_the_flag(section_doc):
    sec = ttft_section(RunData(Path("/run"), {}, summary={"ttft": section_doc}))
    assert sec["headers"][:4] == ["engine", "N", "repeats", "TTFT mean ms"] and sec["headers"][-2:] == ["held by", "source"]
    n1, n4 = sec["rows"]
    assert n1[:2] == ["stock", 1] and n1[-2] == "remainder" and n4[-2] == "-"
    assert sec["flags"] == ["stock N=1: TTFT 6.8 ms is 87% outside prompt compute (0.9 ms): held by remainder (4.0 ms)"]
    assert ttft_section(RunData(Path("/run"), {}, summary={"rows": []})) is None  # a run from before the anatomy


@pytest.mark.parametrize("crafted, said", [
    ([1], "ttft is not {points: [...], paired: [...]}"),
    ({"points": [{"engine": "a", "n": 1, "parts": {"host": {"mean": "slow"}}}]}, "ttft.points[0].parts.host is not {mean, p99, share} numbers"),
    ({"points": [{"n": 1, "parts": {}}]}, "ttft.points[0] is not an entry {engine, n, parts}"),
    ({"points": [], "paired": [{"ratio": float("nan")}]}, "ttft.paired[0] is not an entry {ratio, low, high} of numbers"),
])  # fmt: skip
def test_a_crafted_ttft_is_one_line(crafted, said):
    with pytest.raises(UsageError) as e:
        ttft_section(RunData(Path("/run"), {}, summary={"ttft": crafted}))
    assert str(e.value) == f"/run/summary.json: {said}: cannot report it"
