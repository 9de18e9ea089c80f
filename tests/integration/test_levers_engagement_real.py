"""Engagement proof on real builds (the smoke profile: llama.cpp 0c1e57098 + the demo series, CPU):
a misspelled env lever (LLAMA_KV_PAGDE=1) is in no file of the build, so `parity ab` stops after
the build with NOT ENGAGED (exit 8) and measures nothing; the demo series' own env lever
(PARITY_DEMO_BANNER=1, patches 0001/0003: common_init prints "paged-demo: series active") is
read by the build and its banner is in arm B's bench logs, not arm A's.  Sizes as
test_levers_prebuilt (npl 1, PP 16, TG 4, 2 blocks): a couple of minutes once the build is cached."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import run_parity
from parity.levers import map as levermap

pytestmark = pytest.mark.slow

SMALL = [
    "--model",
    "tiny",
    "--npl",
    "1",
    "--npp",
    "16",
    "--ntg",
    "4",
    "--repeat",
    "2",
    "--gate-models",
    "tiny",
    "--gate-paths",
    "paged",
    "--no-post-gates",
]


def _ab(tmp_path: Path, *args: str):
    prof = tmp_path / "p.yaml"
    prof.write_text(
        f"extends: smoke\nlock: {{dir: {tmp_path}/lock, poll_s: 0.5}}\nlevers: {{map: {tmp_path}/levers.yaml}}\n"
    )
    return run_parity(
        "--artifacts",
        str(tmp_path / "runs"),
        "ab",
        "--profile",
        str(prof),
        "--engine",
        "paged",
        *args,
        *SMALL,
        "--json",
        timeout=3600,
    )


def test_a_misspelled_env_lever_reads_not_engaged(tmp_path):
    r = _ab(tmp_path, "--env", "LLAMA_KV_PAGDE=1")
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("parity: error:")]
    assert r.returncode == 8 and len(errors) == 1, r.stderr[-3000:]
    assert "NOT ENGAGED" in errors[0] and "LLAMA_KV_PAGDE is in no file of the build" in errors[0]
    doc = json.loads(r.stdout)
    run = Path(doc["run_dir"])
    eng = doc["engagement"]
    assert doc["verdict"] == "NOT ENGAGED" and not eng["engaged"] and eng["how"] == "strings"
    strings = eng["evidence"]["build"]["strings"]
    assert (
        strings["missing"] == ["LLAMA_KV_PAGDE"] and strings["searched"] > 5
    )  # the tools, their libraries, the system libraries they load
    # nothing gated, nothing measured: the lock was never taken for it
    assert (
        doc["gates"]["phases"] == []
        and doc["gates"]["ok"] is None
        and doc["measurement"]["points"] == []
        and not list(run.glob("bench-*.log"))
    )
    assert json.loads((run / "summary.json").read_text())["verdict"] == "NOT ENGAGED"
    report = (run / doc["report"]).read_text()
    assert (
        "- NOT ENGAGED" in report and "| engaged | **NO** (strings)" in report and "env string LLAMA_KV_PAGDE" in report
    )
    (row,) = yaml.safe_load((tmp_path / "levers.yaml").read_text())["levers"]
    assert (
        row["lever"] == "LLAMA_KV_PAGDE=1"
        and row["verdict"] == "NOT ENGAGED"
        and row["engaged"].startswith("no (strings): LLAMA_KV_PAGDE is in no file")
    )
    assert (
        levermap.closing_row([row], "LLAMA_KV_PAGDE=1", row["hardware_class"], row["pin"]) is None
    )  # not a verdict on the lever: it never ran


def test_the_demo_series_banner_engages(tmp_path):
    r = _ab(
        tmp_path, "--env", "PARITY_DEMO_BANNER=1", "--marker", r"paged-demo: series active \(parity-demo-series-0003\)"
    )
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    eng = doc["engagement"]
    assert eng["engaged"] and eng["how"] == "markers" and doc["verdict"] in ("GO", "NO-GO", "FLAT", "INCONCLUSIVE")
    build = eng["evidence"]["build"]
    found = build["strings"]["found"]["PARITY_DEMO_BANNER"]
    assert [Path(f).name for f in found] == [
        "libllama-common.so.0.5.0"
    ]  # common_init, which every tool loads (a link to it is not searched twice)
    assert build["series"]["PARITY_DEMO_BANNER"] == [
        "0001-demo-env-gated-series-banner-in-common_init.patch"
    ]  # the patch that adds its getenv()
    logs = eng["evidence"]["logs"]
    (counts,) = logs["markers"].values()
    assert (
        counts["A"] == 0
        and counts["B"] >= 2
        and logs["files"]["B"] == ["bench-paged+lever-b0.log", "bench-paged+lever-b1.log"]
    )
    assert {"line": "paged-demo: series active (parity-demo-series-#)", "count": counts["B"]} in logs["only_in_B"]
    report = (Path(doc["run_dir"]) / doc["report"]).read_text()
    assert "## Engagement" in report and "| engaged | **yes** (markers)" in report
    (row,) = yaml.safe_load((tmp_path / "levers.yaml").read_text())["levers"]
    assert row["verdict"] == doc["verdict"] and row["engaged"].startswith("yes (markers)")
