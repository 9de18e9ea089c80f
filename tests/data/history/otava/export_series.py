"""Write the real nightly series of ../step and ../aa as series/*.csv for Otava (see README.md).

Run from the repo root with parity's venv:  .venv/bin/python tests/data/history/otava/export_series.py
Each series is what `parity history changes` analyses: the paired ratio paged/stock of every night
(time order) for one point x metric; the A/A series are nights 1-11 of ../step followed by ../aa."""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))

HERE = Path(__file__).resolve().parent


def export(name: str, dirs: list[Path]) -> int:
    from parity.history import cells, source, store
    from parity.history.changes import ChangesRequest, load_series

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "h.duckdb"
        with store.connect(db) as con:
            for d in dirs:
                store.write_run(con, cells.cells(source.read_run(d)))
            series = load_series(con, ChangesRequest())
    for sid, pts in series.items():
        point, metric = sid.split(" | ")[3:5]
        stem = f"{name}-{re.sub(r'[^a-z0-9]+', '-', (point + ' ' + metric).lower()).strip('-')}"
        lines = ["time,run,value"] + [f"{p['run_at'].isoformat()}+00:00,{p['run_id']},{p['value']:.6f}" for p in pts]
        (HERE / "series" / f"{stem}.csv").write_text("\n".join(lines) + "\n")
    return len(series)


def main() -> int:
    (HERE / "series").mkdir(exist_ok=True)
    step = sorted(d for d in (HERE.parent / "step").iterdir() if (d / "manifest.json").is_file())
    aa = sorted(d for d in (HERE.parent / "aa").iterdir() if (d / "manifest.json").is_file())
    n = export("step", step) + export("aa", step[:11] + aa)
    print(f"{n} series -> {HERE / 'series'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
