"""test-backend-ops perf mode read from captured real output (tests/data/gates/tbo-perf-*, see its
README): console lines on CPU and CUDA, --output sql, the pin's support-only CSV, and the faults a
real run can show (derived from the captures, never hand-written)."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pytest

from parity.gates import test_backend_ops as tbo

G = Path(__file__).resolve().parents[1] / "data" / "gates"


def text(name: str) -> str:
    return (G / name).read_text(encoding="utf-8", errors="replace")


def perf(name: str) -> tbo.PerfRun:
    return tbo.parse_perf(text(name))


def test_cpu_console_memory_bound_op_gives_time_and_bandwidth():
    run = perf("tbo-perf-cpu-add.txt")
    assert run.format == "console" and tbo.perf_problems(run, "ADD", "CPU", 0) == []
    a, b = run.cases
    assert a.case == "ADD(type=f32,ne=[4096,1,1,1],nr=[1,1,1,1],nf=1,perm1=0,src_overlap=0)"
    assert (a.n_runs, a.us_per_run, a.kb_per_run, a.gbps, a.flops, a.backend) == (1179360, 0.85, 48, 53.85, None, "CPU")
    assert (b.n_runs, b.us_per_run, b.kb_per_run, b.gbps) == (1368, 838.07, 24576, 27.97)


def test_cpu_console_matrix_op_gives_flops_per_second():
    run = perf("tbo-perf-cpu-mul_mat.txt")
    assert len(run.cases) == 8 and tbo.perf_problems(run, "MUL_MAT", "CPU", 0) == []
    first = run.cases[0]
    assert first.params.startswith("type_a=f32,type_b=f32,m=4096,n=1,k=14336") and first.gbps is None
    assert first.flops == pytest.approx(4.56e9) and first.us_per_run == 25747.10
    # GFLOPS x us/run is the op's FLOPs: 2 m n k = 117.44 MFLOP at n=1, 939.52 at n=8
    # (the tool rounds the rate to 3 digits)
    for c in run.cases:
        n = int(c.params.split(",n=")[1].split(",")[0])
        assert c.flops * c.us_per_run / 1e6 == pytest.approx(2 * 4096 * n * 14336, rel=0.01)


def test_cuda_console_numbers_pushed_past_a_log_line_are_read():
    raw = text("tbo-perf-cuda-h200-mul_mat.txt")
    assert (
        "o=1): ggml_backend_cuda_graph_compute: CUDA graph warmup complete\n" in raw
    )  # the capture has the shape this test is about
    run = tbo.parse_perf(raw)
    assert len(run.cases) == 9 and tbo.perf_problems(run, "MUL_MAT", "CUDA0", 0) == []
    assert [c.us_per_run for c in run.cases[:3]] == [29.98, 14.62, 23.27]
    assert run.cases[6].flops == pytest.approx(442.95e12) and run.cases[-1].flops == pytest.approx(
        190.10e12
    )  # TFLOPS; the last line had no log
    assert {c.backend for c in run.cases} == {"CUDA0"}
    add = perf("tbo-perf-cuda-h200-add.txt").cases
    assert [(c.us_per_run, c.gbps) for c in add] == [(1.50, 30.48), (10.60, 2211.38)]


@pytest.mark.parametrize(
    "name,op,backend,n",
    [
        ("tbo-perf-cpu-add.sql", "ADD", "CPU", 2),
        ("tbo-perf-cpu-mul_mat.sql", "MUL_MAT", "CPU", 4),
        ("tbo-perf-cuda-h200-add.sql", "ADD", "CUDA0", 2),
        ("tbo-perf-cuda-h200-mul_mat.sql", "MUL_MAT", "CUDA0", 4),
    ],
)
def test_sql_rows_carry_every_field_at_six_decimals(name, op, backend, n):
    run = perf(name)
    assert run.format == "sql" and len(run.cases) == n and tbo.perf_problems(run, op, backend, 0) == []
    for c in run.cases:
        assert c.backend == backend and c.op == op and c.n_runs >= 1
        assert c.us_per_run != round(c.us_per_run, 2)  # more digits than the console's %.2f
        assert (c.flops is None) != (c.gbps is None)  # the tool fills one rate and leaves the other 0
        if c.flops:  # FLOP/s x s/run = the op's FLOPs (2 m n k), to the tool's own precision
            n_ = int(c.params.split(",n=")[1].split(",")[0])
            assert c.flops * c.us_per_run / 1e6 == pytest.approx(2 * 4096 * n_ * 14336, rel=1e-6)


def test_sql_and_console_name_the_same_cases():
    for dev in ("cpu", "cuda-h200"):
        assert [c.case for c in perf(f"tbo-perf-{dev}-add.sql").cases] == [
            c.case for c in perf(f"tbo-perf-{dev}-add.txt").cases
        ]


def test_the_pins_csv_has_no_timing_and_says_so():
    for name in ("tbo-perf-cpu-add.csv", "tbo-perf-cuda-h200-mul_mat.csv"):
        run = perf(name)
        assert run.format == "csv" and run.cases == []
        problems = tbo.perf_problems(run, "X", "CPU", 0)
        assert len(problems) == 1 and "no time_us column" in problems[0]


def test_a_csv_with_the_timing_columns_reads_like_sql():
    """The users' Phase 108 build writes every test_result field to CSV; the same rows as the sql
    capture, written that way, give the same cases and numbers."""
    sql = perf("tbo-perf-cuda-h200-mul_mat.sql")
    raw = text("tbo-perf-cuda-h200-mul_mat.sql")
    fields = raw.split("INSERT INTO test_backend_ops (")[1].split(")")[0].split(", ")
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n")
    w.writerow(fields)
    for line in raw.splitlines():
        if line.startswith("INSERT"):
            w.writerow(re.findall(r"'([^']*)'", line.split(" VALUES ")[1]))
    run = tbo.parse_perf(buf.getvalue())
    assert run.format == "csv" and run.problems == []
    assert [(c.case, c.us_per_run, c.flops, c.n_runs) for c in run.cases] == [
        (c.case, c.us_per_run, c.flops, c.n_runs) for c in sql.cases
    ]


def test_unknown_op_is_a_named_failure_not_an_empty_pass():
    run = perf("tbo-perf-cpu-unknown-op.txt")
    assert run.cases == [] and run.backends[0].status == "OK"  # the tool says OK...
    (p,) = tbo.perf_problems(run, "NOT_AN_OP", "CPU", 0)  # ...but nothing was timed
    assert "no timed case of NOT_AN_OP on CPU" in p


def test_faults_derived_from_real_output_are_named():
    raw = text("tbo-perf-cpu-add.txt")
    # a number the tool printed as nan
    bad = tbo.parse_perf(raw.replace("0.85 us/run", "nan us/run"))
    assert any(
        "us_per_run" in p and "ADD(type=f32,ne=[4096,1,1,1],nr=[1,1,1,1]" in p
        for p in tbo.perf_problems(bad, "ADD", "CPU", 0)
    )
    # cut after the first case: no closing `Backend CPU: OK`
    cut = tbo.parse_perf(raw[: raw.index("  ADD(type=f32,ne=[4096,1,1,1],nr=[1,512")])
    assert len(cut.cases) == 1 and any("truncated" in p for p in tbo.perf_problems(cut, "ADD", "CPU", 0))
    # the case's numbers missing from its line
    mangled = tbo.parse_perf(raw.replace("1368 runs -", "1368 runs"))
    assert any("no perf numbers" in p for p in tbo.perf_problems(mangled, "ADD", "CPU", 0))
    # another backend asked for, a crash exit
    assert any(
        "no 'Backend i/n: CUDA0' block" in p for p in tbo.perf_problems(perf("tbo-perf-cpu-add.txt"), "ADD", "CUDA0", 0)
    )
    assert "exit 134" in tbo.perf_problems(perf("tbo-perf-cpu-add.txt"), "ADD", "CPU", 134)
    # an sql row whose time is not finite
    sql = tbo.parse_perf(text("tbo-perf-cuda-h200-add.sql").replace("'1.745440'", "'inf'"))
    assert any(p.startswith("ADD(") and "us_per_run" in p for p in tbo.perf_problems(sql, "ADD", "CUDA0", 0))


def test_output_format_from_the_usage_text():
    assert tbo.perf_output(text("tbo-usage-cpu.txt")) == "sql"
    # the pin's usage() format string (tests/test-backend-ops.cpp at 0ed235ea)
    pin = "Usage: t [mode] [-o <op,..>] [-b <backend>] [-p <params regex>] [--output <console|sql|csv>] [--list-ops]"
    assert tbo.perf_output(pin) == "sql"
    assert tbo.perf_output(text("tbo-cpu-rms_norm.txt")) == "console"  # no usage: the console lines everyone prints
    assert tbo.perf_argv("t", "ADD", "CPU", None, "sql") == ["t", "perf", "-o", "ADD", "-b", "CPU", "--output", "sql"]
    assert tbo.perf_argv("t", "ADD", "CPU", "type=f32", "console") == [
        "t",
        "perf",
        "-o",
        "ADD",
        "-b",
        "CPU",
        "-p",
        "type=f32",
    ]


def test_test_mode_output_has_no_perf_cases():
    """A test-mode run read as perf (the wrong mode asked for): every case line is named, none timed."""
    run = tbo.parse_perf(text("tbo-cpu-rms_norm.txt"))
    assert run.cases == [] and len(run.problems) == 51 and all("no perf numbers in 'OK'" in p for p in run.problems)
