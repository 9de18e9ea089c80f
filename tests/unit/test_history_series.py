"""Which runs are series points, and what the dashboard shows of them (issue 56): one rule for
every run kind (an ungated bench and an ungated snapshot, both real H100 runs, are out alike;
docs/HISTORY.md states the rule); the index leads with the headline series and lists no
configuration value; a run left out of every series is named with why (the H100 copies of 12
paired points each have no date); a report linked out of its run directory is never copied
into the site (N13)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from inproc import cli
from parity.history import store
from tests.conftest import DATA, REPO

CAPTURED = DATA / "report" / "captured"  # a gated CPU snapshot: medians
STEP = sorted(d for d in (DATA / "history" / "step").iterdir() if (d / "manifest.json").is_file())  # gated, paired S_TG
CUPTI = REPO / "docs" / "evidence" / "device-h100-cupti" / "runs"
UNGATED_BENCH = CUPTI / "20261127_102956_bench-ab"  # `parity bench --engines`: it runs no gates
UNGATED_SNAPSHOT = CUPTI / "20261127_103015_snapshot-moe-big-q8"  # `snapshot --no-gates`: marked invalid
H100_COPY = REPO / "docs" / "evidence" / "device-h100-noise" / "paged-stock"  # 12 paired points, no manifest


def ingest(db: Path, *dirs: Path) -> dict:
    r = cli("history", "ingest", *dirs, "--store", db, "--json")
    assert r.rc == 0, r.err
    return json.loads(r.out)


def test_the_two_ungated_runs_are_what_the_review_saw():
    bench, snap = (json.loads((d / "manifest.json").read_text()) for d in (UNGATED_BENCH, UNGATED_SNAPSHOT))
    assert (bench["kind"], bench["status"], bench["valid"]) == ("bench", "complete", True)
    assert not (UNGATED_BENCH / "gates.json").exists()
    assert (snap["kind"], snap["status"], snap["valid"]) == ("snapshot", "complete", False)
    assert snap["invalid_reasons"] == ["ungated: --no-gates"]
    assert len(json.loads((H100_COPY / "summary.json").read_text())["paired"]) == 12
    assert not (H100_COPY / "manifest.json").exists()


def test_one_membership_rule_for_every_run_kind(tmp_path):
    db = tmp_path / "h.duckdb"
    ingest(db, CAPTURED, STEP[0], UNGATED_BENCH, UNGATED_SNAPSHOT, H100_COPY)
    r = cli("history", "changes", "--kind", "all", "--min-points", "4", "--store", db, "--json")
    assert r.rc == 0, r.err
    doc = json.loads(r.out)
    assert [s["series_id"] for s in doc["series"] if s["last_run"] in (UNGATED_BENCH.name, UNGATED_SNAPSHOT.name)] == []
    why = {x["run_id"]: x["why"] for x in doc["left_out"]}
    undated = "no date (a copy without its manifest)"
    assert why == {UNGATED_BENCH.name: "ungated", UNGATED_SNAPSHOT.name: "ungated", H100_COPY.name: undated}
    with store.connect(db, write=False) as con:
        members = {r[0] for r in con.execute("SELECT DISTINCT run_id FROM series WHERE member").fetchall()}
        ids = {r[0] for r in con.execute("SELECT DISTINCT series_id FROM series WHERE member").fetchall()}
        sql = "SELECT count(*) FROM paired JOIN runs USING (run_key) WHERE run_id = ?"
        kept = con.execute(sql, [UNGATED_BENCH.name]).fetchone()[0]
    assert members == {"20261122_181422_snapshot-tiny", STEP[0].name}  # the gated snapshot and the gated nightly
    assert ids == {s["series_id"] for s in doc["series"]}  # the view and `changes` hold one rule
    assert kept > 0  # left out of the series, not out of the store
    human = cli("history", "changes", "--store", db)
    assert "3 runs of the store are no point of any series: 2 ungated, 1 no date" in human.err + human.out


def test_the_rule_is_the_one_docs_history_states():
    text = (REPO / "docs" / "HISTORY.md").read_text()
    assert "one rule for every run kind" in text and "an ungated run is no point, whatever its kind" in text
    rule = store.RUN_COUNTS
    assert rule.count("AND") == 3 and "gate_status = 'pass'" in rule and "valid IS NOT FALSE" in rule
    assert "r.counts" in rule and "run_at IS NOT NULL" in rule


def sections(html: str) -> list[str]:
    return re.findall(r"<h2>(.*?)</h2>", html)


def test_the_dashboard_leads_with_the_headline_series_and_lists_no_configuration_value(tmp_path):
    db = tmp_path / "h.duckdb"
    ingest(db, CAPTURED, *STEP[:3], H100_COPY)
    r = cli("history", "site", tmp_path / "site", "--kind", "all", "--store", db, "--json")
    assert r.rc == 0, r.err
    index = (tmp_path / "site" / "index.html").read_text()
    assert sections(index) == ["headline series", "change points", "other series", "runs in no series"]
    head = index.split("<h2>headline series</h2>")[1].split("<h2>")[0]
    metrics = re.findall(r"<tr><td>([a-z_]+)</td>", head)
    assert metrics[0] == "decode_agg_tps" and {"decode_agg_tps", "ttft_mean_ms", "s_tg"} <= set(metrics)
    order = ("decode_agg_tps", "ttft_mean_ms", "s_tg", "decode_perseq_tps", "agg_tps")
    assert metrics == sorted(metrics, key=order.index)
    assert re.search(r"s_tg</a></td><td>ratio 0\.9\d+</td><td>\[0\.9\d+, 1\.0\d+\]</td>", head)  # a ratio, its interval
    pages = [index, *(p.read_text() for p in (tmp_path / "site" / "series").iterdir())]
    for config in store.CONFIG_METRICS:
        assert not any(f"| {config}<" in p or f"| {config}</" in p for p in pages), config
    assert len(list((tmp_path / "site" / "series").iterdir())) == json.loads(r.out)["series"] > 0
    left = index.split("<h2>runs in no series</h2>")[1]
    assert f"<td>{H100_COPY.name}</td><td>snapshot</td><td>-</td><td>no date (a copy without its manifest)</td>" in left


@pytest.mark.parametrize("link", ["the report", "the reports dir"])
def test_the_site_never_follows_a_report_link_out_of_its_run_dir(tmp_path, link):
    runs = tmp_path / "runs"
    linked, plain = (shutil.copytree(d, runs / d.name) for d in STEP[:2])
    secret = tmp_path / "outside" / "secret.md"
    secret.parent.mkdir()
    secret.write_text("SECRET-56 not for the dashboard\n")
    (rep,) = (linked / "reports").glob("*-phase*.md")
    if link == "the report":
        rep.unlink()
        rep.symlink_to(secret)
    else:
        shutil.rmtree(linked / "reports")
        (linked / "reports").symlink_to(secret.parent)
        (secret.parent / rep.name).symlink_to(secret)
    db = tmp_path / "h.duckdb"
    ingest(db, linked, plain)
    with store.connect(db) as con:  # a store an older parity wrote: the link recorded as the run's report
        con.execute("UPDATE runs SET report = ? WHERE run_id = ?", [str(rep), linked.name])
    r = cli("history", "site", tmp_path / "site", "--store", db, "--json")
    assert r.rc == 0, r.err
    published = [f.read_text(errors="replace") for f in (tmp_path / "site").rglob("*") if f.is_file()]
    assert not any("SECRET-56" in t for t in published)
    doc = json.loads(r.out)
    (why,) = doc["skipped"]
    assert "a link out of its run directory: not copied" in why and linked.name in why
    (mine,) = (plain / "reports").glob("*-phase*.md")
    assert mine.read_text() in published  # a report inside its run dir is copied
    r = cli("history", "site", tmp_path / "site2", "--store", db)
    assert r.rc == 0 and "a link out of its run directory" in r.err
