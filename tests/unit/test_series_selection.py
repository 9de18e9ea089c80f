"""Series variants (patches.Selection): the patches a build lever's arm or a bisection probe
applies, and the build key that keeps each variant's cache entry its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from parity.llamacpp import patches
from parity.engines.bound import bind
from parity.errors import UsageError


@pytest.fixture
def series(tmp_path: Path) -> Path:
    for n in (1, 2, 5, 10):
        (tmp_path / f"{n:04d}-p{n}.patch").write_text(f"patch {n}\n")
    return tmp_path


def _names(series, sel):
    return [p.name[:4] for p in patches.select(patches.list_series(series), sel, series)]


def test_until_and_without(series):
    assert _names(series, None) == ["0001", "0002", "0005", "0010"]
    assert _names(series, patches.Selection()) == ["0001", "0002", "0005", "0010"]
    assert _names(series, patches.Selection(until="0005")) == ["0001", "0002", "0005"]
    assert _names(series, patches.Selection(without=("10", "0001"))) == ["0002", "0005"]
    assert _names(series, patches.Selection(until="5", without=("0002",))) == ["0001", "0005"]
    assert patches.Selection(until="5", without=("0002",)).describe() == "until 5; without 0002"
    assert not patches.Selection() and patches.Selection(without=("1",))


@pytest.mark.parametrize("sel, msg", [
    (patches.Selection(without=("0003",)), "no patch 0003 to leave out (it holds 0001..0010)"),
    (patches.Selection(until="0004"), "no patch 0004 to stop at"),
    (patches.Selection(until="last"), "'last' is not a patch number"),
])
def test_a_number_the_series_lacks_is_named(series, sel, msg):
    with pytest.raises(UsageError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        _names(series, sel)


def test_digest_of_a_variant_differs_and_whole_series_is_unchanged(series):
    whole = patches.series_digest(str(series))
    assert patches.series_digest(str(series), patches.Selection()) == whole
    without = patches.series_digest(str(series), patches.Selection(without=("0010",)))
    assert [d["name"] for d in without] == [d["name"] for d in whole[:3]]
    assert patches.digest_of(without) != patches.digest_of(whole)


def test_build_plan_key_per_variant(tmp_path, series):
    from parity.config import profile_from_dict
    from parity.llamacpp import build

    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text("project(x)\n")
    doc = {"name": "t", "sources": {"s": {"path": str(src)}}, "models": {},
           "engines": {"a": {"source": "s", "series": str(series)},
                       "b": {"source": "s", "series": str(series), "series_without": ["0010"]},
                       "c": {"source": "s", "series": str(series), "series_until": "0005", "series_without": ["0001"]}}}
    prof = profile_from_dict(doc)
    keys = {n: build.plan(bind(prof, n)).key for n in "abc"}
    assert len(set(keys.values())) == 3
    assert [d["name"][:4] for d in build.plan(bind(prof, "c")).series] == ["0002", "0005"]
