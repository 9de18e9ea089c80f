"""The blocks of a focused op timing: each block runs every arm once (ABBA: the order rotated
per block), each arm one `test-backend-ops perf` run per op; every run's output is kept under
ops/ in the run dir and read by parity.gates.test_backend_ops.parse_perf."""

from __future__ import annotations

import time

from parity.artifacts import slugify
from parity.gates.test_backend_ops import parse_perf, perf_argv, perf_output, perf_problems
from parity.optime import stats
from parity.optime.plan import TOOL, OpsPlan, commands
from parity.stats import Rule
from parity.stats.blocks import block_line, block_order, run_blocks

STDERR = "\n--- stderr ---\n"  # where a run's log (ops/<arm>-b<block>-<op>.txt) turns from stdout to stderr


def rows_of(cases, arm: str, engine: str, block: int, slot: int, op: str, backend: str) -> list[dict]:
    """One run's cases (parse_perf) as the blocks' rows; a case the run printed twice stays two (#2)."""
    rows, seen = [], {}
    for c in cases:
        if c.backend not in (None, backend):
            continue
        seen[c.case] = seen.get(c.case, 0) + 1
        key = c.case if seen[c.case] == 1 else f"{c.case}#{seen[c.case]}"
        rows.append(
            {
                "engine": arm,
                "build": engine,
                "repeat": block,
                "slot": slot,
                "op": op,
                "case": key,
                "supported": c.supported,
                "n_runs": c.n_runs,
                "us_per_run": c.us_per_run,
                "flops": c.flops,
                "gbps": c.gbps,
                "kb_per_run": c.kb_per_run,
            }
        )
    return rows


def probe_output(runner, binaries: dict[str, str], envs: dict[str, dict]) -> str:
    """sql when every arm's tool offers `--output sql` (its usage, printed by --help), else the
    console lines: both arms are read in one format."""
    found = []
    for e, binary in binaries.items():
        res = runner.run([binary, "--help"], env=envs.get(e) or {}, timeout=60)
        found.append(perf_output(res.stdout + res.stderr))
    return "sql" if found and all(f == "sql" for f in found) else "console"


def measure(
    p: OpsPlan, binaries: dict[str, str], output: str, runner, run, info, rule: Rule | None = None, clock=time.monotonic
) -> dict:
    """Blocks until the stop rule ends them; the document of ops.json (stats.analyze)."""
    rows: list[dict] = []
    problems: list[dict] = []
    orders: list[list[str]] = []

    def one(a, block: int, slot: int, op: str) -> None:
        argv = perf_argv(binaries[a.engine], op, p.backend, p.params, output)
        res = runner.run(argv, env=p.envs[a.engine], timeout=p.timeout_s)
        # the arm as named (paged+lever), so a glob over an arm's logs finds it
        log = f"ops/{a.name.replace('/', '_')}-b{block}-{slugify(op, 40)}.txt"
        if run is not None:
            run.write_text(log, res.stdout + (f"{STDERR}{res.stderr}" if res.stderr.strip() else ""))
        if res.timed_out:
            found = [f"timed out after {p.timeout_s:g} s (gates.op_timeout_s)"]
            cases = []
        else:
            perf = parse_perf(res.stdout)
            found, cases = perf_problems(perf, op, p.backend, res.rc), perf.cases
            tail = (res.stderr.strip().splitlines() or [""])[-1][:160]
            found = [f"{x}: {tail}" if x.startswith("exit ") and tail else x for x in found]
        problems.extend({"arm": a.name, "block": block, "op": op, "problem": x, "log": log} for x in found)
        rows.extend(rows_of(cases, a.name, a.engine, block, slot, op, p.backend))

    def run_block(block: int) -> None:
        by_name = {a.name: a for a in p.arms}
        seq = [by_name[n] for n in block_order([a.name for a in p.arms], block, p.order)]
        orders.append([a.name for a in seq])
        for slot, a in enumerate(seq):
            for op in p.ops:
                one(a, block, slot, op)

    def widths() -> dict:
        return stats.half_widths(rows, p.reference, p.threshold_pct, p.confidence)

    def report(block, counted, hw, decision) -> None:
        info(f"[ops] {block_line(block, counted, hw, decision, p.budget)}")

    arms = ", ".join(a.name for a in p.arms)
    info(
        f"[ops] {TOOL} perf -o {','.join(p.ops)} -b {p.backend} ({output}); arms {arms}"
        f" (reference {p.reference or 'none'}), order {p.order}; {p.budget.describe()}"
    )
    rule_, why, blocks, elapsed = run_blocks(p.budget, run_block, widths, report, clock)
    doc = {
        "kind": "ops",
        "mode": "ab" if p.reference else "repeat",
        "arms": [{"name": a.name, "engine": a.engine} for a in p.arms],
        "engines": [a.name for a in p.arms],
        "reference": p.reference,
        "ops": p.ops,
        "backend": p.backend,
        "params": p.params,
        "output": output,
        "commands": commands(p, binaries, output),
        "env": p.envs,
        "order_rule": p.order,
        "order": orders,
        "blocks": blocks,
        "stop": {
            "rule": rule_,
            "why": why,
            "blocks": blocks,
            "elapsed_s": round(elapsed, 3),
            "budget": p.budget.describe(),
            "half_widths": widths(),
        },
    }
    return {
        **doc,
        **stats.analyze(
            rows,
            problems,
            [a.name for a in p.arms],
            p.ops,
            blocks,
            p.reference,
            p.threshold_pct,
            p.confidence,
            rule or Rule(),
        ),
    }
