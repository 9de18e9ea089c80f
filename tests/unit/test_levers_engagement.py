"""Engagement evidence on real files: an env name in a real program (and in the libraries it
loads, through ldd) or in none of them; a name inside a longer one is not the name; real
batched-bench logs of one binary run twice leave no line only one arm printed (the masking
holds), and a marker counts per arm; the verdict a lever without evidence gets."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import DATA
from parity.levers import engagement as E
from parity.runners.local import LocalRunner

LS = shutil.which("ls")
AB = DATA / "bench" / "ab"


@pytest.fixture()
def ls_bin(tmp_path) -> Path:
    """A bin dir holding a real program (coreutils' ls reads LS_COLORS, TIME_STYLE, ...)."""
    if not LS or not shutil.which("ldd"):
        pytest.skip("no ls or ldd on this machine")
    d = tmp_path / "bin"
    d.mkdir()
    shutil.copy(LS, d / "ls")
    return d


def test_an_env_name_the_program_reads(ls_bin):
    got = E.static_env(["LS_COLORS", "TIME_STYLE"], ls_bin, LocalRunner())
    assert got["engaged"] and got["how"] == "strings" and got["strings"]["missing"] == []
    assert set(got["strings"]["found"]["LS_COLORS"]) == {str(ls_bin / "ls")} and "LS_COLORS in ls x" in got["why"]


@pytest.mark.parametrize(
    "name", ["LS_COLOURS", "LS_COLOR"]
)  # a typo; a name that is only the start of one the program holds
def test_an_env_name_in_no_file_did_not_engage(ls_bin, name):
    got = E.static_env([name], ls_bin, LocalRunner())
    assert (
        not got["engaged"]
        and got["strings"]["missing"] == [name]
        and f"{name} is in no file of the build" in got["why"]
    )
    assert got["strings"]["searched"] > 1  # ls and the libraries it loads


def test_a_name_read_by_a_library_the_program_loads(ls_bin):
    """LD_LIBRARY_PATH is the dynamic loader's, not ls's: found through ldd."""
    got = E.static_env(["LD_LIBRARY_PATH"], ls_bin, LocalRunner())
    assert got["engaged"] and not any(f.endswith("/ls") for f in got["strings"]["found"]["LD_LIBRARY_PATH"])


def test_ldd_output_of_a_real_program(ls_bin):
    res = LocalRunner().run(["ldd", str(ls_bin / "ls")])
    libs = E.parse_ldd(res.stdout)
    assert (
        libs
        and all(p.startswith("/") for p in libs)
        and any("libc.so" in p for p in libs)
        and not any("vdso" in p for p in libs)
    )


def test_a_build_lever_that_changes_no_file(tmp_path):
    same = {"llama-server": "a" * 64, "libllama.so": "b" * 64}
    assert not E.static_build(same, dict(same))["engaged"]
    got = E.static_build(same, {**same, "libllama.so": "c" * 64})
    assert got["engaged"] and got["differ"] == ["libllama.so"]
    assert E.static_build({}, same)["engaged"]  # no hashes recorded: no evidence against it


def test_one_binary_twice_prints_no_line_of_its_own():
    """Real logs of an A/A (stock, stock#2: one build twice, 4 blocks): after masking the digits
    and addresses no line is arm B's alone, so noise is never taken for engagement."""
    a, b = E.arm_logs(AB / "stock-aa", "stock"), E.arm_logs(AB / "stock-aa", "stock#2")
    assert [p.name for p in a] == [f"bench-stock-b{i}.log" for i in range(4)] and len(
        b
    ) == 4  # stock's glob does not take stock#2's logs
    got = E.from_logs(E.read_lines(a), E.read_lines(b), ["llama_batched_bench: n_kv_max"])
    assert got["only_in_B"] == [] and got["markers"]["llama_batched_bench: n_kv_max"] == {"A": 4, "B": 4}
    assert E.judge({"engaged": True, "how": "strings", "why": "read by the build: X in ls x1"}, got)["how"] == "markers"
    absent = E.from_logs(E.read_lines(a), E.read_lines(b), ["paged-demo: series active"])
    eng = E.judge({"engaged": True, "how": "strings", "why": "read"}, absent)
    assert (
        not eng["engaged"]
        and eng["how"] == "markers"
        and "'paged-demo: series active' is in none of arm B's 56 log lines" in eng["why"]
    )


def test_the_verdict_of_a_lever_that_did_not_engage():
    dec = {
        "verdict": "FLAT",
        "why": "s_tg equivalent",
        "key": {"text": "S_TG B/A 1.0000", "ratio": 1.0, "low": 0.99, "high": 1.01},
        "missing": [],
    }
    off = E.judge({"engaged": False, "how": "strings", "why": "LLAMA_KV_PAGDE is in no file of the build"}, None)
    got = E.overrule(dec, off, {"ok": True})
    assert (
        got["verdict"] == E.NOT_ENGAGED
        and got["measured_verdict"] == "FLAT"
        and "LLAMA_KV_PAGDE" in got["why"]
        and got["key"]["ratio"] == 1.0
    )
    assert (
        E.overrule(dec, off, {"ok": False})["verdict"] == "FLAT"
    )  # a red gate is decide()'s NO-GO: the arms' outputs differ
    assert E.overrule(dec, E.judge({"engaged": True, "how": "strings", "why": "read"}, None), {"ok": True}) == dec
    early = E.overrule(
        {**dec, "key": {"text": "S_TG B/A (no interval)", "ratio": None}, "missing": ["no s_tg B/A at any point"]},
        off,
        E.not_gated("BE"),
    )
    assert (
        early["verdict"] == E.NOT_ENGAGED
        and early["missing"] == []
        and early["key"]["text"] == "no B/A (not measured; evidence: strings)"
    )
    assert not E.judge(None, None)["engaged"]  # no evidence at all is no engagement


@pytest.mark.parametrize(
    "markers, says", [([""], "empty pattern"), (["paged-demo: (series"], "not a regular expression")]
)
def test_bad_markers(markers, says):
    from parity.errors import UsageError

    with pytest.raises(UsageError, match=says):
        E.check_markers(markers)
