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

import math
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


# --------------------------------------------------------------------------- perf mode
# `test-backend-ops perf -o OP -b BACKEND`: each case timed for >= 1 s.  Console lines (the pin's
# print_perf_console; the GPU prints the same):
#   `  MUL_MAT(type_a=f16,...):      12345 runs -    81.23 us/run - 117.44 MFLOP/run -   1.45 TFLOPS`
#   `  ADD(type=f32,...):            8192 runs -     5.31 us/run -       48 kB/run -    8.63 GB/s`
#   `  OP(params): not supported`
# `--output sql` writes one `INSERT INTO test_backend_ops (...) VALUES ('..', ...);` per case with
# every field (time_us, flops, bandwidth_gb_s, memory_kb, n_runs at 6 decimals); the pin's
# `--output csv` keeps support metadata only (no time_us: the users' Phase 107), so a CSV is read
# only when its header has time_us (the users' own Phase 108 build adds it).

PERF_FORMATS = ("sql", "csv", "console")
_PERF = re.compile(r"^(?P<runs>\S+) runs -\s+(?P<us>\S+) us/run -\s+(?P<tail>.*)$")
_FLOPS = re.compile(r"^(?P<per>\S+) (?P<u1>[kMGT]?)FLOP/run -\s+(?P<rate>\S+) (?P<u2>[kMGT]?)FLOPS$")
_BANDWIDTH = re.compile(r"^(?P<kb>\S+) kB/run -\s+(?P<rate>\S+) GB/s$")
_SCALE = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_SQL_ROW = re.compile(r"^INSERT INTO test_backend_ops \((?P<fields>[^)]*)\) VALUES \((?P<values>.*)\);\s*$")
_SQL_VALUE = re.compile(r"'([^']*)'")


@dataclass
class PerfCase:
    op: str
    params: str
    supported: bool = True
    n_runs: float | None = None
    us_per_run: float | None = None
    flops: float | None = None  # FLOP/s, where the case counts FLOPs (matrix ops)
    gbps: float | None = None  # GB/s, where it does not (memory-bound ops)
    kb_per_run: float | None = None
    backend: str | None = None  # sql / csv rows name it; console: the block it was printed in

    @property
    def case(self) -> str:
        return f"{self.op}({self.params})"


@dataclass
class PerfRun:
    format: str  # console | sql | csv
    cases: list[PerfCase]
    backends: list[BackendResult]  # console: the `Backend i/n: NAME` blocks (sql/csv print none)
    problems: list[str] = field(default_factory=list)  # lines that named a case but gave no readable numbers
    lines: int = 0


def perf_argv(binary: str, op: str, backend: str, params: str | None = None, output: str = "console") -> list[str]:
    extra = [*(["-p", params] if params else []), *(["--output", output] if output != "console" else [])]
    return [binary, "perf", "-o", op, "-b", backend, *extra]


def perf_output(usage: str) -> str:
    """The output format to ask a build for, from its usage text (`test-backend-ops --help` prints
    it and exits 1): sql where `--output` offers it (every timing field), else the console lines."""
    m = re.search(r"--output <([a-z|]+)>", usage)
    return "sql" if m and "sql" in m.group(1).split("|") else "console"


def _number(v: str) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def parse_perf(text: str) -> PerfRun:
    """The perf cases of one run, in the format the text is in (sql, csv, else console lines)."""
    lines = text.splitlines()
    n = sum(1 for x in lines if x.strip())
    sql = ("INSERT INTO test_backend_ops", "CREATE TABLE IF NOT EXISTS test_backend_ops")
    if any(x.startswith(sql) for x in lines):
        return _parse_sql(lines, n)
    first = next((x for x in lines if x.strip()), "")
    if first.startswith('"') and '"op_name"' in first:
        return _parse_csv(text, n)
    return _parse_console(lines, n)


def _parse_console(lines: list[str], n: int) -> PerfRun:
    cases: list[PerfCase] = []
    problems: list[str] = []
    backends: list[BackendResult] = []
    cur: BackendResult | None = None
    pending: tuple[str, str] | None = None  # a case whose numbers a log line pushed to the next line
    for raw in lines:
        line = _ANSI.sub("", raw).rstrip()
        if _LOG.match(line):
            continue
        if m := _BACKEND.match(line):
            cur = BackendResult(m.group(3) or m.group(4))
            backends.append(cur)
            pending = None
            continue
        if cur is not None and line.strip().startswith("Skipping"):
            cur.skipped = line.strip()
            continue
        if cur is not None and (m := _BACKEND_STATUS.match(line)) and m.group(1) == cur.name:
            cur.status = m.group(2)
            continue
        if m := _CASE.match(line):
            rest = _LOG.sub("", m.group("rest")).strip()
            if not rest:
                pending = (m.group("op"), m.group("params"))
                continue
            _add_perf(cases, problems, m.group("op"), m.group("params"), rest, cur)
            pending = None
        elif pending and _PERF.match(line.strip()):
            _add_perf(cases, problems, *pending, line.strip(), cur)
            pending = None
    return PerfRun("console", cases, backends, problems, n)


