"""Wall time of a parity start for commands that end before any build or run: median of N starts
each (`python -m parity ...` in a subprocess, its own artifacts dir, the history store off).

    python benchmarks/command_start.py [--runs 9] [--json]

What each start pays is the imports its command needs; the suite starts parity a few hundred
times, so a few ms here show in `make test`.  No target: compare two trees on the same box,
one after the other (docs/TIMINGS.md).  `python -X importtime -m parity <command> 2>&1 |
sort -t'|' -k2 -n | tail` shows where a start goes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from cli_startup import measure

REPO = Path(__file__).resolve().parents[1]
# label -> (argv, the exit it must end with: 2 is a one-line refusal before any work)
COMMANDS = {
    "lock status": (["lock", "status", "--lock-dir", "{tmp}/lock"], 0),
    "config show": (["config", "show"], 0),
    "config show --profile missing.yaml": (["config", "show", "--profile", "{tmp}/missing.yaml"], 2),
    "snapshot --dry-run --npl 1,x": (["snapshot", "--dry-run", "--npl", "1,x"], 2),
    "compare missing missing": (["compare", "{tmp}/a", "{tmp}/b"], 2),
    "report missing": (["report", "{tmp}/a"], 2),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        env = {"PARITY_ARTIFACTS": f"{tmp}/runs", "PARITY_HISTORY": "off"}
        for label, (argv, rc) in COMMANDS.items():
            t = measure([sys.executable, "-m", "parity", *(a.replace("{tmp}", tmp) for a in argv)], args.runs, env=env, rc=rc, cwd=str(REPO))
            rows.append({"command": label, "exit": rc, "runs": args.runs, "median_ms": round(statistics.median(t), 1), "min_ms": round(min(t), 1), "max_ms": round(max(t), 1)})
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            print(f"{r['median_ms']:7.1f} ms median ({r['min_ms']:.1f}-{r['max_ms']:.1f}, {r['runs']} runs, exit {r['exit']})  parity {r['command']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
