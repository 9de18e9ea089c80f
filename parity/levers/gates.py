"""Both arms of a lever gated the users' way, by every gate kind that compares two arms
(parity.gates.kinds.GATES, GateKind.arms).

A lever declared bit-exact (BE, the default): per model x path, each arm's greedy md5
(llama-completion, the gates' prompt and args) must be the same in both arms, and neither
may be a failed or empty run.  A lossy lever (--lossy, KL): the KL band instead,
KLD(B || reference) <= KLD(A || reference) + slack on gates.kl.candidate (the md5s are
still recorded, as evidence, not as the gate)."""

from __future__ import annotations

from parity.context import Run
from parity.gates.base import GateInputs
from parity.gates.kinds import for_arms


def lever_kind(lossy: bool) -> str:
    return "KL" if lossy else "BE"


def check_lossy(profile) -> None:
    """What a lossy lever's gates need of the profile (UsageError before anything is built)."""
    for _, kind, role in for_arms(lever_kind(True)):
        if role:
            kind.check_arms(profile)


def arm_models(profile, models: list[str], lossy: bool) -> list[str]:
    """The model files the arms' gates read (made before the lock)."""
    return [m for _, kind, role in for_arms(lever_kind(lossy)) if role for m in kind.arm_models(profile, models)]


def run_gates(inputs: GateInputs, run: Run, arm_a: str, arm_b: str, models: list[str], paths: list[str | None],
              lossy: bool, tag: str) -> dict:  # fmt: skip
    """{kind: its comparison of the arms, None when it is not run for this lever} (md5, kl)."""
    a, b = inputs.engine(arm_a), inputs.engine(arm_b)
    return {name: kind.compare_arms(inputs, run, a, b, models, paths, tag) if role else None for name, kind, role in for_arms(lever_kind(lossy))}


def verdict(phases: list[dict], lossy: bool) -> dict:
    """Over every gate phase: ok, the gate kind (BE / KL), a short summary and the first problem.
    ok: every gating kind has rows and they all agree, and no evidence kind's run failed."""
    lever = lever_kind(lossy)
    ok, said, problems = True, {"gate": [], "evidence": []}, {"gate": [], "evidence": []}
    for name, kind, role in for_arms(lever):
        if not role:
            continue
        rows = [r for ph in phases for r in kind.arm_rows(ph.get(name))]
        if role == "gate":
            bad = [r for r in rows if not kind.arm_ok(r)]
            ok = ok and bool(rows) and not bad
            said[role].append(kind.arms_summary(rows))
        else:
            bad = [r for r in rows if r["status"] == "error"]
            ok = ok and not bad
            said[role].append(f"{kind.arms_summary(rows)} (informative)")
        problems[role] += [kind.arm_problem(r, role) for r in bad]
    ok = ok and bool(said["gate"])  # closed-world: a lever no kind gates is not green
    first = next(iter(problems["gate"] + problems["evidence"]), None)
    return {"ok": ok, "kind": lever, "summary": "; ".join(said["gate"] + said["evidence"]), "problem": first}
