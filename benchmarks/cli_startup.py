"""Wall time of `parity --help`: median of N runs of the console script next to
sys.executable, and of `python -m parity --help`.  Target: < 150 ms.

    python benchmarks/cli_startup.py [--runs 10] [--json]

Two floors are measured next to it, so a slow box can be told from a slow parity:
the bare interpreter (`python -c pass`) and a one-command typer app's --help.

Over target?  `python -X importtime -m parity --help 2>&1 | sort -t'|' -k2 -n | tail`
shows what startup imports; make it lazy (import inside the command function).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

TARGET_MS = 150.0
BARE_TYPER = (
    "import typer\n"
    "app = typer.Typer(add_completion=False, rich_markup_mode=None)\n"
    "@app.command()\n"
    "def hello(name: str = 'x'):\n"
    "    'Say hello.'\n"
    "app()\n"
)


def measure(argv: list[str], runs: int, env: dict | None = None, rc: int = 0, cwd: str | None = None) -> list[float]:
    """ms of each of `runs` starts of argv (after one that warms the page cache and .pyc files);
    a start that does not exit `rc` stops the benchmark."""
    from parity.runners.local import LocalRunner

    runner = LocalRunner()
    runner.run(argv, env=env, cwd=cwd, timeout=60)
    times = []
    for _ in range(runs):
        res = runner.run(argv, env=env, cwd=cwd, timeout=60)
        if res.rc != rc:
            raise SystemExit(f"{' '.join(argv)} exited {res.rc}, not {rc}: {res.tail(3)}")
        times.append(res.duration_s * 1000)
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    script = Path(sys.executable).with_name("parity")
    cases = {"python -m parity --help": [sys.executable, "-m", "parity", "--help"]}
    if script.exists():
        cases = {f"{script} --help": [str(script), "--help"], **cases}
    else:
        print(f"note: no console script at {script}; measuring python -m parity only", file=sys.stderr)
    floors = {"floor: python -c pass": [sys.executable, "-c", "pass"], "floor: one-command typer app --help": [sys.executable, "-c", BARE_TYPER, "--help"]}
    results, baselines = [], []
    for label, argv in {**cases, **floors}.items():
        t = measure(argv, args.runs)
        row = {"command": label, "runs": args.runs, "median_ms": round(statistics.median(t), 1), "min_ms": round(min(t), 1), "max_ms": round(max(t), 1)}
        (baselines if label in floors else results).append(row)
    # Without .pyc files every run compiles parity's sources: a few ms more than a user's box sees.
    bytecode = "off (PYTHONDONTWRITEBYTECODE is set)" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "on"
    if args.json:
        print(json.dumps({"target_ms": TARGET_MS, "bytecode_cache": bytecode, "results": results, "floors": baselines}, indent=2))
    else:
        for r in results + baselines:
            verdict = "floor" if r in baselines else "ok" if r["median_ms"] < TARGET_MS else f"OVER {TARGET_MS:.0f} ms"
            print(f"{r['median_ms']:7.1f} ms median ({r['min_ms']:.1f}-{r['max_ms']:.1f}, {r['runs']} runs)  {r['command']}  [{verdict}]")
        print(f"bytecode cache: {bytecode}")
    return 0 if all(r["median_ms"] < TARGET_MS for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
