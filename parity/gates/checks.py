"""One gate check's result, shared by every gate kind."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

PASS, FAIL, ERROR, NOT_RUN = "pass", "fail", "error", "not-run"


@dataclass
class Check:
    check: str  # e.g. "md5 tiny/paged", "op MUL_MAT", "kl tiny-perturbed"
    kind: str  # md5 | op | kl
    expected: str
    got: str
    status: str  # pass | fail | error | not-run
    detail: str = ""
    model: str | None = None
    path: str | None = None
    attempts: list[dict] = field(default_factory=list)
    data: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def overall(checks: list[Check]) -> str:
    """fail when any check failed or errored; not-run checks do not count as passed."""
    if any(c.status in (FAIL, ERROR) for c in checks):
        return FAIL
    if not any(c.status == PASS for c in checks):
        return NOT_RUN
    return PASS
