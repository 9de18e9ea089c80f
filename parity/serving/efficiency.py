"""The snapshot's efficiency hook: % of roofline per engine x N (parity.efficiency.roofline) from the
medians of valid repeats, and memory per engine from the arms (parity.efficiency.memory)."""

from __future__ import annotations

import os

from parity.efficiency import memory, roofline
from parity.gpu import bandwidth as peak
from parity.results.model import PointRow
from parity.serving.plan import SnapshotPlan
from parity.serving.summary import medians


def for_snapshot(plan: SnapshotPlan, rd, rows: list[PointRow], arms: list[dict]) -> dict:
    """The snapshot summary's `efficiency`: per engine x N from the medians of valid repeats,
    the GGUF a llama engine serves (vLLM serves the same weights), the run's bandwidth.json
    (rd: the run directory), and memory per engine from the arms."""
    doc = roofline.serving(medians(rows), snapshot_model_file(plan), plan.shape.ptok, plan.shape.gen, peak.load(rd.path) if rd else None)
    for i, p in enumerate(doc.get("points") or []):
        if plan.bound[p["engine"]].kind.model_source is None:  # it reads no profile model file: not its GGUF's bytes
            doc["points"][i] = {"engine": p["engine"], "n": p["n"], "rate_tps": p.get("rate_tps"), "achieved_gbps": None,
                                "why": f"not applicable: parity does not know the weights engine {p['engine']} serves (no bytes per step)"}  # fmt: skip
    mem = memory.summary(arms, plan.reference)
    if mem:
        doc["memory"] = mem
    return doc


def snapshot_model_file(plan: SnapshotPlan) -> str | None:
    for eng in plan.bound.values():
        if eng.kind.model_source == "gguf":  # the GGUF an engine reads: its bytes per token
            return eng.local_model_file(plan.model) or (plan.model if os.path.isfile(plan.model) else None)
    p = plan.model_path
    return p if p is not None and os.path.isfile(p) and p.endswith(".gguf") else None
