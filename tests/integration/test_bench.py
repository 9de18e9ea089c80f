"""llama-batched-bench: the parser on captured real output (tests/data/bench),
partial tables as failures, and `parity bench` for real on the tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from parity.errors import InfraError
from parity.runners.base import CommandResult
from parity.config import BenchConfig
from parity.bench.batched_bench import PartialTable, check, failure, missing_rows, parse, parse_header, run_complete

DATA = Path(__file__).resolve().parent.parent / "data" / "bench"


def capture(name: str, rc: int) -> CommandResult:
    return CommandResult(["llama-batched-bench"], rc, (DATA / f"{name}.stdout").read_text(), (DATA / f"{name}.stderr").read_text(), 1.0)


def test_parse_full_table():
    res = capture("batched-bench-ok", 0)
    rows = parse(res.stdout)
    assert [(r["pp"], r["tg"], r["b"], r["n_kv"]) for r in rows] == [(32, 8, 1, 40), (32, 8, 2, 80), (64, 8, 1, 72), (64, 8, 2, 144)]
    assert rows[0] == {"pp": 32, "tg": 8, "b": 1, "n_kv": 40, "t_pp": 0.018, "s_pp": 1768.35, "t_tg": 0.016, "s_tg": 494.84, "t": 0.034, "s": 1167.44}
    assert failure(res.stdout + res.stderr) is None
    check(res, rows, [32, 64], [8], [1, 2], 60)  # complete: no error


def test_abort_after_some_rows_is_a_failure_not_a_result():
    res = capture("batched-bench-fail", 134)
    rows = parse(res.stdout)
    assert len(rows) == 3  # the table printed three rows before the abort
    assert "failed to add token" in failure(res.stdout + "\n" + res.stderr)
    with pytest.raises(InfraError, match=r"3/4 table rows; a partial table is not a result\): .*get_sub_batch: failed to add token"):
        check(res, rows, [16, 100], [8], [1, 4], 60)


def test_silently_skipped_row_is_a_failure():
    res = capture("batched-bench-skip", 0)  # -kvu -c 1024 -npp 300 -ntg 8 -npl 1,2,4: B=4 needs 1232 cells
    rows = parse(res.stdout)
    assert parse_header(res.stdout)["n_kv_max"] == 1024
    assert len(rows) == 2 and missing_rows(rows, [300], [8], [1, 2, 4], parse_header(res.stdout)) == (["PP=300 TG=8 B=4 (N_KV 1232 > n_kv_max 1024)"], [])
    with pytest.raises(PartialTable, match=r"2/3 table rows.*skipped PP=300 TG=8 B=4 \(N_KV 1232 > n_kv_max 1024\): raise -c") as e:
        check(res, rows, [300], [8], [1, 2, 4], 60)
    assert not e.value.lost_only


def test_row_lost_from_stdout_is_a_failure_worth_one_retry():
    res = capture("batched-bench-truncated", 0)  # -c 128 -npp 32 -ntg 8 -npl 1,2,4 (n_kv_max 1024): B=4 fits but its line never came
    rows = parse(res.stdout)
    assert len(rows) == 2
    with pytest.raises(PartialTable, match=r"rows PP=32 TG=8 B=4 missing from the output although they fit") as e:
        check(res, rows, [32], [8], [1, 2, 4], 60)
    assert e.value.lost_only


class _Replay:
    """A runner that answers with the given results in turn (what llama-batched-bench printed)."""

    def __init__(self, *results):
        self.results, self.calls = list(results), 0

    def run(self, argv, env=None, timeout=None):
        self.calls += 1
        return self.results.pop(0)


def _lost_tail(res: CommandResult) -> CommandResult:
    """The captured complete table with its last row cut off, as the logger loses it at exit."""
    lines = res.stdout.rstrip("\n").splitlines()
    last = max(i for i, line in enumerate(lines) if line.startswith("|"))
    return CommandResult(res.argv, 0, "\n".join(lines[:last]) + "\n", res.stderr, 1.0)


def test_lost_rows_are_run_again_until_the_table_is_whole():
    ok = capture("batched-bench-ok", 0)
    runner, logs = _Replay(_lost_tail(ok), _lost_tail(ok), ok), []
    res, rows, retried = run_complete(runner, ["b"], {}, BenchConfig(retries=3), [32, 64], [8], [1, 2], log=lambda a, r: logs.append(a))
    assert res is ok and len(rows) == 4 and runner.calls == 3 and logs == [0, 1, 2]
    assert len(retried) == 2 and all("PP=64 TG=8 B=2 missing" in r for r in retried)


def test_lost_rows_every_time_fail_after_the_retries():
    ok = capture("batched-bench-ok", 0)
    runner = _Replay(*[_lost_tail(ok)] * 3)
    with pytest.raises(PartialTable, match="3/4 table rows"):
        run_complete(runner, ["b"], {}, BenchConfig(retries=2), [32, 64], [8], [1, 2])
    assert runner.calls == 3


def test_a_crash_is_not_retried():
    runner = _Replay(capture("batched-bench-fail", 134), capture("batched-bench-ok", 0))
    with pytest.raises(PartialTable, match="failed to add token"):
        run_complete(runner, ["b"], {}, BenchConfig(retries=3), [16, 100], [8], [1, 4])
    assert runner.calls == 1


def test_memory_slot_message_is_recognised():
    assert failure("decode: failed to find a memory slot for batch of size 512") == "decode: failed to find a memory slot for batch of size 512"
    assert failure("llama_batched_bench: llama_decode() failed") is not None


def test_parity_bench_real(parity_cli, engine_bins, tiny_model, tmp_path):
    prof = tmp_path / "p.yaml"
    prof.write_text(f"extends: smoke\nlock: {{dir: {tmp_path}/lock, poll_s: 0.5}}\n")
    r = parity_cli("--artifacts", str(tmp_path / "runs"), "bench", "--profile", str(prof), "--model", "tiny", "--npp", "32,48", "--ntg", "4", "--npl", "1,2", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    bench = json.loads((Path(doc["run_dir"]) / "bench.json").read_text())
    assert bench["engine"] == "paged" and [(x["pp"], x["b"]) for x in bench["rows"]] == [(32, 1), (32, 2), (48, 1), (48, 2)]
    assert all(x["s_tg"] > 0 and x["n_kv"] == x["b"] * (x["pp"] + 4) for x in bench["rows"])
    cmd = bench["command"]
    assert cmd[cmd.index("-c") + 1] == "2048" and cmd[cmd.index("-npp") + 1] == "32,48" and "-fa" in cmd
    # a partial table from the real tool: with a unified KV of 2048 cells, B=64 x 40 does not fit and is skipped
    prof.write_text(prof.read_text() + "serving: {bench: {extra_args: [-ngl, '99', -fa, 'on', -t, '1', -kvu]}}\n")
    r = parity_cli("--artifacts", str(tmp_path / "runs"), "bench", "--profile", str(prof), "--model", "tiny", "--npp", "32", "--ntg", "8", "--npl", "1,2,64")
    assert r.returncode == 4 and "2/3 table rows" in r.stderr and "skipped PP=32 TG=8 B=64 (N_KV 2560 > n_kv_max 2048)" in r.stderr


def test_kv_share_too_small_is_refused_before_the_run(parity_cli, engine_bins, tiny_model, tmp_path):
    """The device run's trap: -c 16384 over npl 32 leaves 512 cells per sequence for 512+64 tokens."""
    prof = tmp_path / "p.yaml"
    prof.write_text(f"extends: smoke\nlock: {{dir: {tmp_path}/lock, poll_s: 0.5}}\n")
    r = parity_cli("--artifacts", str(tmp_path / "runs"), "bench", "--profile", str(prof), "--model", "tiny", "--npp", "32", "--ntg", "8", "--npl", "1,64")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "2048 / max npl 64 = 32 cells per sequence, but npp+ntg needs 40" in r.stderr and "raise ctx to 2560 or add -kvu" in r.stderr
    assert not (tmp_path / "lock").exists()  # refused before the lock was taken
    # the same shape runs once -kvu shares the cells (unit check of the rule)
    from parity.config import load_profile
    from parity.bench.batched_bench import split_kv_problem

    b = load_profile(str(prof)).serving.bench
    assert split_kv_problem([32], [8], [1, 64], b) and split_kv_problem([32], [8], [1, 51], b) is None
