"""The users' artifact files: gate_summary.tsv in their layout (written by parity's gates, and by
`parity gate summarize ART` from an old artifact dir of theirs), their summary.tsv + nNNN.json read
into parity's run data for compare/report.  Where ../shared is present, their own script's python
runs on the same dirs and must agree."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import needs_shared
from parity.config import load_profile
from parity.gates import summary
from parity.report.rundata import load_run, parse_gate_summary, parse_users_summary

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
GATES = TESTS / "data" / "gates"
USERS_ART = TESTS / "data" / "users-art" / "phase72"
SCRIPT = REPO.parent / "shared" / "localai-paged" / "paged-current-serving-snapshot.sh"
MOE, DENSE = "8cb0ce23777bf55f92f63d0292c756b0", "5951a5b4d624ce891e22ab5fca9bc439"


def their_python(function: str) -> str:
    """The python heredoc of one of their bash functions (write_summary, write_gate_summary)."""
    text = SCRIPT.read_text()
    body = text[text.index(f"{function}() {{"):]
    start = body.index("\n", body.index("<<'PY'")) + 1
    return body[start: body.index("\nPY\n")]


def gate_art(tmp_path: Path, *, post=True, moe_post=MOE, ops=("mul_mat", "mul_mat_id")) -> Path:
    """An ART dir shaped like theirs: gate_pre/ and gate_post/ with NAME.md5 (md5sum's line),
    NAME.txt/.err, op_OP.txt (real test-backend-ops -b CUDA0 captures, H100)."""
    art = tmp_path / "20260701_050621"
    for phase in ("pre", "post") if post else ("pre",):
        d = art / f"gate_{phase}"
        d.mkdir(parents=True)
        for name, md5 in (("moe", moe_post if phase == "post" else MOE), ("dense", DENSE)):
            (d / f"{name}.txt").write_text("transcript not kept in this fixture\n")
            (d / f"{name}.err").write_text("")
            (d / f"{name}.md5").write_text(f"{md5}  {d / (name + '.txt')}\n")
        for op in ops:
            shutil.copy(GATES / f"test-backend-ops-cuda-h100-{op}.txt", d / f"op_{op.upper()}.txt")
    return art


def summarize(art, **kw):
    from parity.context import Context
    from parity.runners.local import LocalRunner
    from parity.ui import Output

    ctx = Context(profile=load_profile("gb10-qwen36"), runner=LocalRunner(), out=Output(json_mode=True), artifacts_root=art)
    return summary.summarize(ctx, summary.SummarizeRequest(art=str(art), **kw))


def test_summarize_an_old_artifact_dir(tmp_path):
    art = gate_art(tmp_path)
    doc = summarize(art)
    assert doc["bad"] == [] and doc["file"] == str(art / "gate_summary.tsv")
    lines = (art / "gate_summary.tsv").read_text().splitlines()
    assert lines[0] == "phase\tcheck\tstatus\tactual\texpected\tdetails"
    assert lines[1] == f"pre\tmoe_md5\tok\t{MOE}\t{MOE}\t{art}/gate_pre/moe.md5"
    assert lines[3] == f"pre\top_MUL_MAT\tok\t1304/1304\tall\t{art}/gate_pre/op_MUL_MAT.txt"
    assert [ln.split("\t")[:3] for ln in lines[5:]] == [["post", "moe_md5", "ok"], ["post", "dense_md5", "ok"], ["post", "op_MUL_MAT", "ok"], ["post", "op_MUL_MAT_ID", "ok"]]


def test_summarize_bad_rows_and_exit_3(tmp_path):
    art = gate_art(tmp_path, moe_post="0" * 32, ops=("mul_mat_id",))
    (art / "gate_post" / "dense.md5").unlink()
    doc = summarize(art)
    assert doc["bad"] == ["post moe_md5 mismatch", "post dense_md5 missing"]
    r = subprocess.run([sys.executable, "-m", "parity", "gate", "summarize", str(art)], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 3 and "bad gate rows: post moe_md5 mismatch, post dense_md5 missing" in r.stderr


def test_summarize_missing_phase_and_no_op_files(tmp_path):
    art = gate_art(tmp_path, post=False, ops=())
    rows = summarize(art)["rows"]
    assert rows[-2:] == [["pre", "op", "missing", "", "", "no op_*.txt files"], ["post", "all", "skipped", "", "", f"{art}/gate_post missing"]]
    assert summary.bad(rows) == ["pre op missing"]  # a skipped phase is not bad; no op files is (as theirs)


def test_summarize_an_older_build_op_file(tmp_path):
    """An op_*.txt of an older build (`Backend 2/2 (CUDA0)`): found and judged, not `missing`."""
    art = gate_art(tmp_path, post=False, ops=())
    shutil.copy(GATES / "tbo-old-2024-ggml-ci-v100-excerpt.txt", art / "gate_pre" / "op_ROPE.txt")
    rows = summarize(art, expect={"moe": MOE})["rows"]
    assert ["pre", "op_ROPE", "fail", "1028/1124", "all", str(art / "gate_pre" / "op_ROPE.txt")] in rows
    assert [r[1] for r in rows if r[0] == "pre"] == ["moe_md5", "op_ROPE"]


@needs_shared("localai-paged/paged-current-serving-snapshot.sh")
@pytest.mark.parametrize("case", ["green", "bad", "no-post"])
def test_same_rows_as_their_write_gate_summary(tmp_path, case):
    art = {"green": lambda: gate_art(tmp_path), "bad": lambda: gate_art(tmp_path, moe_post="1" * 32), "no-post": lambda: gate_art(tmp_path, post=False)}[case]()
    theirs = subprocess.run([sys.executable, "-", str(art), MOE, DENSE], input=their_python("write_gate_summary"), capture_output=True, text=True, timeout=60)
    ours = summarize(art)
    assert (theirs.returncode == 6) is bool(ours["bad"]) and theirs.returncode in (0, 6), theirs.stderr
    assert theirs.stdout == (art / "gate_summary.tsv").read_text()


def test_parity_gates_write_the_users_layout_beside_their_own(tmp_path):
    """prepost's writer: gate_summary.tsv in the users' layout, gate_checks.tsv in parity's."""
    from parity.artifacts import RunDir

    rd = RunDir.create(tmp_path, "x", argv=["t"])
    md5 = {"check": "md5 moe/paged", "kind": "md5", "model": "moe", "path": "paged", "expected": MOE, "got": MOE, "status": "pass", "detail": "",
           "data": {"engine": "paged", "transcript": "gates/pre/md5-moe-paged.out"}, "attempts": []}  # fmt: skip
    op = {"check": "op MUL_MAT [CUDA0]", "kind": "op", "model": None, "path": None, "expected": "1146/1146", "got": "1146/1146", "status": "pass", "detail": "",
          "data": {"op": "MUL_MAT"}, "attempts": [{"output": "gates/pre/op-MUL_MAT-CUDA0-1.txt"}]}  # fmt: skip
    nonpaged = {**md5, "check": "md5 moe/nonpaged", "path": "nonpaged", "got": "0" * 32, "status": "fail"}
    prof = load_profile("gb10-qwen36")
    summary.write(rd, {"pre": {"status": "fail", "checks": [md5, op, nonpaged]}}, prof.gates.engine, summary.default_paths(prof.engines))
    users = (rd.path / "gate_summary.tsv").read_text().splitlines()
    assert users == [
        "phase\tcheck\tstatus\tactual\texpected\tdetails",
        f"pre\tmoe_md5\tok\t{MOE}\t{MOE}\t{rd.path}/gates/pre/md5-moe-paged.out",
        f"pre\top_MUL_MAT\tok\t1146/1146\tall\t{rd.path}/gates/pre/op-MUL_MAT-CUDA0-1.txt",
        f"pre\tmoe_nonpaged_md5\tmismatch\t{'0' * 32}\t{MOE}\t{rd.path}/gates/pre/md5-moe-paged.out",
        "post\tall\tskipped\t\t\tpost-gate not run (yet)",
    ]
    own = (rd.path / "gate_checks.tsv").read_text().splitlines()
    assert own[0] == "phase\tcheck\texpected\tgot\tstatus" and own[1] == f"pre\tmd5 moe/paged\t{MOE}\t{MOE}\tpass"
    # both layouts read back into the same gate rows
    assert [r["status"] for r in parse_gate_summary("\n".join(users))] == ["pass", "pass", "fail", "not-run"]
    assert [r["status"] for r in parse_gate_summary("\n".join(own))] == ["pass", "pass", "fail"]


# --------------------------------------------------------------------------- summary.tsv / nNNN.json


def test_users_summary_tsv_parsed_both_blocks():
    rows, ratios = parse_users_summary((USERS_ART / "summary.tsv").read_text())
    assert [(r["arm"], r["n"]) for r in rows] == [("paged", 128), ("paged", 32), ("paged", 8), ("vllm", 128), ("vllm", 32), ("vllm", 8)]
    assert rows[2]["decode_perseq_tps"] == 28.42 and rows[3]["wall_s"] == 11.933
    assert [(r["n"], r["paged_decode_over_vllm"]) for r in ratios] == [(8, 0.7561), (32, 0.7158), (128, 0.6935)]


@needs_shared("localai-paged/paged-current-serving-snapshot.sh")
def test_fixture_summary_is_what_their_write_summary_prints():
    theirs = subprocess.run([sys.executable, "-", str(USERS_ART)], input=their_python("write_summary"), capture_output=True, text=True, timeout=60)
    assert theirs.returncode == 0 and theirs.stdout == (USERS_ART / "summary.tsv").read_text()


def test_users_artifact_loads_as_run_data(tmp_path):
    art = tmp_path / "20260701_160730"
    shutil.copytree(USERS_ART, art)
    (art / "paged" / "n8.json").write_text(json.dumps({**json.loads((art / "paged" / "n8.json").read_text()), "prompt_tok_total": 1424, "gen_total": 512}))
    rd = load_run(art)
    assert rd.manifest["kind"] == "users-snapshot" and rd.hardware_class == "gb10_or_workstation_blackwell"
    assert rd.summary["engines"] == ["paged", "vllm"] and rd.summary["reference_engine"] == "vllm"
    row = next(r for r in rd.rows() if (r["engine"], r["n"]) == ("paged", 8))
    assert (row["decode_agg_tps"], row["prompt_tok_total"], row["gen_total"]) == (231.3, 1424, 512)  # nNNN.json adds its numbers
    assert rd.summary["ratios"][0] == {"engine": "paged", "reference": "vllm", "n": 8, "decode_agg_tps": 0.7561, "decode_perseq_tps": 0.7615, "agg_tps": 0.6554, "ttft_mean_ms": 2.952}
    assert rd.gates["status"] == "pass" and [c["check"] for c in rd.gates["pre"]["checks"]] == ["moe_md5", "dense_md5", "op_MUL_MAT", "op_MUL_MAT_ID"]
    (art / "gate_summary.tsv").unlink()
    from parity.report.rundata import gate_problems

    assert gate_problems(load_run(art)) == [f"no gate_summary.tsv (ungated, or not summarized: parity gate summarize {art})"]


def test_json_rows_alone_when_summary_tsv_is_missing(tmp_path):
    art = tmp_path / "a"
    shutil.copytree(USERS_ART, art)
    (art / "summary.tsv").unlink()
    rd = load_run(art)
    assert sorted((r["engine"], r["n"], r["decode_agg_tps"]) for r in rd.rows())[:2] == [("paged", 8, 231.3), ("paged", 32, 430.2)]


def _parity_run(tmp_path: Path, scale: float) -> Path:
    """A parity snapshot run on the same class: the users' rows scaled, three repeats each."""
    run = tmp_path / "20261123_120000_snapshot-moe"
    run.mkdir()
    users = load_run(USERS_ART)
    rows = [{**r, "repeat": k, "source": None, "decode_agg_tps": r["decode_agg_tps"] * scale * (1 + 0.001 * k)} for r in users.rows() for k in range(3)]
    (run / "manifest.json").write_text(json.dumps({"run_id": run.name, "kind": "snapshot", "status": "complete", "valid": True}))
    (run / "hardware.json").write_text(json.dumps({"hardware_class": "gb10_or_workstation_blackwell"}))
    green = {"status": "pass", "checks": [{"check": "md5 moe/paged", "status": "pass"}]}
    (run / "gates.json").write_text(json.dumps({"pre": green, "post": green, "status": "pass"}))
    (run / "summary.json").write_text(json.dumps({"kind": "snapshot", "engines": ["paged", "vllm"], "reference_engine": "vllm", "rows": rows, "medians": [], "ratios": []}))
    return run


def test_compare_an_old_users_artifact_with_a_parity_run(tmp_path):
    from parity import stats
    from parity.report.compare import compare_runs

    a, b = load_run(USERS_ART), load_run(_parity_run(tmp_path, 1.10))
    rule = stats.Rule.from_config(load_profile("gb10-qwen36").stats)
    doc = compare_runs(a, b, ["decode_agg_tps", "decode_perseq_tps"], rule)
    assert doc["forced"] is False and doc["a_run"] == "phase72"
    cell = next(r for r in doc["rows"] if (r["engine"], r["n"], r["metric"]) == ("paged", 8, "decode_agg_tps"))
    assert cell["a_median"] == 231.3 and cell["b_median"] == pytest.approx(231.3 * 1.10 * 1.001)
    assert {(r["engine"], r["n"]) for r in doc["rows"]} == {(e, n) for e in ("paged", "vllm") for n in (8, 32, 128)}


def test_report_on_an_old_users_artifact(tmp_path):
    from parity.report.render import ReportRequest, render_report

    res = render_report(load_profile("gb10-qwen36"), ReportRequest(run=str(USERS_ART), out_dir=str(tmp_path / "reports"), title="phase72 from their artifacts", plots=False, date="2026-07-01"))
    text = Path(res["report"]).read_text()
    assert res["phase"] == 1 and res["verdict"] == "measurement-only"
    assert re.search(r"\| paged \| 8 \|.*231\.3", text) and "gb10_or_workstation_blackwell" in text
