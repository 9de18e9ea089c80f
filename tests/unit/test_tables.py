"""parity.tables on the users' real files and on real run dirs: their final_benchmark.csv read
typed, every figure they printed from it ("x over stock", "% of vLLM") computed from its own
columns; their summary.tsv / gate_summary.tsv read; parity's own TSV/CSV files written through
the one writer, byte for byte what the real runs hold; the second reference of `parity report`;
`parity history sql --csv/--parquet`."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DATA, REPO, needs_shared, run_parity
from parity import results, tables
from parity.metrics.registry import users_ratios
from parity.report.rundata import load_run
from parity.serving import summary

USERS = DATA / "users-tables"
USERS_ART = DATA / "users-art" / "phase72"
CAPTURED = DATA / "report" / "captured"
EXAMPLE = REPO / "docs" / "evidence" / "example-report"
H100_RUNS = [REPO / "docs" / "evidence" / "device-h100-noise" / d for d in ("aa", "lever", "paged-stock")] + [
    REPO / "docs" / "evidence" / "device-h100-cupti" / "runs" / "20261127_103015_snapshot-moe-big-q8"]
MODELS = {"Dense": "q36-27b-nvfp4", "MoE": "q36-35b-a3b-nvfp4"}


def benchmark():
    return tables.final_benchmark((USERS / "final_benchmark.csv").read_text())


def per_model(model: str) -> list[dict]:
    """One model's rows of final_benchmark.csv as medians (npl is the N), their engine names."""
    part = benchmark()
    return tables.records(part[part["model"] == model].rename(columns={"npl": "n"}))


def readme_tables() -> dict[str, list[list[str]]]:
    """{"Dense"|"MoE": rows [npl, stock, patched, vLLM, "1.25x"]} of the users' README tables."""
    out, current = {}, None
    for line in (USERS / "readme-patched-vs-stock-vs-vllm.md").read_text().splitlines():
        m = re.match(r"\*\*(Dense|MoE) ", line)
        if m:
            current = out.setdefault(m.group(1), [])
        elif current is not None and re.match(r"\|\s*\d", line):
            current.append([c.strip() for c in line.strip("|").split("|")])
    return out


def readme_percents(kind: str) -> list[int]:
    """The "% of vLLM" sentence of one model ("121 / 100 / 99 / 91% of vLLM")."""
    text = " ".join((USERS / "readme-patched-vs-stock-vs-vllm.md").read_text().split())
    head = {"Dense": "Dense **patched** is parity-to-ahead of vLLM (", "MoE": "MoE **patched** is "}[kind]
    said = text[text.index(head) + len(head):].split("% of vLLM")[0]
    return [int(x) for x in said.split(" / ")]


# ----------------------------------------------------------------- final_benchmark.csv


def test_final_benchmark_reads_typed():
    f = benchmark()
    assert list(f.columns) == tables.FINAL_BENCHMARK_COLUMNS and len(f) == 24
    assert [str(f[c].dtype) for c in ("npl", "decode_agg_tps", "prefill_tps")] == ["int64", "float64", "float64"]
    assert sorted(set(f["engine"])) == ["llama-patched", "llama-stock", "vllm"]
    assert sorted(set(f["npl"])) == [8, 32, 64, 128]
    row = per_model(MODELS["MoE"])[-1]
    assert row == {"model": "q36-35b-a3b-nvfp4", "engine": "vllm", "n": 128, "decode_agg_tps": 882.2,
                   "prefill_tps": 5300.5}
    assert type(row["n"]) is int and type(row["decode_agg_tps"]) is float  # plain Python values, as JSON writes them


