"""The snapshot's efficiency hook: % of roofline per engine x N (parity.efficiency.roofline) from the
medians of valid repeats, and memory per engine from the arms (parity.efficiency.memory)."""

from __future__ import annotations

import os

from parity.efficiency import memory, roofline
from parity.engines import kind_of
from parity.gpu import bandwidth as peak
from parity.serving.summary import medians


def for_snapshot(ctx, plan, rows: list[dict], arms: list[dict]) -> dict:
    """The snapshot summary's `efficiency`: per engine x N from the medians of valid repeats,
    the GGUF a llama engine serves (vLLM serves the same weights), the run's bandwidth.json,
    and memory per engine from the arms."""
    doc = roofline.serving(medians(rows), snapshot_model_file(ctx, plan), plan.shape.ptok, plan.shape.gen, peak.load(ctx.run.path) if ctx.run else None)
    for i, p in enumerate(doc.get("points") or []):
        if kind_of(ctx.profile, p["engine"]).model_source is None:  # it reads no profile model file: the GGUF's bytes are not its own
            doc["points"][i] = {"engine": p["engine"], "n": p["n"], "rate_tps": p.get("rate_tps"), "achieved_gbps": None,
                                "why": f"not applicable: parity does not know the weights engine {p['engine']} serves (no bytes per step)"}  # fmt: skip
    mem = memory.summary(arms, plan.reference)
    if mem:
        doc["memory"] = mem
    return doc


def snapshot_model_file(ctx, plan) -> str | None:
    for e in plan.engines:
        if kind_of(ctx.profile, e).model_source == "gguf":  # the GGUF an engine reads: its bytes per token
            return kind_of(ctx.profile, e).local_model_file(ctx.profile, e, plan.model) or (plan.model if os.path.isfile(plan.model) else None)
    m = ctx.profile.models.get(plan.model)
    return m.path if m is not None and os.path.isfile(m.path) and m.path.endswith(".gguf") else None
