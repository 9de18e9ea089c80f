"""What the change-point detector needs: how often it calls a change in a series without one
(per series, at the nightly's settings), and how often it finds a step of a given size at the
right night, by the number of nights before and after it and the night-to-night spread.

    python benchmarks/changepoint_power.py [--series 1000] [--step 0.03]

Series are normal around 1.0 with the given spread (the CPU nightlies' paired ratios spread
1.0 % a night at B=2, 1.6 % at B=1: tests/data/history); the step multiplies the nights from
the change on.  parity's detector with its defaults (p 0.001, window 30, >= 10 points, a change
confirmed with >= 3 points after it), and with Otava 0.8's two choices for comparison."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    import numpy as np

    from parity.history import changepoint as cp

    ap = argparse.ArgumentParser()
    ap.add_argument("--series", type=int, default=1000)
    ap.add_argument("--step", type=float, default=0.03)
    args = ap.parse_args()
    rng = np.random.default_rng(7)
    n = args.series
    print(f"{'detector':<16} {'spread':>6} {'A/A 20':>7} {'A/A 40':>7}   found at the night, by nights before + after the step")
    cols = [(11, 3), (11, 5), (11, 9), (20, 9), (20, 20)]
    print(f"{'':<16} {'':>6} {'':>7} {'':>7}   " + "  ".join(f"{b:>2}+{a:<2}" for b, a in cols))
    for label, kw in (("parity", {}), ("Otava choices", {"ddof": 0, "how": "otava"})):
        for sd in (0.005, 0.01, 0.015, 0.02):
            fa = [sum(bool(cp.detect(rng.normal(1, sd, k), **kw)) for _ in range(n)) / n for k in (20, 40)]
            found = []
            for b, a in cols:
                hit = 0
                for _ in range(n):
                    z = rng.normal(1, sd, b + a)
                    z[b:] *= 1 - args.step
                    hit += any(s.index == b and s.n_after >= 3 for s in cp.detect(z, **kw))
                found.append(hit / n)
            print(f"{label:<16} {sd:>6.1%} {fa[0]:>7.1%} {fa[1]:>7.1%}   " + "  ".join(f"{f:>5.0%}" for f in found))
    print(f"{n} series per cell; a {args.step:.0%} step; A/A k: any change called in a series of k points without one")
    return 0


if __name__ == "__main__":
    sys.exit(main())
