"""Bind once, pass values (issue 55): the run context (`ctx`: profile, runner, output, run dir)
reaches only the entry points -- parity/cli/, session.py, context.py, campaign.py, a campaign
step (`campaign_step`) and the domain function a command calls (docs/ARCHITECTURE.md's command
table).  Everything below them takes values: the plan, a `parity.context.Run`, bound engines."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from pysource import parse

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "parity"
ENTRY_FILES = {"session.py", "context.py", "campaign.py"}


def command_functions() -> set[str]:
    """'parity.gating.gate', ... from the command table."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    return set(re.findall(r"\|\s*`parity [a-z ]+`\s*\|\s*`cli/[a-z_]+\.py`\s*\|\s*`(parity\.[a-z_.]+)`\s*\|", text))


def functions_taking(source: str, name: str = "ctx") -> list[tuple[int, str]]:
    out = []
    for n in ast.walk(parse(source)):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = n.args.posonlyargs + n.args.args + n.args.kwonlyargs
            if any(a.arg == name for a in args):
                out.append((n.lineno, n.name))
    return out


def dotted(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def offenders() -> list[str]:
    allowed = command_functions()
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG)
        if rel.parts[0] == "cli" or (len(rel.parts) == 1 and rel.name in ENTRY_FILES):
            continue
        for line, fn in functions_taking(path.read_text()):
            if fn != "campaign_step" and f"{dotted(path)}.{fn}" not in allowed:
                bad.append(f"{path.relative_to(ROOT)}:{line} {fn}(ctx, ...)")
    return bad


def test_the_scan_finds_a_ctx_parameter_wherever_it_sits():
    src = "def a(ctx): pass\ndef b(x, *, ctx=None): pass\nclass C:\n    def m(self, ctx): pass\ndef d(context): pass\n"
    assert functions_taking(src) == [(1, "a"), (2, "b"), (4, "m")]


def test_the_command_table_is_read():
    fns = command_functions()
    assert {"parity.gating.gate", "parity.serving.snapshot.snapshot", "parity.levers.ab.run"} <= fns and len(fns) >= 30


def test_no_function_below_the_entry_points_takes_ctx():
    bad = offenders()
    assert not bad, "take values (the plan, parity.context.Run, parity.engines.bound.Engine), not ctx:\n" + "\n".join(bad)
