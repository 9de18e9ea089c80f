"""Workload kinds, one file each, registered here: everything parity knows about a kind lives in
its file (section checks, sizing, points, runner, metrics, headline, windows, calibration knob,
report).  A new kind is one file plus its line here; its section
keys are WorkloadConfig's (parity.workloads.spec), its metrics declared in parity.metrics.workload."""

from __future__ import annotations

from parity.registry import Registry
from parity.workloads.base import Measured, Plot, WorkloadKind

WORKLOADS: Registry = Registry({  # kind -> its KIND, imported when a run names the kind
    "shared-prefix": "parity.workloads.shared_prefix:KIND",
    "prefill-under-decode": "parity.workloads.prefill_under_decode:KIND",
    "open-loop": "parity.workloads.open_loop:KIND",
    "multi-turn": "parity.workloads.multi_turn:KIND",
    "prefill-curve": "parity.workloads.prefill_curve:KIND",
    "trace": "parity.workloads.trace:KIND",
})

__all__ = ["WORKLOADS", "WorkloadKind", "Measured", "Plot"]
