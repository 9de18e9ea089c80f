"""The acceptance nights (tests/data/history, README.md there): 20 real CPU nightlies of
campaigns/nightly-cpu.yaml with a known 3 % step from night 12 on (patch 0004 of
campaigns/series/demo-slow makes every llama_decode 3.09 % longer: throughput x 0.970), and an
A/A series of the same length (nights 1-11, then 9 more without the patch).  From the run dirs
alone: the store finds the step at night 12 with its size and interval, nothing in the A/A, the
bisect command that searches patch 0004, and the night that confirmed it exited 7 after printing
that command."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import DATA, run_parity

HIST = DATA / "history"
STEP = sorted(d for d in (HIST / "step").iterdir() if (d / "manifest.json").is_file())
AA = STEP[:11] + sorted(d for d in (HIST / "aa").iterdir() if (d / "manifest.json").is_file())
KNOWN = 1 / 1.0309 - 1  # the step patch 0004 makes: -2.997 %


def changes(tmp_path, dirs, *args) -> dict:
    db = tmp_path / "h.duckdb"
    r = run_parity("history", "ingest", *map(str, dirs), "--store", str(db), "--json")
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["ingested"]) == len(dirs)
    r = run_parity("history", "changes", "--store", str(db), "--json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_the_nights_are_what_the_readme_says():
    assert len(STEP) == 20 and len(AA) == 20
    digests = [json.loads((d / "builds.json").read_text())["paged"]["series_digest"] for d in STEP]
    assert len(set(digests[:11])) == 1 and len(set(digests[11:])) == 1 and digests[0] != digests[11]
    assert {json.loads((d / "builds.json").read_text())["paged"]["series_digest"] for d in AA} == {digests[0]}
    assert [p["name"] for p in json.loads((STEP[-1] / "builds.json").read_text())["paged"]["patches"]][-1] == "0004-demo-decode-3-percent-slower.patch"


def test_the_step_is_found_at_night_12_with_its_size_and_interval(tmp_path):
    doc = changes(tmp_path, STEP)
    tg = [c for c in doc["changes"] if c["series"]["metric"] == "s_tg"]
    assert tg, f"no change in the S_TG series: {[(s['series_id'], s['status']) for s in doc['series']]}"
    for c in tg:
        assert c["night"] == 12 and c["status"] == "confirmed" and c["direction"] == "worse"
        assert c["low_pct"] < KNOWN * 100 < c["high_pct"] and c["high_pct"] < 0  # the known step inside, 0 outside
        assert -4.5 < c["step_pct"] < -1.5
        assert c["before"]["runs"] == 11 and c["after"]["runs"] == 9 and c["pvalue"] <= 0.001
        assert c["before"]["pins"] == c["after"]["pins"] == ["llama-cpp-python==0.3.36"]
        assert c["before"]["series_digests"] != c["after"]["series_digests"]
        b = c["bisect"]
        assert b["over"] == "series" and b["engine"] == "paged"
        argv = b["commands"][0]
        assert argv[:6] == ["parity", "bisect", "--over", "series", "--criterion", "metric"]
        assert argv[argv.index("--series") + 1].endswith("campaigns/series/demo-slow")
        assert argv[argv.index("--first") + 1] == argv[argv.index("--last") + 1] == "0004"
        assert argv[argv.index("--metric") + 1] == "s_tg" and argv[argv.index("-m") + 1] == "tiny"
        assert argv[argv.index("--npl") + 1] == c["series"]["point"].split("B=")[1]
        assert argv[argv.index("-p") + 1].endswith("campaigns/profiles/history-cpu-slow.yaml")
    assert not [c for c in doc["changes"] if c["status"] == "confirmed" and c["night"] != 12]


def test_the_aa_series_of_the_same_length_has_no_change(tmp_path):
    doc = changes(tmp_path, AA)
    assert doc["changes"] == []
    assert {s["points"] for s in doc["series"]} == {20} and {s["status"] for s in doc["series"]} == {"analysed"}


def test_too_short_then_pending_then_confirmed(tmp_path):
    short = changes(tmp_path / "a", STEP[:9])
    assert short["changes"] == [] and {s["status"] for s in short["series"]} == {"too short: 9 points, needs 10"}
    pending = changes(tmp_path / "b", STEP[:13], "--metric", "s_tg")
    assert all(c["status"].startswith("pending") for c in pending["changes"])
    confirmed = changes(tmp_path / "c", STEP[:14], "--metric", "s_tg")
    assert {(c["night"], c["status"]) for c in confirmed["changes"]} <= {(12, "confirmed")}


def test_the_nightly_that_confirmed_it_exited_7_and_printed_the_command():
    exits = [json.loads((d / "campaign.json").read_text())["exit_code"] for d in STEP]
    first = exits.index(7)
    assert set(exits[:first]) == {0} and first >= 13  # confirmed once 3 nights stood after it
    log = (HIST / "step" / f"night-{first + 1}.log").read_text()
    assert re.search(r"\[history\]   bisect: parity bisect --over series --criterion metric --series \S+demo-slow --first 0004 --last 0004", log)
    m = json.loads((STEP[first] / "manifest.json").read_text())
    assert m["steps"]["history"]["exit_code"] == 7 and "change point confirmed" in m["steps"]["history"]["error"]
    aa_exits = [json.loads((d / "campaign.json").read_text())["exit_code"] for d in AA]
    assert set(aa_exits) == {0}


@pytest.mark.parametrize("dirs", [STEP, AA], ids=["step", "aa"])
def test_every_night_is_green_and_counts(tmp_path, dirs):
    from parity.history import cells, source

    for d in dirs:
        run = cells.cells(source.read_run(d))["runs"][0]
        assert run["gate_status"] == "pass" and run["counts"] and run["hardware_class"] == "cpu_only"