@pytest.mark.parametrize("kind", ["Dense", "MoE"])
def test_x_over_stock_and_percent_of_vllm_are_the_users_figures(kind):
    """Their README tables: the stock / patched / vLLM columns are the CSV's, and "patched x over
    stock" and "% of vLLM" come out of the CSV's own columns as they printed them."""
    rows = tables.against(per_model(MODELS[kind]), ["vllm", "llama-stock"], ["decode_agg_tps"])
    got = {(d["n"], d["metric"]): d for d in rows if d["engine"] == "llama-patched"}
    values = {(d["engine"], d["n"]): d["value"] for d in rows}
    printed = readme_tables()[kind]
    assert [int(r[0]) for r in printed] == [8, 32, 64, 128]
    for npl, stock, patched, vllm, x in printed:
        n = int(npl)
        engines = ("llama-stock", "llama-patched", "vllm")
        assert [values[(e, n)] for e in engines] == list(map(float, (stock, patched, vllm)))
        assert f"{got[(n, 'decode_agg_tps')]['over']['llama-stock']:.2f}x" == x
    assert [round(got[(n, "decode_agg_tps")]["over"]["vllm"] * 100) for n in (8, 32, 64, 128)] == readme_percents(kind)
    top = {"Dense": "2.46x", "MoE": "2.26x"}[kind]  # "up to 2.46x (dense) / 2.26x (MoE) over true-stock"
    assert f"{max(d['over']['llama-stock'] for d in got.values()):.2f}x" == top


def test_prefill_percent_of_vllm_ranges_of_the_lever_map():
    """Their lever map: MoE prefill "29-41%" of vLLM holds; the dense "44-48%" does not at npl 32
    (919.0 / 2182.6 = 42.1 %): their ~922 vs ~1929-2182 was rounded before dividing."""
    text = (USERS / "lever-map-prefill-grounding.md").read_text()
    assert "patched is **29-41%** of vLLM" in text and "patched is **44-48%** of vLLM" in text

    def percents(model):
        rows = tables.against(per_model(model), ["vllm"], ["prefill_tps"])
        return [d["over"]["vllm"] * 100 for d in rows if d["engine"] == "llama-patched"]

    moe, dense = percents(MODELS["MoE"]), percents(MODELS["Dense"])
    assert (round(min(moe)), round(max(moe))) == (29, 41)
    assert (round(min(dense)), round(max(dense))) == (42, 48) and round(dense[1], 1) == 42.1


@pytest.mark.parametrize("edit,said", [
    (lambda t: t.replace("68.3", "inf"), "'inf' where a number must be finite"),
    (lambda t: t.replace("68.3", ""), "decode_agg_tps is '', not a number"),
    (lambda t: t.replace("llama-stock,8,", "llama-stock,8.5,", 1), "npl is '8.5', not an integer"),
    (lambda t: t.replace("prefill_tps", "prefill"), "no column prefill_tps"),
    (lambda t: t + "q36-27b-nvfp4,vllm,8,70.4,2096.2\n", "q36-27b-nvfp4 vllm npl 8 twice"),
    (lambda t: t.replace("68.3,937.7", "68.3,937.7,1"), "line 2 does not fit its header's columns"),
    (lambda t: t.replace("68.3,937.7", "68.3"), "row 2 does not fit its header's columns"),
])  # fmt: skip
def test_a_broken_final_benchmark_is_one_line_naming_it(edit, said):
    with pytest.raises(ValueError) as e:
        tables.final_benchmark(edit((USERS / "final_benchmark.csv").read_text()))
    assert said in str(e.value) and str(e.value).startswith("final_benchmark.csv: ") and "\n" not in str(e.value)


@needs_shared("localai-paged/docs/final_benchmark.csv", "localai-paged/README.md",
              "localai-paged/docs/VLLM_PARITY_LEVER_MAP.md")
def test_the_copies_are_the_users_text():
    shared = REPO.parent / "shared" / "localai-paged"
    assert (USERS / "final_benchmark.csv").read_bytes() == (shared / "docs" / "final_benchmark.csv").read_bytes()
    copies = {"readme-patched-vs-stock-vs-vllm.md": "README.md",
              "lever-map-prefill-grounding.md": "docs/VLLM_PARITY_LEVER_MAP.md"}
    for copy, src in copies.items():
        assert (USERS / copy).read_text() in (shared / src).read_text()


# ----------------------------------------------------------------- the users' serving TSVs


def test_their_ratio_block_comes_out_of_their_arm_table():
    """summary.tsv of their harness: the ratio block recomputed from the arm table (tables.over)
    is the block their write_summary printed, to its 4 decimals."""
    arms, (block,) = tables.users_summary((USERS_ART / "summary.tsv").read_text(), columns=["arm", "n"])
    assert str(arms["n"].dtype) == "int64" and len(arms) == 6
    named = users_ratios()
    over = tables.over(tables.records(arms.rename(columns={"arm": "engine"})), "vllm", list(named))
    for theirs in tables.records(block):
        mine = next(r for r in tables.records(over) if r["n"] == theirs["n"])
        want = [theirs[f"paged_{short}_over_vllm"] for short in named.values()]
        assert [round(mine[f"{k} over"], 4) for k in named] == want


