"""Gate kinds by name (GATES), each in its own module: the pre/post gate set, `parity gate`,
the lever A/B and the bisection probes iterate it.  A new gate is one module plus one line here
(plus its options: a GateSpec field each)."""

from __future__ import annotations

from parity.gates import banner, kl, md5, oracle, output_parity
from parity.gates.base import GateKind
from parity.gates.checks import PASS, Check

GATES: dict[str, GateKind] = {
    "md5": md5.KIND,
    "op": oracle.KIND,
    "kl": kl.KIND,
    "output_parity": output_parity.KIND,
    "banner": banner.KIND,
}


def gate_set() -> list[GateKind]:
    """The kinds a pre/post gate set runs, in the order their checks run."""
    return [k for k in GATES.values() if k.in_gate_set]


def of_check(kind: str) -> GateKind:
    """The kind of a recorded check (gates.json); an unknown one reads with the defaults."""
    return GATES.get(kind) or GateKind()


def for_arms(lever: str) -> list[tuple[str, GateKind, str]]:
    """(name, kind, role) of every kind that compares two arms, role for a lever of gate kind
    `lever` (BE | KL): gate, evidence, or "" (not run for it)."""
    return [(name, k, k.arms.get(lever, "")) for name, k in GATES.items() if k.arms]


def red_in_summary(doc: dict) -> list[Check]:
    """The gates measured inside a run (in_gate_set False) that are not green in its summary."""
    return [c for k in GATES.values() if not k.in_gate_set and (c := k.from_summary(doc)) is not None and c.status != PASS]
