"""Capture plumbing without a GPU: bench exit handling and the campaign step's options."""

from __future__ import annotations

import pytest

from parity.errors import InfraError, UsageError
from parity.profiles import capture as cap
from parity.runners.base import CommandResult

TABLE = """|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |
|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|
|    16 |      8 |    2 |     48 |    0.001 | 44382.80 |    0.000 | 33898.30 |    0.001 | 40234.70 |
"""


class StubRunner:
    host = "local"

    def __init__(self, result):
        self.result = result

    def run(self, argv, **kw):
        return CommandResult(argv, *self.result, duration_s=0.1)


class Out:
    def __init__(self):
        self.warnings = []

    def warn(self, m):
        self.warnings.append(m)


class Ctx:
    def __init__(self, result, smoke_profile):
        self.runner, self.out, self.timeout_s = StubRunner(result), Out(), smoke_profile.profiling.timeout_s


def _c(tmp_path):
    return cap.Capture("x-ntg8", "paged", 8, str(tmp_path / "p" / "x-ntg8"), ["nsys", "profile"], ["bench"])


def test_bench_row_parsed(tmp_path, smoke_profile):
    ctx = Ctx((0, TABLE, ""), smoke_profile)
    rows = cap._capture_bench(ctx.runner, ctx.out, _c(tmp_path), ctx.timeout_s)
    assert rows[0]["tg"] == 8 and rows[0]["b"] == 2 and not ctx.out.warnings
    assert (tmp_path / "p" / "x-ntg8.log").read_text().startswith("|    PP")


def test_lost_row_with_exit_0_keeps_the_capture(tmp_path, smoke_profile):
    ctx = Ctx((0, TABLE.splitlines()[0] + "\n", ""), smoke_profile)
    assert cap._capture_bench(ctx.runner, ctx.out, _c(tmp_path), ctx.timeout_s) == []
    assert "lost" in ctx.out.warnings[0]


@pytest.mark.parametrize("result", [(1, TABLE, ""), (0, TABLE, "llama_decode() failed"), (0, "", "failed to find a memory slot for batch of size 4")])
def test_failed_workload_is_infra_error(tmp_path, smoke_profile, result):
    with pytest.raises(InfraError, match="profiled llama-batched-bench failed"):
        ctx = Ctx(result, smoke_profile)
        cap._capture_bench(ctx.runner, ctx.out, _c(tmp_path), ctx.timeout_s)


def test_graph_node_gate():
    assert cap.check_graph_node(True, False) is False
    assert cap.check_graph_node(None, True) is True
    with pytest.raises(UsageError, match="--cuda-graph-trace=node"):
        cap.check_graph_node(False, False)


def test_campaign_step_rejects_unknown_options(smoke_profile):
    class C:
        profile, runner, out = smoke_profile, None, None

    with pytest.raises(UsageError, match="unknown profile option"):
        cap.campaign_step(C(), {"ntgs": [4, 2]})