@needs_shared("localai-paged/paged-current-serving-snapshot.sh")
def test_parity_summary_tsv_is_what_their_write_summary_prints():
    """Their write_summary run on their artifact dir and parity's users_tsv on the same rows: the
    same arm rows (theirs in the glob's order) and the same ratio block, byte for byte."""
    from test_users_artifacts import their_python

    theirs = subprocess.run([sys.executable, "-", str(USERS_ART)], input=their_python("write_summary"),
                            capture_output=True, text=True, timeout=60)
    assert theirs.returncode == 0, theirs.stderr
    ours = summary.users_tsv(summary.medians(load_run(USERS_ART).rows()), "vllm")
    (t_arms, t_ratio), (o_arms, o_ratio) = theirs.stdout.split("\n\n"), ours.split("\n\n")
    assert o_ratio == t_ratio and o_arms.splitlines()[0] == t_arms.splitlines()[0]
    assert sorted(o_arms.splitlines()) == sorted(t_arms.splitlines())


# ----------------------------------------------------------------- parity's own files through the one writer


@pytest.mark.parametrize("run", H100_RUNS, ids=lambda p: p.name)
def test_the_writer_gives_the_files_real_runs_hold(run):
    """summary.tsv, parity_summary.tsv and paired.tsv of real H100 runs, regenerated from their
    summary.json (typed by the reader: rows, medians, ratios) through parity.tables.tsv: the same bytes."""
    s = results.read_summary(run / "summary.json").typed
    files = {"summary.tsv": summary.users_tsv(s.medians, s.reference_engine),
             "parity_summary.tsv": summary.parity_tsv(s.rows, s.medians, s.ratios),
             "paired.tsv": summary.paired_tsv(json.loads((run / "summary.json").read_text()).get("paired") or [])}
    held = [f for f in files if (run / f).is_file()]
    assert len(held) >= 2
    for f in held:
        assert files[f] == (run / f).read_text(), f


def test_the_gate_tables_of_the_nightlies_come_out_the_same(tmp_path):
    """gate_summary.tsv (the users' layout) and gate_checks.tsv of the 29 real CPU nightlies,
    written again from their gates.json."""
    from parity.artifacts import RunDir
    from parity.config import load_profile
    from parity.gates import summary as gates

    profile = load_profile(str(REPO / "campaigns" / "profiles" / "history-cpu.yaml"))
    nights = sorted((DATA / "history").glob("*/*_nightly-cpu"))
    assert len(nights) == 29
    for night in nights:
        sets = {k: v for k, v in json.loads((night / "gates.json").read_text()).items() if k != "status"}
        rd = RunDir.create(tmp_path / night.name, "x", argv=["t"])
        gates.write(rd, sets, profile.gates.engine, gates.default_paths(profile.engines))
        assert (rd.path / "gate_checks.tsv").read_text() == (night / "gate_checks.tsv").read_text()
        where = f"/tmp/hn/{night.parent.name}/{night.name}"  # the run's path when it ran
        written = (rd.path / "gate_summary.tsv").read_text().replace(str(rd.path), where)
        assert written == (night / "gate_summary.tsv").read_text()


def test_the_ledger_is_written_as_the_example_holds_it(tmp_path):
    """The example report's BENCHMARK.csv: appended from its sidecar's row, and rebuilt from the report."""
    from parity.report import ledger

    row = json.loads((EXAMPLE / "2026-11-23-phase001-smoke-campaign.json").read_text())["ledger"]
    (tmp_path / "a").mkdir()
    ledger.append(tmp_path / "a", row)
    assert (tmp_path / "a" / "BENCHMARK.csv").read_bytes() == (EXAMPLE / "BENCHMARK.csv").read_bytes()
    copy = shutil.copytree(EXAMPLE, tmp_path / "b")
    (copy / "BENCHMARK.csv").unlink()
    ledger.rebuild(copy)
    assert (copy / "BENCHMARK.csv").read_bytes() == (EXAMPLE / "BENCHMARK.csv").read_bytes()


