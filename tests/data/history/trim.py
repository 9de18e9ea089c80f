"""Copy night run dirs here without what the history tests do not read (see README.md).

    python tests/data/history/trim.py SRC_DIR DEST_DIR     # every <YYYYMMDD_HHMMSS>_nightly-cpu dir of SRC

Kept as parity wrote them: manifest.json (its env cut to the PARITY_* names), hardware.json/.txt,
builds.json, gates.json, gate_summary.tsv, gate_checks.tsv, bench.json, campaign.json,
steps/history.json and the report (reports/*.md).  Left out: the per-block llama-batched-bench
logs (their rows are in bench.json), bench_ab.tsv (the same rows), the gates' raw outputs, the
other step results, lock.json, bandwidth.json, the report's sidecar and ledger."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

KEEP = ["hardware.json", "hardware.txt", "builds.json", "gates.json", "gate_summary.tsv", "gate_checks.tsv", "bench.json", "campaign.json", "steps/history.json"]


def trim(src: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    m = json.loads((src / "manifest.json").read_text())
    m["env"] = {k: v for k, v in (m.get("env") or {}).items() if k.startswith("PARITY_")}
    (dest / "manifest.json").write_text(json.dumps(m, indent=2) + "\n")
    for name in KEEP:
        if (src / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src / name, dest / name)
    for md in sorted((src / "reports").glob("*-phase*.md")):
        (dest / "reports").mkdir(exist_ok=True)
        shutil.copyfile(md, dest / "reports" / md.name)


def main() -> int:
    src, dest = Path(sys.argv[1]), Path(sys.argv[2])
    runs = sorted(d for d in src.iterdir() if d.is_dir() and (d / "manifest.json").is_file())
    for d in runs:
        trim(d, dest / d.name)
    for f in sorted(src.glob("night-*.log")) + [src / "nights.txt"]:
        if f.is_file():
            shutil.copyfile(f, dest / f.name)
    print(f"{len(runs)} runs -> {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
