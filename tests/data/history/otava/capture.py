"""Capture Apache Otava's own answers on the series in this directory (see README.md).

Run with a Python that has apache-otava installed (a throwaway venv, never parity's):
    python tests/data/history/otava/capture.py [OTAVA_BIN]
It writes synthetic.csv series (a fixed seed), reads every series/*.csv, runs `otava analyze`
on each group of (p-value, window) as a user would, and writes answers.json.  The nightly
series/*.csv are written by tests/unit/test_history_otava.py's --write-series helper from the
real runs of ../step and ../aa (see README.md)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SERIES = HERE / "series"
GROUPS = [(0.001, 30), (0.001, 50), (0.01, 20), (0.05, 30)]  # (p-value, window) each series is analysed with


def synthetic() -> None:
    """40 series of 12..60 points, 1.0 +- 1 % noise with 0..3 steps of 1..6 %, seed 43."""
    rng = random.Random(43)
    for i in range(40):
        n = rng.randint(12, 60)
        steps = sorted(rng.sample(range(2, n - 1), rng.randint(0, 3)))
        level, vals = 1.0, []
        for k in range(n):
            if k in steps:
                level *= 1 + rng.choice([-1, 1]) * rng.uniform(0.01, 0.06)
            vals.append(level * (1 + rng.gauss(0, 0.01)))
        write(SERIES / f"synthetic-{i:02d}.csv", [(f"2026-01-01T00:00:00+00:00", f"p{k + 1:03d}", v) for k, v in enumerate(vals)], hourly=True)


def write(path: Path, rows, hourly: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["time,run,value"]
    for k, (t, run, v) in enumerate(rows):
        if hourly:  # distinct, increasing times
            t = f"2026-01-{1 + k // 24:02d}T{k % 24:02d}:00:00+00:00"
        lines.append(f"{t},{run},{v:.6f}")
    path.write_text("\n".join(lines) + "\n")


def main() -> int:
    otava = sys.argv[1] if len(sys.argv) > 1 else "otava"
    synthetic()
    files = sorted(SERIES.glob("*.csv"))
    conf = {"tests": {f.stem: {"type": "csv", "file": str(f), "time_column": "time", "attributes": ["run"], "metrics": ["value"], "csv_options": {"delimiter": ",", "quotechar": "'"}} for f in files}}
    cfg = HERE / "otava.yaml"
    cfg.write_text(json.dumps(conf, indent=1))  # JSON is YAML
    answers = {"groups": []}
    version = subprocess.run([sys.executable, "-m", "pip", "show", "apache-otava"], capture_output=True, text=True).stdout
    answers["version"] = next((ln.split(":", 1)[1].strip() for ln in version.splitlines() if ln.startswith("Version:")), None)
    for p, window in GROUPS:
        argv = [otava, "analyze", *[f.stem for f in files], "--config-file", str(cfg), "--output", "json", "-P", str(p), "--window", str(window)]
        res = subprocess.run(argv, capture_output=True, text=True, check=True)
        result = {}
        for line in res.stdout.splitlines():  # one JSON document per test
            if line.strip():
                result.update(json.loads(line))
        shown = ["otava", *(a if a != str(cfg) else "otava.yaml" for a in argv[1:])]  # otava.yaml: the config written above, then removed
        answers["groups"].append({"p": p, "window": window, "argv": shown, "result": result})
    cfg.unlink()
    (HERE / "answers.json").write_text(json.dumps(answers, indent=1) + "\n")
    print(f"{len(files)} series x {len(GROUPS)} groups -> {HERE / 'answers.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
