#!/usr/bin/env python3
"""Follow a real parity command through the code (issue 55's measure): every call of a parity
function in the main thread, in order.  A *stay* is a run of consecutive calls inside one module;
a *climb* is a call from a module into one of a higher layer (a module's import is not a call).
With --carrier ctx only the calls of functions that take ctx count (and the target's): the walk
of the context itself (docs/ARCHITECTURE.md's layer
order, top first), i.e. a lower layer calling back up.  Prints the stay at which TARGET (default
parity.serving.sweep) is first reached, the climbs among the first EVENTS calls, and those climbs.

Run it in the tree to measure (before and after a change, the same command):
  PYTHONPATH=<tree> python3 scripts/context_walk.py [--target M] [--events 400] -- snapshot -p smoke ...
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path


def layers(arch: Path) -> dict[str, int]:
    """package (or top-level module) -> its layer, 0 = top."""
    block = re.search(r"```layers\n(.*?)```", arch.read_text(), re.S).group(1)
    out = {}
    for i, line in enumerate(x for x in block.splitlines() if x.strip()):
        for name in line.split("#")[0].split():
            out[name] = i
    return out


def package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "parity"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="parity.serving.sweep")
    ap.add_argument("--events", type=int, default=400)
    ap.add_argument("--carrier", default=None, help="count only calls of functions with this parameter (e.g. ctx), and the target's")
    ap.add_argument("argv", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    argv = a.argv[1:] if a.argv[:1] == ["--"] else a.argv
    import parity

    tree = Path(parity.__file__).resolve().parents[1]
    rank = layers(tree / "docs" / "ARCHITECTURE.md")
    calls: list[str] = []

    def importing(frame) -> bool:
        while frame is not None:
            if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__", "").startswith("parity"):
                return True
            frame = frame.f_back
        return False

    def prof(frame, event, arg):
        if event == "call":
            mod = frame.f_globals.get("__name__", "")
            if (mod.startswith("parity.") or mod == "parity") and not importing(frame):  # code runs, imports do not count
                code = frame.f_code
                if a.carrier is None or mod == a.target or a.carrier in code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]:
                    calls.append(mod)

    from parity import openblas
    from parity.cli import main as parity_main

    openblas.limit()
    sys.argv = ["parity", *argv]
    sys.setprofile(prof)
    try:
        code = parity_main()
    except SystemExit as e:
        code = e.code
    finally:
        sys.setprofile(None)
    stays = [m for i, m in enumerate(calls) if i == 0 or calls[i - 1] != m]
    reached = next((i + 1 for i, m in enumerate(stays) if m == a.target), None)
    climbs = []
    for prev, cur in zip(calls[: a.events], calls[1 : a.events]):
        p, c = rank.get(package(prev)), rank.get(package(cur))
        if p is not None and c is not None and c < p:
            climbs.append(f"{prev} -> {cur}")
    print(f"tree {tree}; exit {code}; {len(calls)} calls, {len(stays)} stays", file=sys.stderr)
    print(f"{a.target} first reached at stay {reached}", file=sys.stderr)
    print(f"climbs in the first {a.events} calls: {len(climbs)}", file=sys.stderr)
    for c in dict.fromkeys(climbs):
        print(f"  {c} (x{climbs.count(c)})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
