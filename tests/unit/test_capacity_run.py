"""parity.capacity.run.measure when the search ends with an error: the error that ended it is what
the run reports, and capacity.json keeps what was measured where it can be written.  The engines'
probe and the search are stand-ins (a real server's death: tests/integration/test_capacity_faults.py);
the run dir is real."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from parity.artifacts import RunDir
from parity.capacity import run as capacity_run
from parity.capacity.probe import CLOSED
from parity.context import Run
from parity.errors import InfraError
from parity.ui import Output

DIED = "stock server exited on signal 6 (SIGABRT) during the probe at 32"


class Probe:
    def __init__(self, run, plan):
        self.probes, self.servers, self.closed = [{"engine": "stock", "load": 16.0}], [], []

    def close(self, settle: bool = True) -> None:
        self.closed.append(settle)


class Dies:
    def __init__(self, probe, prompts, plan, log=None):
        pass

    def run(self) -> dict:
        raise InfraError(DIED)


def measure(tmp_path, monkeypatch, search=Dies, probe=Probe):
    monkeypatch.setattr(capacity_run, "RealProbe", probe)
    monkeypatch.setattr(capacity_run, "Search", search)
    plan = SimpleNamespace(model="dense-16g", search=SimpleNamespace(kind=CLOSED), notes=[], ptok=64, gen=16, seed=0)
    run = Run(dir=RunDir(tmp_path), out=Output(json_mode=True), runner=None)
    return capacity_run.measure(plan, run)


def test_a_capacity_json_that_cannot_be_written_does_not_hide_the_error_that_ended_the_run(tmp_path, monkeypatch,
                                                                                           capsys):  # fmt: skip
    (tmp_path / "capacity.json").mkdir()  # a real write failure (a full disk reads the same: an OSError)
    with pytest.raises(InfraError, match="signal 6"):
        measure(tmp_path, monkeypatch)
    assert "capacity.json" in capsys.readouterr().err


class MemoryStaysUsed(Probe):
    def close(self, settle: bool = True) -> None:
        super().close(settle)
        if settle and self.closed == [True]:
            raise InfraError("memory did not come back after stopping stock b5")


class Finishes(Dies):
    def run(self) -> dict:
        return {"ratios": [{"engine": "stock_b", "ratio": 0.99}], "problems": [], "notes": []}


def test_a_search_that_finished_keeps_its_result_when_the_last_server_fails_to_stop(tmp_path, monkeypatch):
    with pytest.raises(InfraError, match="memory did not come back"):
        measure(tmp_path, monkeypatch, search=Finishes, probe=MemoryStaysUsed)
    doc = RunDir(tmp_path).read_json("capacity.json")
    assert doc["complete"] is False and doc["valid"] is False and "memory did not come back" in doc["error"]
    assert doc["ratios"] == [{"engine": "stock_b", "ratio": 0.99}]
    assert doc["probes"] == [{"engine": "stock", "load": 16.0}]
