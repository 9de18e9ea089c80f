"""The test-backend-ops tool: op-oracle runs and their parsing.

Lines look like `  MUL_MAT(type_a=f16,...): OK` (ANSI colours), `... not
supported [CUDA0]`, `... FAIL`, per-backend `  1304/1304 tests passed`, and
`2/2 backends passed`; CUDA builds interleave `ggml_backend_cuda_graph_compute:`
log lines; older builds head each backend `Backend 2/2 (CUDA0)` instead of
`Backend 1/1: CUDA0`.  `-b CPU` compares CPU with itself; without -b a CPU-only build
prints `Skipping CPU backend`.  An unknown op gives `0/0 tests passed` -- not
a pass.

Verdicts are closed-world: a pass needs the evidence of one (the requested
backend's `Backend i/n: NAME` block, its `N/N tests passed` with N > 0 and as
many OK case lines, no FAIL, exit 0).  Anything else is fail or error and says
what was missing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from parity.gates.checks import ERROR, FAIL, PASS

_ANSI = re.compile(r"\x1b?\[[0-9;]*m")  # captures that lost the ESC byte keep the rest
# a backend log line (stderr) that may land mid-line after "  OP(params): " in a 2>&1 capture
_LOG = re.compile(r"(?:ggml_[a-z0-9_]+|llama_[a-z0-9_]+): [^\n]*$")
_STATUS_ONLY = re.compile(r"^\s*(OK|FAIL)\s*$")
_CASE = re.compile(r"^\s+(?P<op>[A-Z][A-Z0-9_]*)\((?P<params>.*)\):\s*(?P<rest>.*)$")
_TESTS = re.compile(r"^\s+(\d+)/(\d+) tests passed")
_BACKENDS = re.compile(r"^(\d+)/(\d+) backends passed")
# `Backend 1/2: CUDA0`; builds before mid-2025 print `Backend 2/2 (CUDA0)` (then `  Backend name: ...`)
_BACKEND = re.compile(r"^Backend (\d+)/(\d+)(?:: (\S+)| \((\S+)\))")
_BACKEND_STATUS = re.compile(r"^\s+Backend (\S+): (OK|FAIL)\s*$")


@dataclass
class BackendResult:
    name: str
    passed: int | None = None
    total: int | None = None
    skipped: str | None = None
    failing: list[str] = field(default_factory=list)
    unsupported: int = 0
    ok_cases: int = 0
    status: str | None = None  # the tool's own "Backend NAME: OK|FAIL" line


@dataclass
class OpsRun:
    backends: list[BackendResult]
    backends_passed: tuple[int, int] | None
    orphans: list[str] = field(default_factory=list)  # summary/status lines outside any backend block
    lines: int = 0

    def backend(self, name: str) -> BackendResult | None:
        return next((b for b in self.backends if b.name == name), None)


def parse(text: str) -> OpsRun:
    backends: list[BackendResult] = []
    summary = None
    cur: BackendResult | None = None
    pending: str | None = None  # a case whose status was pushed to a later line by a log line
    orphans: list[str] = []
    lines = text.splitlines()
    for raw in lines:
        line = _ANSI.sub("", raw).rstrip()
        if cur is not None and pending and (m := _STATUS_ONLY.match(line)):
            _add_case(cur, pending, m.group(1))
            pending = None
            continue
        if _LOG.match(line):
            continue
        if m := _BACKEND.match(line):
            cur = BackendResult(m.group(3) or m.group(4))
            backends.append(cur)
            continue
        if m := _BACKENDS.match(line):
            summary = (int(m.group(1)), int(m.group(2)))
            continue
        if cur is None:
            if _TESTS.match(line) or _BACKEND_STATUS.match(line):
                orphans.append(line.strip())
            continue
        if m := _BACKEND_STATUS.match(line):
            if m.group(1) == cur.name:
                cur.status = m.group(2)
            else:
                orphans.append(line.strip())
        elif line.strip().startswith("Skipping"):
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
    return OpsRun(backends, summary, orphans, sum(1 for x in lines if x.strip()))


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
    """(status, got, detail) for one op on one backend: pass only on seen evidence.  rc None: the
    exit code was not recorded (an old artifact), so only the text can show the pass."""

    b = run.backend(backend)
    if b is None:
        names = ", ".join(x.name for x in run.backends) or "none"
        missing = f"no 'Backend i/n: {backend}' block in the output (backends seen: {names}; {run.lines} non-empty lines, exit {rc})"
        said = [o for o in run.orphans if _says_failure(o)]
        if said:
            got = next((f"{m.group(1)}/{m.group(2)}" for o in said if (m := _TESTS.match("  " + o))), "-")
            return FAIL, got, f"{missing}; outside any block it says: {'; '.join(said[:4])}"
        if run.orphans:
            missing += f"; outside any block: {'; '.join(run.orphans[:4])}"
        return ERROR, "-", missing
    if b.skipped:
        return ERROR, "-", f"{backend} was not tested ({b.skipped})"
    if b.total is None:
        return ERROR, "-", f"{backend}: no 'N/N tests passed' summary (crash or truncated output, exit {rc})"
    got = f"{b.passed}/{b.total}"
    if b.total == 0:
        return ERROR, got, f"no test case ran on {backend} (unknown op or every case unsupported: {b.unsupported})"
    if b.passed != b.total or b.failing or b.status == "FAIL":
        listed = "; ".join(b.failing[:10]) + (f" (+{len(b.failing) - 10} more)" if len(b.failing) > 10 else "")
        return FAIL, got, f"failing cases: {listed}" if listed else f"the tool says Backend {backend}: {b.status or 'not OK'}"
    if b.ok_cases != b.passed:
        return ERROR, got, f"summary says {got} but {b.ok_cases} OK case lines were seen on {backend} (altered or truncated output)"
    if rc is not None and rc != 0:  # None: not recorded (an old artifact's op_*.txt)
        return ERROR, got, f"exit {rc} despite a clean summary"
    return PASS, got, f"{b.unsupported} cases not supported on {backend}" if b.unsupported else ""


def _says_failure(line: str) -> bool:
    m = _TESTS.match("  " + line)
    return bool(m and m.group(1) != m.group(2)) or line.endswith("FAIL")
