"""Each metric's roles are declared once, with the metric (parity.metrics.serving.Metric), and
every reader asks parity.metrics.registry: a metric added in that one place is in the summary,
the users' summary.tsv, parity_summary.tsv, the report, the console, the matrix report and the
profile's stats.metrics.  The rows come from the real requests parity sent two llama-server
builds (tests/data/llama_server/ttft: the smoke `stock` and the users' pin, N=1 and N=4), through
the sweep's own row code (parity.serving.rounds)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import msgspec
import pytest

from parity.artifacts import RunDir
from parity.config import load_profile
from parity.loadgen.record import RequestRecord
from parity.metrics import registry, serving
from parity.metrics.validity import point_verdict
from parity.serving import rounds, summary

DATA = Path(__file__).resolve().parents[1] / "data"
ENGINES = {"stock": "smoke-stock", "pin": "pin-stock"}  # engine -> its captured requests (README there)
E2E = "e2e_mean_ms"


def records(name: str) -> list[RequestRecord]:
    rows = json.loads((DATA / "llama_server" / "ttft" / name).read_text())
    return [msgspec.convert({k: v for k, v in r.items() if k != "valid"}, RequestRecord) for r in rows]


def e2e_mean_ms(rs) -> float:
    ends = [(r.end - r.send) * 1000 for r in rs if r.end is not None]
    if not ends:
        raise serving.NoValue("no request finished")
    return sum(ends) / len(ends)


NEW = serving.Metric(E2E, "ms", "lower", "mean over requests of (last token arrival - send)", e2e_mean_ms,
                     headline=5, column=10, console=True, compared=True, users=7, users_ratio="e2e")


def sweep_rows() -> list[dict]:
    """One repeat per engine x N, as parity.serving.sweep.run_point builds a row from its rounds."""
    out = []
    for engine, prefix in ENGINES.items():
        for n in (1, 4):
            recs = records(f"{prefix}-n{n}.json")
            metrics, why = rounds.metrics(rounds.split(recs, n))
            row = {"engine": engine, "n": n, "repeat": 0, "rounds": len(recs) // n, **metrics, "why": why}
            problems = point_verdict(recs, row, min_window_s=0.0)
            ok = sum(r.valid for r in recs)
            row.update(requests=len(recs), valid_requests=ok, invalid_requests=len(recs) - ok, prompt="tokens",
                       valid=not problems, invalid_reasons=problems)
            out.append(row)
    return out


def snapshot_run(tmp_path: Path, profile) -> tuple[Path, dict]:
    """A run dir with the real smoke snapshot's manifest, hardware, gates and builds
    (tests/data/report/captured) and the summary files parity's own summary code writes."""
    run = tmp_path / "run"
    shutil.copytree(DATA / "report" / "captured", run)
    (run / "summary.json").unlink()
    shape = SimpleNamespace(ptok=32, gen=16, parallel=4, ctx=1024, prompt="tokens", min_window_s=0.0,
                            invalid_tolerance=0.0, order="abab", min_requests=8)
    plan = SimpleNamespace(model="tiny", engines=list(ENGINES), reference="stock", shape=shape, npl=[1, 4], repeat=1,
                           sized=None, order=[(0, e) for e in ENGINES], stats=profile.stats)
    doc = summary.write(plan, RunDir(run), sweep_rows())
    return run, doc


def cells(items: list[dict]) -> set:
    return {(x["n"], x["metric"]) for x in items if x["metric"] == E2E}


