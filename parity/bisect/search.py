"""The bisection itself, pure: states 0..n (0 = the known-good endpoint, k = the first k
candidates applied / commit k), probe(k) -> good | bad | undecided.  The known-bad endpoint n
is probed first (when it is not bad, there is nothing to bisect); then halving [good, bad]
finds the first bad state in at most ceil(log2 n) more probes.  The good endpoint is the
reference every probe is compared with (probed only when verify_good asks for it).  An
undecided probe ends the search: it never guesses."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Callable

GOOD, BAD, UNDECIDED = "good", "bad", "undecided"


@dataclass
class Probe:
    n: int  # probe number, 1-based (0: the reference, when it is probed)
    role: str  # reference | endpoint | bisect
    state: int  # 0 = the good endpoint, k = the first k candidates / commit k
    label: str  # the patch or commit of that state
    verdict: str = UNDECIDED
    result: str = ""  # the gate's / metric's result in words
    build: dict = field(default_factory=dict)  # {cached, seconds, key} or {}
    evidence: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Outcome:
    culprit: int | None  # the first bad state, None when the search could not name one
    reason: str  # why it stopped, in words
    probes: list[Probe]
    bound: int  # ceil(log2 n) + 1: what the probes (reference not counted) may not exceed

    @property
    def counted(self) -> int:
        return sum(1 for p in self.probes if p.role != "reference")


def bound(n: int) -> int:
    return math.ceil(math.log2(n)) + 1 if n > 1 else 1


def bisect(n: int, labels: list[str], probe: Callable[[int], Probe], verify_good: bool = False, on_probe=None) -> Outcome:
    """labels[k] names state k (labels[0] the good endpoint).  probe(k) fills a Probe's verdict,
    result, build and evidence; this function numbers it and sets its role."""
    if n < 1:
        raise ValueError("nothing to bisect: no candidates between the endpoints")
    probes: list[Probe] = []

    def run(k: int, role: str) -> Probe:
        p = probe(k)
        p.n, p.role, p.state, p.label = (0 if role == "reference" else sum(1 for q in probes if q.role != "reference") + 1), role, k, labels[k]
        probes.append(p)
        if on_probe:
            on_probe(p)
        return p

    b = bound(n)
    if verify_good:
        g = run(0, "reference")
        if g.verdict != GOOD:
            return Outcome(None, f"the good endpoint {labels[0]} is not good ({g.verdict}: {g.result})", probes, b)
    e = run(n, "endpoint")
    if e.verdict != BAD:
        what = "is not bad" if e.verdict == GOOD else "could not be decided"
        return Outcome(None, f"the bad endpoint {labels[n]} {what} ({e.result}): nothing to bisect", probes, b)
    lo, hi = 0, n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        p = run(mid, "bisect")
        if p.verdict == UNDECIDED:
            return Outcome(None, f"could not decide {labels[mid]} ({p.result}): the first bad state lies in {labels[lo + 1]}..{labels[hi]}", probes, b)
        lo, hi = (lo, mid) if p.verdict == BAD else (mid, hi)
    return Outcome(hi, f"{labels[hi]} is the first bad state: {labels[lo]} is good, {labels[hi]} is bad", probes, b)


COLUMNS = ["probe", "role", "state", "build", "result", "verdict"]


def build_cell(b: dict) -> str:
    if not b:
        return "-"
    if b.get("failed"):
        return f"failed after {b.get('seconds', 0):.0f} s"
    return "cached" if b.get("cached") else f"built {b.get('seconds', 0):.0f} s"


def rows(probes: list[Probe]) -> list[list[str]]:
    return [[str(p.n) if p.role != "reference" else "ref", p.role, p.label, build_cell(p.build), p.result, p.verdict] for p in probes]


def markdown(probes: list[Probe]) -> str:
    out = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows(probes)]
    return "\n".join(out) + "\n"


def tsv(probes: list[Probe]) -> str:
    return "\n".join(["\t".join(COLUMNS)] + ["\t".join(c.replace("\t", " ") for c in r) for r in rows(probes)]) + "\n"
