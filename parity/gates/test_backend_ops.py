"""The test-backend-ops tool: op-oracle runs and their parsing.

Lines look like `  MUL_MAT(type_a=f16,...): OK` (ANSI colours), `... not
supported [CUDA0]`, `... FAIL`, per-backend `  1304/1304 tests passed`, and
`2/2 backends passed`; CUDA builds interleave `ggml_backend_cuda_graph_compute:`
log lines.  `-b CPU` compares CPU with itself; without -b a CPU-only build
prints `Skipping CPU backend`.  An unknown op gives `0/0 tests passed` -- not
a pass.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_ANSI = re.compile(r"\x1b?\[[0-9;]*m")  # captures that lost the ESC byte keep the rest
# a backend log line (stderr) that may land mid-line after "  OP(params): " in a 2>&1 capture
_LOG = re.compile(r"(?:ggml_[a-z0-9_]+|llama_[a-z0-9_]+): [^\n]*$")
_STATUS_ONLY = re.compile(r"^\s*(OK|FAIL)\s*$")
_CASE = re.compile(r"^\s+(?P<op>[A-Z][A-Z0-9_]*)\((?P<params>.*)\):\s*(?P<rest>.*)$")
_TESTS = re.compile(r"^\s+(\d+)/(\d+) tests passed")
_BACKENDS = re.compile(r"^(\d+)/(\d+) backends passed")
_BACKEND = re.compile(r"^Backend (\d+)/(\d+): (\S+)")


@dataclass
class BackendResult:
    name: str
    passed: int | None = None
    total: int | None = None
    skipped: str | None = None
    failing: list[str] = field(default_factory=list)
    unsupported: int = 0
    ok_cases: int = 0


@dataclass
class OpsRun:
    backends: list[BackendResult]
    backends_passed: tuple[int, int] | None

    def backend(self, name: str) -> BackendResult | None:
        return next((b for b in self.backends if b.name == name), None)


def parse(text: str) -> OpsRun:
    backends: list[BackendResult] = []
    summary = None
    cur: BackendResult | None = None
    pending: str | None = None  # a case whose status was pushed to a later line by a log line
    for raw in text.splitlines():
        line = _ANSI.sub("", raw).rstrip()
        if cur is not None and pending and (m := _STATUS_ONLY.match(line)):
            _add_case(cur, pending, m.group(1))
            pending = None
            continue
        if _LOG.match(line):
            continue
        if m := _BACKEND.match(line):
            cur = BackendResult(m.group(3))
            backends.append(cur)
            continue
        if m := _BACKENDS.match(line):
            summary = (int(m.group(1)), int(m.group(2)))
            continue
        if cur is None:
            continue
        if line.strip().startswith("Skipping"):
            cur.skipped = line.strip()
        elif m := _TESTS.match(line):
            cur.passed, cur.total = int(m.group(1)), int(m.group(2))
        elif m := _CASE.match(line):
            rest = _LOG.sub("", m.group("rest")).strip()
            case = f"{m.group('op')}({m.group('params')})"
            if rest:
                _add_case(cur, case, rest)
                pending = None
            else:
                pending = case
    return OpsRun(backends, summary)


def _add_case(cur: BackendResult, case: str, rest: str) -> None:
    if rest.startswith("not supported"):
        cur.unsupported += 1
    elif rest.endswith("FAIL") or " FAIL" in rest:
        cur.failing.append(f"{case}: {rest}")
    elif rest.endswith("OK"):
        cur.ok_cases += 1


def argv(binary: str, op: str, backend: str, params: str | None = None) -> list[str]:
    return [binary, "-o", op, "-b", backend, *(["-p", params] if params else [])]


def verdict(run: OpsRun, backend: str, rc: int | None) -> tuple[str, str, str]:
    """(status, got, detail) for one op on one backend."""
    from parity.gates.checks import ERROR, FAIL, NOT_RUN, PASS

    b = run.backend(backend)
    if b is None:
        names = ", ".join(x.name for x in run.backends) or "none"
        return ERROR if rc not in (0, None) else NOT_RUN, "-", f"backend {backend} not in the run (backends: {names})"
    if b.skipped:
        return NOT_RUN, "-", f"{backend}: {b.skipped}"
    if b.total is None:
        return ERROR, "-", f"{backend}: no 'tests passed' summary (crash or truncated output, exit {rc})"
    got = f"{b.passed}/{b.total}"
    if b.total == 0:
        return NOT_RUN, got, f"no test cases ran on {backend} (unknown op or every case unsupported: {b.unsupported})"
    if b.passed != b.total or b.failing:
        listed = "; ".join(b.failing[:10]) + (f" (+{len(b.failing) - 10} more)" if len(b.failing) > 10 else "")
        return FAIL, got, f"failing cases: {listed}" if listed else "some cases failed"
    if rc not in (0, None):
        return ERROR, got, f"exit {rc} despite a clean summary"
    return PASS, got, f"{b.unsupported} cases not supported on {backend}" if b.unsupported else ""