def test_a_tab_or_line_break_in_a_cell_never_splits_a_row():
    text = tables.tsv(["a", "b", "c"], [["x\ty", None, "two\nlines\r"], {"a": 1.5, "c": True}])
    assert text == "a\tb\tc\nx y\t\ttwo lines \n1.5\t\tTrue\n"
    assert tables.records(tables.read_tsv(text, "t"))[0] == {"a": "x y", "b": "", "c": "two lines "}


# ----------------------------------------------------------------- the second reference of a report


def example_medians() -> list[dict]:
    """The medians of the example report's real smoke run (paged, stock, vllm; its sidecar keeps
    them as the report printed them)."""
    res = json.loads((EXAMPLE / "2026-11-23-phase001-smoke-campaign.json").read_text())["results"]
    return [{"engine": r[0], "n": r[1], **{m: float(v) for m, v in zip(res["metrics"], r[3:])}} for r in res["rows"]]


def test_x_over_stock_of_the_example_run_is_its_own_ratio_table():
    """The example report's ratios vs stock (its table and headline) come back from its medians
    as "x over stock", within what the medians' printed decimals allow."""
    md = (EXAMPLE / "2026-11-23-phase001-smoke-campaign.md").read_text()
    table = md[md.index("## Ratios vs the reference engine (stock)"):].split("\n\n")[2].splitlines()[2:]
    # engine, N, repeats, then each metric's ratio and verdict
    cells = {r[0]: r for r in ([c.strip() for c in line.strip("|").split("|")] for line in table)}
    metrics = ["decode_agg_tps", "decode_perseq_tps", "agg_tps", "ttft_mean_ms"]
    got = {(d["engine"], d["metric"]): d for d in tables.against(example_medians(), ["vllm", "stock"], metrics)}
    for engine in ("paged", "vllm"):
        for col, metric in zip((3, 5, 7, 9), metrics):
            d, stock, cell = got[(engine, metric)], got[("stock", metric)]["value"], float(cells[engine][col])
            medians = d["over"]["stock"] * (0.005 / d["value"] + 0.005 / stock)  # medians printed to 2 decimals
            printed = 0.005 if cell >= 1 else 0.00005  # the ratio cell: 2 decimals from 1 up, else 4 digits
            assert d["over"]["stock"] == pytest.approx(cell, abs=medians + printed)
    decode = {e: got[(e, "decode_agg_tps")]["over"] for e in ("paged", "stock", "vllm")}
    assert abs(decode["vllm"]["stock"] - 1.4458) < 5e-4 and abs(decode["paged"]["stock"] - 1.028) < 5e-4  # its headline
    assert round(decode["paged"]["vllm"] * 100, 1) == 71.1
    assert decode["vllm"]["vllm"] is None and decode["stock"]["stock"] is None  # a reference's own row


def report_of(run, tmp_path, *refs):
    flags = [a for r in refs for a in ("--reference", r)]
    return run_parity("report", str(run), "--out-dir", str(tmp_path / "reports"), "--no-plots", "--json", *flags)


def test_report_percent_of_vllm_is_their_ratio_block(tmp_path):
    """A report on their artifact dir with --reference vllm: "% of vllm" is their own ratio block."""
    r = report_of(USERS_ART, tmp_path, "vllm")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    md = Path(doc["report"]).read_text()
    assert "## Headline: % of vllm\n" in md and "| paged | 8 | decode_agg_tps | 231.30 | 75.6% |" in md
    ratios = {r["n"]: r["decode_agg_tps"] for r in load_run(USERS_ART).summary["ratios"]}
    for d in doc["against"]:
        if (d["engine"], d["metric"]) == ("paged", "decode_agg_tps"):
            assert round(d["over"]["vllm"], 4) == ratios[d["n"]]  # 0.7561 0.7158 0.6935
    assert json.loads(Path(doc["sidecar"]).read_text())["against"] == doc["against"]


