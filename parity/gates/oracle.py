"""The op-oracle gate: `test-backend-ops -o OP -b BACKEND`.

Zero tolerance (the users' rule): no retry unless gates.op_retries asks for one,
and a pass that needed a retry is "flaky", never "pass".  Every attempt is kept
in the artifact."""

from __future__ import annotations

from parity.context import Run
from parity.errors import ParityError
from parity.gates import test_backend_ops as tbo
from parity.gates.base import LIST, STR, GateInputs, GateKind, Target
from parity.gates.checks import ERROR, FLAKY, PASS, Check
from parity.gates.common import dry_tool, gate_engine, save


def op_gate(inputs: GateInputs, run: Run, op: str, backend: str | None = None, engine: str | None = None, tag: str = "") -> Check:
    g = inputs.gates
    backend = backend or g.op_backend
    params = g.op_params.get(op)
    name = f"op {op} [{backend}]" if not params else f"op {op} ({params}) [{backend}]"
    try:
        eng = gate_engine(inputs, engine)
        binary = eng.tool_path("test-backend-ops", run.runner, run.out)
    except ParityError as e:
        return Check(name, "op", "all", "-", ERROR, str(e))
    engine = eng.name
    attempts = []
    for attempt in range(1, 2 + max(0, g.op_retries)):
        res = run.runner.run(tbo.argv(binary, op, backend, params), env=eng.section.env, timeout=g.op_timeout_s)
        output = save(run, f"gates/{tag}op-{op}-{backend}-{attempt}.txt", res.stdout + res.stderr)
        if res.timed_out:
            status, got, detail = ERROR, "-", f"timed out after {g.op_timeout_s:g} s (gates.op_timeout_s)"
        elif res.rc in (126, 127) and not res.stdout:
            status, got, detail = ERROR, "-", f"cannot run {binary}: {res.stderr.strip()}"
        else:
            status, got, detail = tbo.verdict(tbo.parse(res.stdout + "\n" + res.stderr), backend, res.rc)
        attempts.append({"attempt": attempt, "status": status, "got": got, "detail": detail, "rc": res.rc, "seconds": round(res.duration_s, 2), "output": output})
        if status == PASS:
            break
    final = attempts[-1]
    status, detail = final["status"], final["detail"]
    if len(attempts) > 1:
        first = attempts[0]
        if status == PASS:  # zero tolerance: a retry that passed does not make a pass
            status = FLAKY
            detail = f"flaky: passed on attempt {len(attempts)} of {1 + g.op_retries} (gates.op_retries)"
        else:
            detail = f"{status} on every attempt ({len(attempts)})" + (f"; {detail}" if detail else "")
        detail += f"; attempt 1: {first['got']} {first['status']}: {first['detail']}"
    total = final["got"].split("/")[1] if "/" in final["got"] else None
    expected = f"{total}/{total}" if total else "all"
    return Check(name, "op", expected, final["got"], status, detail, attempts=attempts, data={"engine": engine, "backend": backend, "op": op, "params": params})


class OpGate(GateKind):
    name = "op"
    what = "op-oracle"
    reads = ("ops", "engines")
    switch = "ops"
    options = {"ops": LIST, "backend": STR}

    def defaults(self, g) -> dict:
        return {"ops": list(g.ops)}

    def expand(self, inputs, spec, engine) -> list[Target]:
        return [Target(engine, op=op) for op in spec.ops]

    def label(self, t: Target) -> str:
        return f"op {t.op}"

    def run(self, inputs, run, spec, t: Target, tag: str) -> Check:
        return op_gate(inputs, run, t.op, spec.backend, t.engine, tag)

    def dry(self, inputs, runner, out, spec, t: Target) -> dict:
        g = inputs.gates
        eng = gate_engine(inputs, t.engine)
        binary = dry_tool(eng, "test-backend-ops", runner, out)
        argv = tbo.argv(binary, t.op, spec.backend or g.op_backend, g.op_params.get(t.op))
        n = g.op_retries
        retries = f", {n} retr{'y' if n == 1 else 'ies'} (a pass on one is flaky)" if n else ", no retry"
        return {"commands": [{"argv": argv, "env": dict(eng.section.env)}],
                "expected": f"every case passes{retries}", "files": {f"test-backend-ops of {eng.name}": binary}}

    def ran_on(self, gates, spec, engine, e: str) -> list[str]:
        return [f"op-oracle {', '.join(spec.ops)}"] if spec.ops and e == engine else []

    def users_name(self, c: dict, gate_engine, default_paths) -> str:
        return f"op_{(c.get('data') or {}).get('op') or c['check'].split()[1]}"

    def users_expected(self, c: dict) -> str:
        return "all"

    def users_output(self, c: dict) -> str | None:
        return (c.get("attempts") or [{}])[-1].get("output")


KIND = OpGate()
