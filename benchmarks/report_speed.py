"""How long `parity report` takes on a 3-engine x 6-N x 5-repeat run (target < 3 s).

Generates two such run dirs (control and candidate, per docs/CONTRACTS.md, on
top of the tests/data/report fixtures' manifest/gates/hardware/builds/profile),
then renders the full report (A/B, 4 plots) in this fresh interpreter, where the
matplotlib import is part of the bill, and once more through the real CLI.

  python benchmarks/report_speed.py
"""

from __future__ import annotations

import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "data" / "report"
ENGINES = ["paged", "stock", "vllm"]
NPL = [1, 2, 4, 8, 16, 32]
REPEATS = 5


def make_run(dst: Path, seed: int, scale: float) -> Path:
    from parity.serving.summary import ROW_KEYS, medians, ratios
    from parity.stats import Rule

    shutil.copytree(FIXTURES / "candidate", dst)
    rng = random.Random(seed)
    rows = []
    for rep in range(REPEATS):
        for e_i, eng in enumerate(ENGINES):
            for n in NPL:
                base = 100.0 * (1 + e_i) * n**0.7
                row = {"engine": eng, "n": n, "repeat": rep}
                for k in ROW_KEYS:
                    v = base if k.endswith("tps") else 1000.0 / base
                    row[k] = round(v * (scale if eng == "paged" else 1.0) * (1 + rng.gauss(0, 0.01)), 4)
                row.update(requests=n, valid_requests=n, short_requests=0, failed_requests=0)
                rows.append(row)
    med = medians(rows)
    summary = {"kind": "snapshot", "model": "synthetic", "engines": ENGINES, "reference_engine": "vllm",
               "shape": {"ptok": 128, "gen": 64, "parallel": 128, "ctx": 131072, "npl": NPL, "repeat": REPEATS},
               "rows": rows, "medians": med, "ratios": ratios(rows, med, "vllm", Rule())}
    (dst / "summary.json").write_text(json.dumps(summary))
    return dst


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="report-speed-"))
    try:
        a = make_run(tmp / "control", 1, 1.0)
        b = make_run(tmp / "candidate", 2, 1.05)
        t0 = time.perf_counter()
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot  # noqa: F401

        t_mpl = time.perf_counter() - t0
        from parity.config import load_profile
        from parity.report.render import ReportRequest, render_report

        res = render_report(load_profile("smoke"), ReportRequest(run=str(b), out_dir=str(tmp / "reports"), compare=str(a), title="speed"))
        t_inproc = time.perf_counter() - t0

        from parity.runners.local import LocalRunner

        t1 = time.perf_counter()
        cli = LocalRunner().run([sys.executable, "-m", "parity", "report", str(b), "--compare", str(a), "--out-dir", str(tmp / "reports"), "--title", "speed cli", "--json"], timeout=120)
        t_cli = time.perf_counter() - t1
        if not cli.ok:
            print(f"CLI failed: {cli.stderr.strip()}", file=sys.stderr)
            return 1
        cells = len(ENGINES) * len(NPL)
        print(f"run: {len(ENGINES)} engines x {len(NPL)} N x {REPEATS} repeats ({cells * REPEATS} rows), A/B on 4 metrics, {len(res['plots'])} plots")
        print(f"matplotlib import: {t_mpl:.2f} s")
        print(f"render (in process, matplotlib import included): {t_inproc:.2f} s")
        print(f"parity report CLI end to end (fresh python): {t_cli:.2f} s")
        print(f"target < 3 s: {'OK' if t_cli < 3 else 'OVER'}")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
