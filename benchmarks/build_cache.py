"""Cache-hit cost of `parity build`: a rebuild with nothing changed must be a lookup
(target: well under 1 s, no cmake run).

    python benchmarks/build_cache.py [--profile smoke] [--repeat 5]

Builds first if the cache is cold (minutes), then prints, per engine, the median
in-process ensure_built() time and the wall time of the whole `parity build --json`
command (Python start-up included).  Exits 1 when a hit takes 1 s or more.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="smoke")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    from parity.config import load_profile
    from parity.llamacpp.build import ensure_built, llama_engines
    from parity.engines.bound import bind
    from parity.runners.local import LocalRunner
    from parity.ui import Output

    prof = load_profile(args.profile)
    out = Output(json_mode=True)
    runner = LocalRunner()
    worst = 0.0
    for name in llama_engines(prof):
        first = ensure_built(bind(prof, name), runner, out)
        if not first.cached:
            print(f"{name}: cold cache, built in {first.provenance['wall_s']} s")
        hits = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            res = ensure_built(bind(prof, name), runner, out)
            hits.append(time.perf_counter() - t0)
            assert res.cached, "a second ensure_built must be a cache hit"
        cli = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            r = runner.run([sys.executable, "-m", "parity", "build", "--json", "--profile", args.profile, "--engine", name], timeout=60)
            cli.append(time.perf_counter() - t0)
            if not r.ok or '"cached": true' not in r.stdout:
                print(f"{name}: parity build did not report a cache hit: {r.tail(3)}")
                return 1
        h, c = statistics.median(hits), statistics.median(cli)
        worst = max(worst, h, c)
        print(f"{name}: cache hit ensure_built median {h * 1000:.1f} ms; `parity build --json` wall median {c * 1000:.0f} ms (n={args.repeat})")
    print(f"worst {worst * 1000:.0f} ms (target < 1000 ms): {'OK' if worst < 1.0 else 'TOO SLOW'}")
    return 0 if worst < 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
