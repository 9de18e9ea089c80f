"""How often the trace workload's cache check flags a planted warm cache, and a clean replay (issue 58's
acceptance: 10 of 10, 0 of 10), with the load generator's send delay at each run's fastest point.

    python benchmarks/replay_cache_flags.py [--runs 10] [--keep DIR]

A run is two `parity snapshot --workload` replays of the Azure code trace's first 2 s (12 requests,
tests/data/replay) at 1x..10x its rate on the smoke profile's stock llama-server (the tiny llama with
a 32k context, --parallel 1, -t 1), as tests/integration/test_replay_real.py runs them: clean (a fresh
server, fresh blocks per point: nothing to reuse) and planted warm (fresh_blocks false: points 2..10
send point 1's prompts again to the server that served them).  A point is flagged when its verdict
says "cache state"; the clean replay must have no point flagged, the warm one its first point not and
every other point.  Exits 1 when a run misses.  About a minute a run on the 2-core box.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO / "tests" / "data" / "replay" / "azure-code-2023.csv"
AZURE = {"kind": "trace", "trace": str(TRACE), "duration_s": 2.0, "speedups": list(range(1, 11)),
         "max_delay_p99_ms": 1000, "min_achieved_share": 0.5}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def profile(where: Path, workload: dict) -> Path:
    """The test's profile: the smoke profile, its tiny llama with a 32k context, one slot."""
    shape = {"port": free_port(), "model": "tiny-long", "engines": ["stock"], "parallel": 1, "ctx": 32768, "ptok": 32,
             "gen": 16, "min_window_s": 0.0, "request_timeout_s": 600, "warmup": {"requests": 1, "gen": 4},
             "workloads": {"tr": workload}, "repeat": 1, "output_parity": {"enabled": False},
             "settle_tolerance_mib": 1 << 20}  # fmt: skip
    model = {"path": "${PARITY_CACHE}/models/tiny-llama-f16-ctx32k.gguf", "arch": "llama",
             "description": "the tiny llama with a 32k context", "synth": {"arch": "llama", "dtype": "f16", "seed": 0, "ctx": 32768}}
    doc = {"extends": "smoke", "lock": {"dir": str(where / "lock"), "poll_s": 0.5, "timeout_s": 600},
           "models": {"tiny-long": model}, "serving": shape}
    where.mkdir(parents=True, exist_ok=True)
    p = where / "profile.yaml"
    p.write_text(json.dumps(doc))
    return p


def replay(where: Path, workload: dict) -> list[dict]:
    prof = profile(where, workload)
    argv = [sys.executable, "-m", "parity", "--artifacts", str(where / "runs"), "snapshot", "--profile", str(prof),
            "--workload", "tr", "--engines", "stock", "--no-gates", "--json"]
    r = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, stdin=subprocess.DEVNULL, timeout=3600, check=False)
    if r.returncode not in (0, 6):  # 6: a point invalid (the planted warm cache's)
        raise SystemExit(f"parity snapshot exited {r.returncode}: {r.stderr.strip()[-2000:]}")
    return json.loads(r.stdout)["rows"]


def flagged(row: dict) -> bool:
    return any(p.startswith("cache state") for p in row["invalid_reasons"])


def fastest(rows: list[dict]) -> dict:
    return max(rows, key=lambda r: r["n"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--keep", type=Path, help="keep the runs' directories here (default: a temporary one)")
    args = ap.parse_args()
    if args.runs < 1:
        print("--runs must be at least 1", file=sys.stderr)
        return 2
    clean_flagged = warm_caught = 0
    p99s, p50s = [], []
    with tempfile.TemporaryDirectory() as tmp:
        base = args.keep or Path(tmp)
        for k in range(args.runs):
            clean = replay(base / f"clean-{k}", AZURE)
            warm = replay(base / f"warm-{k}", {**AZURE, "fresh_blocks": False})
            c = sum(map(flagged, clean))
            w = sum(map(flagged, warm[1:]))
            clean_flagged += c > 0
            warm_caught += not flagged(warm[0]) and w == len(warm) - 1
            ten = [fastest(clean), fastest(warm)]
            p50s += [r["sched_delay_p50_ms"] for r in ten]
            p99s += [r["sched_delay_p99_ms"] for r in ten]
            worst = max(r["sched_delay_p99_ms"] for r in clean + warm)
            print(f"run {k + 1}: clean {c}/{len(clean)} points flagged; warm: point 1 "
                  f"{'flagged' if flagged(warm[0]) else 'not flagged'}, {w}/{len(warm) - 1} reused points flagged; "
                  f"send delay at {ten[0]['n']:g}x p50/p99 {ten[0]['sched_delay_p50_ms']:.3f}/"
                  f"{ten[0]['sched_delay_p99_ms']:.3f} ms (clean), {ten[1]['sched_delay_p50_ms']:.3f}/"
                  f"{ten[1]['sched_delay_p99_ms']:.3f} ms (warm); worst point p99 {worst:.3f} ms", flush=True)
    n = args.runs
    print(f"clean replays flagged: {clean_flagged} of {n}; planted warm caches flagged: {warm_caught} of {n}")
    print(f"send delay at 10x over {len(p99s)} points: p50 median {statistics.median(p50s):.3f} ms; p99 median "
          f"{statistics.median(p99s):.3f} ms, max {max(p99s):.3f} ms, under 1 ms in {sum(p < 1 for p in p99s)}")
    return 0 if clean_flagged == 0 and warm_caught == n else 1


if __name__ == "__main__":
    raise SystemExit(main())