def _add_perf(cases: list[PerfCase], problems: list[str], op: str, params: str, rest: str, cur) -> None:
    c = PerfCase(op, params, backend=cur.name if cur else None)
    if rest.startswith("not supported"):
        c.supported = False
        cases.append(c)
        return
    m = _PERF.match(rest)
    tail = m and (_FLOPS.match(m.group("tail")) or _BANDWIDTH.match(m.group("tail")))
    if not m or not tail:
        problems.append(f"{c.case}: no perf numbers in {rest[:120]!r}")
        return
    c.n_runs, c.us_per_run = _number(m.group("runs")), _number(m.group("us"))
    if "u2" in tail.re.groupindex:
        rate = _number(tail.group("rate"))
        c.flops = None if rate is None else rate * _SCALE[tail.group("u2")]
    else:
        c.kb_per_run, c.gbps = _number(tail.group("kb")), _number(tail.group("rate"))
    cases.append(c)


def _case_from_fields(row: dict, problems: list[str]) -> PerfCase | None:
    c = PerfCase(row.get("op_name", ""), row.get("op_params", ""), backend=row.get("backend_name") or None)
    if row.get("test_mode", "perf") != "perf":
        problems.append(f"{c.case}: a {row.get('test_mode')!r} row, not perf")
        return None
    c.supported = row.get("supported", "1") in ("1", "true")
    if not c.supported:
        return c
    if "time_us" not in row:
        problems.append(f"{c.case}: no time_us field")
        return None
    c.us_per_run, c.n_runs = _number(row["time_us"]), _number(row.get("n_runs"))
    flops, gbps = _number(row.get("flops")), _number(row.get("bandwidth_gb_s"))
    c.kb_per_run = _number(row.get("memory_kb"))
    if flops is None or flops != 0:  # the tool reports FLOP/s for counted ops and leaves bandwidth 0, else the reverse
        c.flops = flops
    else:
        c.gbps = gbps
    return c


def _parse_sql(lines: list[str], n: int) -> PerfRun:
    cases: list[PerfCase] = []
    problems: list[str] = []
    for line in lines:
        if not line.startswith("INSERT INTO test_backend_ops"):
            continue
        m = _SQL_ROW.match(line.rstrip())
        fields = [f.strip() for f in m.group("fields").split(",")] if m else []
        values = _SQL_VALUE.findall(m.group("values")) if m else []
        if not m or len(fields) != len(values):
            problems.append(f"an unreadable INSERT row: {line[:120]!r}")
            continue
        if c := _case_from_fields(dict(zip(fields, values)), problems):
            cases.append(c)
    return PerfRun("sql", cases, [], problems, n)


def _parse_csv(text: str, n: int) -> PerfRun:
    import csv

    cases: list[PerfCase] = []
    problems: list[str] = []
    reader = csv.reader(x for x in text.splitlines() if x.startswith('"'))
    header = next(reader, [])
    if "time_us" not in header:  # the pin's csv_printer: support metadata only
        problems.append(f"the CSV has no time_us column ({', '.join(header)}): this build's --output csv carries"
                        " support metadata only; parity asks for sql or console")
        return PerfRun("csv", cases, [], problems, n)
    for values in reader:
        if len(values) != len(header):
            row = ",".join(values)[:120]
            problems.append(f"a CSV row of {len(values)} fields under a header of {len(header)}: {row!r}")
            continue
        if c := _case_from_fields(dict(zip(header, values)), problems):
            cases.append(c)
    return PerfRun("csv", cases, [], problems, n)


def perf_problems(run: PerfRun, op: str, backend: str, rc: int | None) -> list[str]:
    """What keeps one perf run from counting, each named (closed-world: [] only on seen evidence:
    exit 0, the backend's block where the format prints one, >= 1 timed case, every number finite
    and > 0)."""
    out = list(run.problems)
    if rc:
        out.append(f"exit {rc}")
    if run.format == "console":
        b = next((x for x in run.backends if x.name == backend), None)
        if b is None:
            seen = ", ".join(x.name for x in run.backends) or "none"
            out.append(f"no 'Backend i/n: {backend}' block (backends seen: {seen}; {run.lines} non-empty lines)")
        elif b.skipped:
            out.append(f"{backend} was not tested ({b.skipped})")
        elif b.status != "OK":  # the block's last line: without it the output was cut short
            why = "it says FAIL" if b.status else "truncated output or a crash"
            out.append(f"no 'Backend {backend}: OK' line after its cases ({why})")
    mine = [c for c in run.cases if c.backend in (None, backend)]
    others = sorted({c.backend for c in run.cases} - {None, backend})
    if others:
        out.append(f"rows of another backend ({', '.join(str(x) for x in others)})")
    timed = [c for c in mine if c.supported]
    if not timed and not out:
        skipped = len(mine) - len(timed)
        out.append(f"no timed case of {op} on {backend} ({skipped} not supported; unknown op, or -p matched none)")
    for c in timed:
        bad = [k for k in ("us_per_run", "n_runs") if not _positive(getattr(c, k))]
        bad += [k for k in ("flops", "gbps") if getattr(c, k) is not None and not _positive(getattr(c, k))]
        if c.flops is None and c.gbps is None:
            bad.append("flops or GB/s")
        if bad:
            out.append(f"{c.case}: {', '.join(bad)} missing, non-finite or <= 0")
    return out


def _positive(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v) and v > 0
