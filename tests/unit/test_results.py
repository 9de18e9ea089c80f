"""The result model and its reader (parity/results) on the run directories parity and the users
wrote: every real file reads, the JSON Schemas under docs/schemas are the model's and accept them,
and each way a file can be broken is one line naming the file and the problem."""

import json
import math
import shutil
from pathlib import Path

import jsonschema
import pytest

from parity import results
from parity.errors import EXIT_USAGE, ConfigError
from parity.results import schema

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
# every summary.json / bench.json parity wrote that the repository keeps: the fixtures, the
# H100 noise and lever runs (docs/evidence/device-h100-*), the calibration and workload captures
SUMMARIES = sorted({*DATA.rglob("*summary.json"), *(ROOT / "docs").rglob("summary.json")} - set(DATA.glob("workloads/*r0.json")))
BENCHES = sorted({*DATA.rglob("*bench.json"), *(ROOT / "docs").rglob("bench*.json")})
MANIFESTS = sorted({*DATA.rglob("manifest.json"), *(ROOT / "docs").rglob("manifest.json")})
PAIRED = sorted((ROOT / "docs").rglob("paired.tsv"))
H100_PAIRED = ROOT / "docs" / "evidence" / "device-h100-noise" / "aa" / "paired.tsv"
SNAPSHOT = DATA / "h100-noise" / "lever-summary.json"


def test_the_repositorys_run_files_are_all_found():
    assert len(SUMMARIES) >= 10 and len(BENCHES) >= 12 and len(MANIFESTS) >= 6 and len(PAIRED) >= 3


