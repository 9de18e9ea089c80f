"""One gate check's result, shared by every gate kind."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

PASS, FAIL, ERROR, NOT_RUN = "pass", "fail", "error", "not-run"
FLAKY = "flaky"  # passed only on a retry: not a pass (zero tolerance)


@dataclass
class Check:
    check: str  # e.g. "md5 tiny/paged", "op MUL_MAT", "kl tiny-perturbed"
    kind: str  # its gate kind: a key of parity.gates.kinds.GATES (md5 | op | kl | output_parity)
    expected: str
    got: str
    status: str  # pass | fail | error | flaky | not-run
    detail: str = ""
    model: str | None = None
    path: str | None = None
    attempts: list[dict] = field(default_factory=list)
    data: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def overall(checks: list[Check]) -> str:
    """Closed-world: pass only when there are checks and every one passed.  fail when any
    check failed, errored or was flaky; not-run when the only non-passes are not-run."""
    if any(c.status in (FAIL, ERROR, FLAKY) for c in checks):
        return FAIL
    if not checks or any(c.status != PASS for c in checks):
        return NOT_RUN
    return PASS
