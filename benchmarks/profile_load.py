"""CPU time of one profile load (read, decode into the typed sections, validate), in-process:
median of N loads per shipped profile after a first, uncounted one.

    python benchmarks/profile_load.py [--runs 50] [--json]

Every parity start loads its profile, and the suite loads profiles in-process a few thousand
times, so a millisecond here shows in `make test`.  No target: compare two trees on the same box.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PROFILES = ["smoke", "localai-paged-cpu", "gb10-qwen36"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from parity.config import load_profile

    rows = []
    for name in PROFILES:
        load_profile(name)
        times = []
        for _ in range(args.runs):
            t0 = time.process_time()
            load_profile(name)
            times.append((time.process_time() - t0) * 1000)
        rows.append({"profile": name, "runs": args.runs, "median_cpu_ms": round(statistics.median(times), 2)})
    if args.json:
        print(json.dumps(rows))
    else:
        for r in rows:
            print(f"{r['profile']:20s} {r['median_cpu_ms']:7.2f} ms CPU (median of {r['runs']} loads)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
