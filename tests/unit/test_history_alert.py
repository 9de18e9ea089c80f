"""From a change point to the bisect command (parity.history.alert): which engine's provenance
moved between the last run before the step and the first after it, and the exact command; the
commands are accepted by the real `parity bisect` option parser."""

from __future__ import annotations

import json
import shlex

from parity.history import alert, cells, source
from tests.conftest import DATA, REPO, run_parity

LEVER_RUN = next((REPO / "docs" / "evidence" / "device-h100-levers" / "runs").glob("2026*"))  # an H100 run: paged at pin 0ed235ea
SDIST_PIN = "0c1e57098"  # the upstream llama.cpp commit the llama-cpp-python 0.3.36 sdist vendors (DESIGN.md)


def builds_of(run_dir) -> dict:
    return {b["engine"]: b for b in cells.cells(source.read_run(run_dir))["builds"]}


def change(engine="paged", reference="stock", point="PP=128 TG=128 B=32", n=32, metric="s_tg", step=-3.0) -> dict:
    return {"series": {"engine": engine, "reference": reference, "point": point, "n": n, "metric": metric, "workload": "batched-bench moe"}, "step_pct": step}


def test_a_moved_pin_gives_a_pin_bisection_over_the_two_commits():
    before = builds_of(LEVER_RUN)
    after = {e: {**b, "pin": SDIST_PIN} for e, b in before.items()}
    plan = alert.plan(change(), before, after, {"profile": "/x/h100.yaml", "model": "moe-big-q8"})
    assert plan["over"] == "pin" and plan["engine"] == "paged"
    assert plan["command"] == shlex.join(["parity", "bisect", "--over", "pin", "--criterion", "metric", "--good", before["paged"]["pin"], "--bad", SDIST_PIN, "--engine", "paged",
                                          "--metric", "s_tg", "--min-delta-pct", "1.5", "--npp", "128", "--ntg", "128", "--npl", "32", "-m", "moe-big-q8", "-p", "/x/h100.yaml"])  # fmt: skip


def test_the_metric_maps_to_the_probe_and_a_serving_point_to_npl():
    before = builds_of(LEVER_RUN)
    after = {e: {**b, "pin": SDIST_PIN} for e, b in before.items()}
    argv = alert.plan(change(point="N=8", n=8, metric="ttft_mean_ms", step=5.0), before, after, {})["commands"][0]
    assert argv[argv.index("--metric") + 1] == "s_pp" and argv[argv.index("--npl") + 1] == "8" and "--npp" not in argv and "-p" not in argv
    assert argv[argv.index("--min-delta-pct") + 1] == "2.5"


def test_nothing_moved_or_no_commits_or_only_removals_say_why():
    same = builds_of(LEVER_RUN)
    assert alert.plan(change(), same, same, {})["command"] is None
    assert alert.plan(change(), same, same, {})["why"].startswith("the builds of paged are the same on both sides (pin, series, flags); no builds.json provenance for stock on both sides")
    cpu = builds_of(DATA / "report" / "captured")  # pypi-sdist source: a package, not a commit
    moved = {e: {**b, "pin": "llama-cpp-python==0.3.37"} for e, b in cpu.items()}
    plan = alert.plan(change(), cpu, moved, {})
    assert plan["command"] is None and "not two commits of one repository" in plan["why"]
    patches = json.loads(cpu["paged"]["patches"])
    shorter = {**cpu, "paged": {**cpu["paged"], "series_digest": "other", "patches": json.dumps(patches[:-1])}}
    assert "only lost patches" in alert.plan(change(), cpu, shorter, {})["why"]
    assert alert.series_range(patches[:1], patches) == ("0003", "0003")
    assert alert.series_range([], patches) == ("0001", "0003")


def test_the_printed_pin_command_parses_in_the_real_cli(tmp_path):
    before = builds_of(LEVER_RUN)
    after = {e: {**b, "pin": SDIST_PIN} for e, b in before.items()}
    argv = alert.plan(change(), before, after, {"profile": "smoke", "model": "tiny"})["commands"][0]
    r = run_parity("--artifacts", str(tmp_path / "runs"), *argv[1:])
    # every option is known; smoke's paged names no llama.cpp checkout to bisect in, so it stops there, before any run
    assert r.returncode == 2 and r.stderr.strip() == "parity: error: engine paged: its source names no llama.cpp checkout or url: give --repo PATH|URL"
    assert not (tmp_path / "runs").exists()