def test_report_with_two_references_on_a_real_run(tmp_path):
    """The captured smoke run (paged, stock): --reference stock --reference paged; the "% of
    stock" cells are the run's own recorded ratios."""
    r = report_of(CAPTURED, tmp_path, "stock", "paged")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    md = Path(doc["report"]).read_text()
    assert "## Headline: % of stock, x over paged\n" in md
    assert "| engine | N | metric | median | % of stock | x over paged |" in md
    ratios = json.loads((CAPTURED / "summary.json").read_text())["ratios"]
    recorded = {(x["engine"], x["n"]): x["decode_agg_tps"] for x in ratios}
    mine = {(d["engine"], d["n"]): d["over"] for d in doc["against"] if d["metric"] == "decode_agg_tps"}
    assert recorded and all(round(mine[k]["stock"], 4) == v for k, v in recorded.items())
    assert all(mine[("stock", n)]["paged"] == pytest.approx(1 / mine[("paged", n)]["stock"]) for _, n in recorded)


@pytest.mark.parametrize("refs,said", [(["vllm"], "--reference vllm: not an engine of"),
                                       (["stock", "stock"], "--reference stock: given twice")])
def test_a_bad_reference_is_one_line_before_anything_is_written(tmp_path, refs, said):
    r = report_of(CAPTURED, tmp_path, *refs)
    assert r.returncode == 2 and said in r.stderr and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert not (tmp_path / "reports").exists()


# ----------------------------------------------------------------- history sql --csv / --parquet


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    db = tmp_path_factory.mktemp("hist") / "h.duckdb"
    r = run_parity("history", "ingest", str(CAPTURED), str(USERS_ART), "--store", str(db))
    assert r.returncode == 0, r.stderr
    return db


SQL = "SELECT engine, n, metric, value, repeats FROM medians WHERE metric = 'decode_agg_tps' ORDER BY engine, n"


def test_sql_result_as_csv_and_parquet(store, tmp_path):
    import duckdb

    js = run_parity("history", "sql", SQL, "--store", str(store), "--json")
    rows = json.loads(js.stdout)["rows"]
    r = run_parity("history", "sql", SQL, "--store", str(store), "--csv", str(tmp_path / "m.csv"),
                   "--parquet", str(tmp_path / "m.parquet"))
    assert r.returncode == 0, r.stderr
    assert f"{len(rows)} rows x 5 columns -> {tmp_path / 'm.csv'} (csv)" in r.stdout
    lines = (tmp_path / "m.csv").read_text().splitlines()
    assert lines[0] == "engine,n,metric,value,repeats" and len(lines) == 1 + len(rows) and len(rows) >= 7
    assert lines[1:] == [",".join(str(v) for v in row) for row in rows]
    back = duckdb.sql(f"SELECT * FROM read_parquet('{tmp_path / 'm.parquet'}')")
    assert [str(c) for c in back.types] == ["VARCHAR", "BIGINT", "VARCHAR", "DOUBLE", "BIGINT"]
    assert [list(x) for x in back.fetchall()] == rows
    paged8 = next(x for x in rows if x[0] == "paged" and x[1] == 8)
    assert paged8[3] == 231.3  # their summary.tsv's paged n=8 decode_agg_tps, through the store and out


def test_sql_csv_to_stdout(store):
    r = run_parity("history", "sql", "SELECT run_id, kind, run_at FROM runs ORDER BY run_id", "--store", str(store),
                   "--csv", "-")
    assert r.returncode == 0, r.stderr
    assert r.stdout == ("run_id,kind,run_at\n20261122_181422_snapshot-tiny,snapshot,2026-11-22T18:14:22\n"
                        "phase72,users-snapshot,\n")  # their artifact dir has no date


@pytest.mark.parametrize("args,said", [
    (["--parquet", "-"], "--parquet -: Parquet is binary"),
    (["--csv", "-", "--json"], "--csv - and --json both write to stdout"),
    (["--csv", "{tmp}"], "a directory, not a file"),
    (["--csv", "{tmp}/no/such/x.csv"], "no directory"),
    (["--csv", "{tmp}/x", "--parquet", "{tmp}/x"], "--csv and --parquet name one file"),
])  # fmt: skip
def test_sql_outputs_checked_before_the_store_is_read(tmp_path, args, said):
    given = [a.format(tmp=tmp_path) for a in args]
    r = run_parity("history", "sql", "SELECT 1", "--store", str(tmp_path / "none.duckdb"), *given)
    assert r.returncode == 2 and said in r.stderr and r.stderr.count("\n") == 1  # before "no such file" of the store