def test_a_metric_declared_in_one_place_is_in_every_table(tmp_path, monkeypatch):
    from parity.cli.snapshot import render_summary
    from parity.matrix.report import build_report
    from parity.report.render import ReportRequest, render_report

    before, _ = snapshot_run(tmp_path / "before", load_profile("smoke"))
    assert E2E not in (before / "summary.tsv").read_text() + (before / "parity_summary.tsv").read_text()

    monkeypatch.setitem(serving.METRICS, E2E, NEW)  # the one place
    profile = load_profile("smoke")
    assert profile.stats.metrics == ["decode_agg_tps", "decode_perseq_tps", "agg_tps", "ttft_mean_ms", E2E]
    run, doc = snapshot_run(tmp_path, profile)

    # the summary: its value over every request of the point, its ratio, its paired rows
    want = {(e, n): round(e2e_mean_ms([r for r in records(f"{p}-n{n}.json") if r.valid]), 4)
            for e, p in ENGINES.items() for n in (1, 4)}
    assert {(m["engine"], m["n"]): m[E2E] for m in doc["medians"]} == want
    assert {r["n"]: r[E2E] for r in doc["ratios"]} == {n: round(want["pin", n] / want["stock", n], 4) for n in (1, 4)}
    assert cells(doc["paired"]) == {(1, E2E), (4, E2E)}
    assert json.loads((run / "summary.json").read_text())["medians"][0][E2E] is not None

    # the users' summary.tsv: their columns, then the new one; its ratio last in their ratio block
    arms, ratio = (run / "summary.tsv").read_text().split("\n\n")
    assert arms.splitlines()[0].split("\t") == ["arm", "n", "agg_tps", "decode_agg_tps", "decode_perseq_tps",
                                                "prefill_tps", "ttft_mean_ms", "wall_s", E2E]
    assert ratio.splitlines()[0].split("\t")[-1] == "pin_e2e_over_stock"
    assert ratio.splitlines()[-1].endswith(f"\t{want['pin', 4] / want['stock', 4]:.4f}")
    assert E2E in (run / "parity_summary.tsv").read_text().splitlines()[0].split("\t")

    # the report: the results table, the ratio table, the paired rows, the definitions
    req = ReportRequest(run=str(run), out_dir=str(tmp_path / "reports"), date="2026-11-29", plots=False)
    res = render_report(profile, req)
    lines = Path(res["report"]).read_text().splitlines()
    assert ("| engine | N | repeats | decode_agg_tps | decode_perseq_tps | agg_tps | prefill_tps | ttft_mean_ms | "
            f"wall_s | decode_window_s | prompt_tok_total | gen_total | {E2E} |") in lines
    assert ("| engine | N | repeats | decode_agg_tps | verdict | decode_perseq_tps | verdict | agg_tps | verdict | "
            f"ttft_mean_ms | verdict | {E2E} | verdict |") in lines
    assert f"| {E2E} | ms | lower | mean over requests of (last token arrival - send) |" in lines
    assert cells(res["paired"]) == {(1, E2E), (4, E2E)}

    # the console and the matrix report
    seen = []
    out = SimpleNamespace(table=lambda title, cols, rs: seen.append(cols), info=seen.append, warn=seen.append)
    render_summary(out, {**doc, "run_dir": str(run)})
    assert E2E in seen[0]
    assert any(isinstance(x, str) and x.startswith("pin/stock N=4:") and f"{E2E} " in x for x in seen)
    matrix = build_report(tmp_path, "m", [{"target": "t", "host": "local", "run_dir": "run"}])
    assert E2E in matrix["metrics"] and cells(matrix["medians"]) == {(1, E2E), (4, E2E)}


def test_the_roles_as_declared():
    assert registry.headline() == ["decode_agg_tps", "decode_perseq_tps", "agg_tps", "ttft_mean_ms"]
    assert registry.columns() == ["decode_agg_tps", "decode_perseq_tps", "agg_tps", "prefill_tps", "ttft_mean_ms",
                                  "wall_s", "decode_window_s", "prompt_tok_total", "gen_total"]
    assert registry.console_columns() == registry.columns()[:7]
    assert registry.compared() == ["decode_agg_tps", "decode_perseq_tps", "agg_tps", "prefill_tps", "ttft_mean_ms"]
    assert registry.users_columns() == ["agg_tps", "decode_agg_tps", "decode_perseq_tps", "prefill_tps",
                                        "ttft_mean_ms", "wall_s"]
    assert registry.users_ratios() == {"decode_agg_tps": "decode", "decode_perseq_tps": "perseq", "agg_tps": "agg",
                                       "ttft_mean_ms": "ttft"}
    assert set(registry.per_round()) == {"gen_total", "prompt_tok_total", "wall_s", "agg_tps", "decode_agg_tps",
                                         "decode_window_s", "steady_decode_tps", "prefill_tps", "ttft_max_ms"}
    assert [registry.direction(m) for m in registry.headline()] == ["higher", "higher", "higher", "lower"]
    roles = (registry.headline(), registry.columns(), registry.users_columns(), list(registry.users_ratios()))
    assert not registry.unknown([n for role in roles for n in role])
    assert registry.unknown(["decode_tps", "ttft_p99_ms"]) == ["decode_tps"]


def test_a_profile_naming_an_undeclared_metric_is_refused(tmp_path):
    from parity.errors import ConfigError

    path = tmp_path / "p.yaml"
    path.write_text("extends: smoke\nstats: {metrics: [decode_agg_tps, decode_tps]}\n")
    with pytest.raises(ConfigError) as e:
        load_profile(str(path))
    assert e.value.key == "stats.metrics"
    assert e.value.problem.startswith("decode_tps is not a declared metric (the headline: decode_agg_tps, ")
    path.write_text("extends: smoke\nstats: {metrics: [ttft_p99_ms, stall_max_ms]}\n")  # a serving metric, a workload's
    assert load_profile(str(path)).stats.metrics == ["ttft_p99_ms", "stall_max_ms"]
