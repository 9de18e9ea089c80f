"""Workload kinds, one file each, registered here: everything parity knows about a kind lives in
its file (section checks, sizing, points, runner, metrics, headline, windows, calibration knob,
report).  A new kind is one file plus its line here (and its module in the import); its section
keys are WorkloadConfig's (parity.workloads.spec), its metrics declared in parity.metrics.workload."""

from __future__ import annotations

from parity.workloads import multi_turn, open_loop, prefill_under_decode, shared_prefix
from parity.workloads.base import Measured, Plot, WorkloadKind

WORKLOADS: dict[str, WorkloadKind] = {
    "shared-prefix": shared_prefix.KIND,
    "prefill-under-decode": prefill_under_decode.KIND,
    "open-loop": open_loop.KIND,
    "multi-turn": multi_turn.KIND,
}

__all__ = ["WORKLOADS", "WorkloadKind", "Measured", "Plot"]