@pytest.mark.parametrize("path", SUMMARIES + BENCHES + MANIFESTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_real_file_reads(path):
    read = results.read_bench if "bench" in path.name else results.read_manifest if path.name == "manifest.json" else results.read_summary
    doc = read(path)
    assert doc.data == json.loads(path.read_text())  # the whole content, unchanged
    if path.name.endswith("summary.json") and doc.data.get("kind") != "lever-ab":
        assert len(doc.typed.rows) == len(doc.data["rows"]) > 0 and all(r.engine and isinstance(r.n, int) for r in doc.typed.rows)


def test_bisection_logs_and_a_matrix_table_read(tmp_path):
    for name in ("bisect-series-md5.json", "bisect-pin-apply.json", "bisect-pin-md5.json"):
        doc = results.read_bisect(DATA / "results" / name)
        assert doc.typed.probes and doc.typed.labels and doc.typed.over in ("series", "pin")
    assert [t.target for t in results.read_matrix(DATA / "results" / "matrix.json").typed] == ["local-ssh", "slurm-local"]
    bad = json.loads((DATA / "results" / "bisect-series-md5.json").read_text())
    bad["probes"][0] = "probe 1"
    (tmp_path / "bisect.json").write_text(json.dumps(bad))
    with pytest.raises(results.BadResultFile, match=r"probes\[0\] is a string, expected an object"):
        results.read_bisect(tmp_path / "bisect.json")
    (tmp_path / "matrix.json").write_text(json.dumps({"targets": []}))
    with pytest.raises(results.BadResultFile, match="the document is an object, expected a list"):
        results.read_matrix(tmp_path / "matrix.json")


def test_paired_tsv_and_the_lever_map_of_the_h100_runs():
    for p in PAIRED:
        rows = results.read_paired_tsv(p)
        assert rows and all(isinstance(r["ratio"], float) and len(r["block_ratios"]) == r["n_blocks"] for r in rows)
    rows = results.read_lever_map(ROOT / "docs" / "evidence" / "device-h100-levers" / "runs" / "lever_map.yaml")
    assert [r["verdict"] for r in rows] and all(isinstance(r["ratio"], float) for r in rows)


@pytest.mark.parametrize("name", sorted(schema.FILES))
def test_docs_schemas_are_the_models_and_accept_every_real_file(name):
    on_disk = (ROOT / "docs" / "schemas" / name.replace(".json", ".schema.json")).read_text()
    assert on_disk == schema.text(name), "docs/schemas is stale: python -m parity.results.schema"
    s = json.loads(on_disk)
    jsonschema.Draft202012Validator.check_schema(s)
    files = SUMMARIES if name == "summary.json" else BENCHES
    for f in files:
        jsonschema.validate(json.loads(f.read_text()), s)


def test_schema_and_reader_refuse_the_same_shapes(tmp_path):
    s = json.loads(schema.text("summary.json"))
    real = json.loads(SNAPSHOT.read_text())
    bad = [[], {**real, "rows": ["paged"]}, {**real, "rows": [{**real["rows"][0], "n": True}]}, {**real, "kind": "nightly"}, {**real, "paired": [{"engine": "x"}]}]
    for i, doc in enumerate(bad):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(doc, s)
        (tmp_path / f"{i}.json").write_text(json.dumps(doc))
        with pytest.raises(results.BadResultFile):
            results.read_summary(tmp_path / f"{i}.json")


def _one_line(e) -> str:
    text = str(e.value)
    assert "\n" not in text and e.value.exit_code == EXIT_USAGE
    return text


@pytest.mark.parametrize("content, said", [
    (None, "no such file"),
    ("", "empty"),
    ("   \n", "empty"),
    ("TRUNCATE", "ends early: truncated"),
    ("[1, 2]", "the document is a list, expected an object"),
    ("ROW_STRING", "rows[1] is a string, expected an object"),
    ("N_STRING", "rows[0].n is a string, expected a number"),
    ("NAN", "rows[2].decode_agg_tps is NaN: a number there must be finite"),
    ("INF", "medians[0].agg_tps is inf"),
    ("HUGE", "rows[0].ttft_mean_ms is inf"),
    ("NEWER", "schema_version 99: written by a newer parity"),
    ("KIND", "kind 'h2h' is not a summary parity writes"),
    (b"\xff\xfe{", "not UTF-8"),
    ("9" * 5000, "not JSON parity can read"),
    ("[" * 100000, "not JSON parity can read"),
])  # fmt: skip
def test_each_broken_summary_is_one_line_naming_it(tmp_path, content, said):
    path = tmp_path / "run dir ü" / "summary.json"
    path.parent.mkdir()
    text = SNAPSHOT.read_text()
    doc = json.loads(text)
    edits = {
        "TRUNCATE": text[: len(text) // 2],
        "ROW_STRING": json.dumps({**doc, "rows": [doc["rows"][0], "paged r1 N=8", *doc["rows"][2:]]}),
        "N_STRING": json.dumps({**doc, "rows": [{**doc["rows"][0], "n": "8"}, *doc["rows"][1:]]}),
        "NAN": json.dumps({**doc, "rows": [*doc["rows"][:2], {**doc["rows"][2], "decode_agg_tps": math.nan}, *doc["rows"][3:]]}),
        "INF": json.dumps({**doc, "medians": [{**doc["medians"][0], "agg_tps": math.inf}, *doc["medians"][1:]]}),
        "NEWER": json.dumps({**doc, "schema_version": 99}),
        "KIND": json.dumps({**doc, "kind": "h2h"}),
    }
    # a number past the float range (1e999) reads as inf: refused like inf
    edits["HUGE"] = json.dumps({**doc, "rows": [{**doc["rows"][0], "ttft_mean_ms": "HUGE"}, *doc["rows"][1:]]}).replace('"HUGE"', "1e999")
    if content is not None:
        data = edits.get(content, content) if isinstance(content, str) else content
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
    with pytest.raises(results.BadResultFile) as e:
        results.read_summary(path)
    line = _one_line(e)
    assert said in line and str(path) in line


def test_run_dir_says_file_or_missing(tmp_path):
    f = tmp_path / "summary.json"
    f.write_text("{}")
    with pytest.raises(results.BadResultFile, match=f"{f}: a file, not a run directory \\(the run directory that holds it: {tmp_path}\\)"):
        results.run_dir(f)
    with pytest.raises(results.BadResultFile, match="no such run directory"):
        results.run_dir(tmp_path / "nope")
    assert results.run_dir(tmp_path) == tmp_path


def test_bench_manifest_and_paired_tsv_problems(tmp_path):
    bench = json.loads((DATA / "h100-noise" / "lever-bench.json").read_text())
    (tmp_path / "bench.json").write_text(json.dumps({**bench, "rows": [{**bench["rows"][0], "b": "32"}]}))
    with pytest.raises(results.BadResultFile, match=r"rows\[0\]\.b is a string, expected an integer"):
        results.read_bench(tmp_path / "bench.json")
    (tmp_path / "manifest.json").write_text(json.dumps({"status": "complete", "valid": "yes"}))
    with pytest.raises(results.BadResultFile, match="valid is a string, expected true/false"):
        results.read_manifest(tmp_path / "manifest.json")
    lines = H100_PAIRED.read_text().splitlines()
    (tmp_path / "paired.tsv").write_text("\n".join([*lines[:3], lines[3][:40]]) + "\n")
    with pytest.raises(results.BadResultFile, match="line 4: .* cells under a 12-column header"):
        results.read_paired_tsv(tmp_path / "paired.tsv")
    (tmp_path / "paired.tsv").write_text("\n".join([lines[0], lines[1].replace("\t1.005191\t", "\tnan\t")]) + "\n")
    with pytest.raises(results.BadResultFile, match="line 2, ratio: 'nan' is not a finite number"):
        results.read_paired_tsv(tmp_path / "paired.tsv")


def test_lever_map_problems_are_config_errors_naming_the_row(tmp_path):
    m = tmp_path / "lever_map.yaml"
    shutil.copy(ROOT / "docs" / "evidence" / "device-h100-levers" / "runs" / "lever_map.yaml", m)
    text = m.read_text()
    m.write_text(text.replace("ratio: ", "ratio: .nan #", 1))  # a hand edit: read, listed as null with its problem (parity.levers.map.plain_rows)
    assert math.isnan(results.read_lever_map(m)[0]["ratio"])
    m.write_text("levers:\n- {lever: X, ratio: fast}\n")
    with pytest.raises(ConfigError, match=r"levers\[0\]\.ratio is a string, expected a number or null"):
        results.read_lever_map(m)
    m.write_text("some: other file\n")
    with pytest.raises(ConfigError, match="a lever map is a mapping with a `levers:` list"):
        results.read_lever_map(m)
    m.write_text("")
    assert results.read_lever_map(m) == [] and results.read_lever_map(tmp_path / "none.yaml") == []


class _Run:
    def __init__(self, path):
        self.path = path

    def write_json(self, name, obj):
        from parity.artifacts import atomic_write_json

        atomic_write_json(self.path / name, obj)


def test_writer_stamps_the_version_writes_null_for_nan_and_reads_back(tmp_path):
    doc = json.loads(SNAPSHOT.read_text())
    doc["rows"][0]["stall_ratio"] = math.nan  # a metric computed as 0/0
    written = results.write_summary(_Run(tmp_path), doc)
    assert written["schema_version"] == results.SCHEMA_VERSION and written["rows"][0]["stall_ratio"] is None
    assert "NaN" not in (tmp_path / "summary.json").read_text()
    assert results.read_summary(tmp_path / "summary.json").data == written
    bench = json.loads((DATA / "h100-noise" / "lever-bench.json").read_text())
    results.write_bench(_Run(tmp_path), bench)
    assert results.read_bench(tmp_path / "bench.json").typed.schema_version == results.SCHEMA_VERSION


SNAPSHOT_SUMMARIES = [p for p in SUMMARIES if json.loads(p.read_text()).get("kind", "snapshot") == "snapshot"]


@pytest.mark.parametrize("path", SNAPSHOT_SUMMARIES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_row_read_typed_is_written_back_the_same(path, tmp_path):
    """Every real snapshot summary's rows, typed by the reader (model.PointRow: its fields as
    attributes, its numbers in metrics, the rest in info) and written again by the one writer:
    the same keys in the same order with the same values, so summary.json's layout does not move."""
    raw = json.loads(path.read_text())["rows"]
    rows = results.read_summary(path).typed.rows
    assert [json.dumps(r.flat()) for r in rows] == [json.dumps(r) for r in raw]
    for r, flat in zip(rows, raw):
        assert (r.engine, r.n, r.valid) == (flat["engine"], flat["n"], flat.get("valid", True))
        numbers = {k: v for k, v in flat.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        assert all(r.metric(k) == v for k, v in numbers.items() if k not in ("n", "repeat"))
        assert all(r.info[k] == v for k, v in flat.items() if k not in results.model.ROW_FIELDS and k not in r.metrics)
    kept = [{"engine": "e", "rows": rows}]  # a calibration's trial arms hold the same typed rows
    doc = {"kind": "snapshot", "rows": rows, "calibration": {"trial_arms": [dict(kept[0])]}}
    written = results.write_summary(_Run(tmp_path), doc)
    again = json.loads((tmp_path / "summary.json").read_text())
    trial = again["calibration"]["trial_arms"][0]["rows"]
    assert json.dumps(again["rows"]) == json.dumps(written["rows"]) == json.dumps(trial) == json.dumps(raw)
    assert all(isinstance(r, results.PointRow) for r in kept[0]["rows"])  # the caller's rows stay typed


@pytest.mark.parametrize("path", SNAPSHOT_SUMMARIES, ids=lambda p: str(p.relative_to(ROOT)))
def test_medians_and_ratios_read_typed_are_written_back_the_same(path, tmp_path):
    """Every real snapshot summary's medians and ratios, typed by the reader (model.Median, Ratio: fields
    as attributes, each metric's median or ratio in metrics, a ratio's verdicts as Verdicts) and written
    again by the one writer: the same keys in the same order with the same values."""
    raw = json.loads(path.read_text())
    typed = results.read_summary(path).typed
    for part in ("medians", "ratios"):
        assert [json.dumps(m.flat()) for m in getattr(typed, part)] == [json.dumps(m) for m in raw.get(part) or []]
    for m, flat in zip(typed.medians, raw.get("medians") or []):
        assert (m.engine, m.n, m.repeats) == (flat["engine"], flat["n"], flat["repeats"])
        numbers = {k: v for k, v in flat.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        assert all(m.metric(k) == v for k, v in numbers.items() if k not in results.model.Median.fields())
    for r, flat in zip(typed.ratios, raw.get("ratios") or []):
        assert all(r.verdicts[k].verdict == v["verdict"] for k, v in (flat.get("verdicts") or {}).items())
    doc = {"kind": "snapshot", "medians": typed.medians, "ratios": typed.ratios}
    written = results.write_summary(_Run(tmp_path), doc)
    again = json.loads((tmp_path / "summary.json").read_text())
    for part in ("medians", "ratios"):
        assert json.dumps(again[part]) == json.dumps(written[part]) == json.dumps(raw.get(part) or [])


def test_an_open_loop_rate_is_a_point(tmp_path):
    """A workload's point key is its rate for open loop (parity.serving.workloads: n = 2.5 req/s)."""
    doc = json.loads((DATA / "workloads" / "smoke-pud-calibrated-summary.json").read_text())
    for part in ("rows", "medians", "ratios", "paired"):
        for r in doc[part]:
            r["n"] = 2.5
    results.write_summary(_Run(tmp_path), doc)
    assert {r.n for r in results.read_summary(tmp_path / "summary.json").typed.rows} == {2.5}
    tsv = "\n".join(["\t".join(results.model.PAIRED_COLUMNS), "a\tb\t2.5\tttft_mean_ms\t2\t1.01\t0.99\t1.03\t2.0\tequivalent\t\t1.0,1.02"]) + "\n"
    (tmp_path / "paired.tsv").write_text(tsv)
    assert results.read_paired_tsv(tmp_path / "paired.tsv")[0]["n"] == 2.5


def test_non_finite_under_an_odd_key_is_named(tmp_path):
    """Found by the long fuzzing profile: an inf under an empty or dotted key broke the path walk."""
    doc = json.loads(SNAPSHOT.read_text())
    doc["rows"][0]["gen_total"] = {"": math.inf, "a.b": 1}
    (tmp_path / "summary.json").write_text(json.dumps(doc))
    with pytest.raises(results.BadResultFile, match=r"rows\[0\]\.gen_total\. is inf"):
        results.read_summary(tmp_path / "summary.json")
