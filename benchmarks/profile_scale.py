"""Bucket attribution at scale: an export with 2,000,000 kernel rows.

Target (issue 7): < 5 s wall and < 1 GB peak RSS for the attribution
(SQL GROUP BY per name id + regex over the distinct names).  The export is
generated in a separate process first, so its memory does not count.

    python benchmarks/profile_scale.py [--rows 2000000] [--names 2000] [--file PATH] [--keep]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _generate(path: str, rows: int, names: int) -> None:
    from parity.profiles.synthetic import scale_kernels, write_export

    write_export(path, scale_kernels(rows, names))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--names", type=int, default=2000)
    ap.add_argument("--file", default=None, help="export path (default: a temp file)")
    ap.add_argument("--keep", action="store_true", help="keep the generated export")
    args = ap.parse_args()
    path = args.file or os.path.join(tempfile.gettempdir(), f"parity-profile-scale-{args.rows}.sqlite")
    if not os.path.exists(path):
        t0 = time.monotonic()
        p = mp.get_context("spawn").Process(target=_generate, args=(path, args.rows, args.names))
        p.start()
        p.join()
        if p.exitcode != 0:
            print(f"generation failed (exit {p.exitcode})", file=sys.stderr)
            return 1
        print(f"generated {args.rows} kernel rows, {args.names} names -> {path} ({os.path.getsize(path) / 1e6:.0f} MB) in {time.monotonic() - t0:.1f} s")

    from parity.profiles.buckets import attribute, default_table
    from parity.profiles.nsys import read_kernel_groups

    table = default_table()
    t0 = time.monotonic()
    groups = read_kernel_groups(path)
    res = attribute(groups, table)
    wall = time.monotonic() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    print(f"rows: {res['kernels']}  distinct names: {res['distinct_names']}  buckets: {len(res['buckets'])}  total kernel time: {res['total_ms']:.1f} ms")
    print(f"attribution wall: {wall:.3f} s (target < 5 s)")
    print(f"peak RSS: {peak_mb:.1f} MB (target < 1024 MB)")
    ok = wall < 5 and peak_mb < 1024 and res["kernels"] == args.rows
    if not args.keep and not args.file:
        os.unlink(path)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
