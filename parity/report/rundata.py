"""Read a run directory's files (names from docs/CONTRACTS.md) into one object,
and say whether its gates are green.  Missing optional files are None."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

from parity.errors import UsageError


@dataclass
class RunData:
    path: Path
    manifest: dict
    hardware: dict | None = None
    gates: dict | None = None
    gate_rows: list[dict] | None = None  # gate_summary.tsv
    summary: dict | None = None
    builds: dict | None = None
    analysis: dict | None = None
    bench: dict | None = None  # bench.json (llama-batched-bench)
    notes: list[str] = field(default_factory=list)  # unreadable files

    @property
    def run_id(self) -> str:
        return self.manifest.get("run_id") or self.path.name

    @property
    def hardware_class(self) -> str | None:
        return (self.hardware or {}).get("hardware_class")

    def rows(self) -> list[dict]:
        return list((self.summary or {}).get("rows") or [])


def _json(path: Path, notes: list[str]):
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        notes.append(f"{path.name}: unreadable ({e})")
        return None


def parse_gate_summary(text: str) -> list[dict]:
    """gate_summary.tsv: columns phase check expected got status."""
    rows = list(csv.DictReader(io.StringIO(text), delimiter="\t"))
    need = {"phase", "check", "expected", "got", "status"}
    if rows and not need <= set(rows[0]):
        raise ValueError(f"gate_summary.tsv: expected columns {sorted(need)}, got {sorted(rows[0])}")
    return rows


def load_run(path, *, need_summary: bool = True) -> RunData:
    p = Path(path).expanduser().resolve()
    if not p.is_dir():
        raise UsageError(f"{path}: no such run directory")
    notes: list[str] = []
    manifest = _json(p / "manifest.json", notes)
    if not isinstance(manifest, dict):
        raise UsageError(f"{path}: not a parity run directory (no readable manifest.json)")
    if manifest.get("status") == "running":
        from parity.artifacts import RunDir

        if RunDir(p).settle("report"):  # its parity was killed: it will never end by itself
            manifest = _json(p / "manifest.json", notes)
    rd = RunData(p, manifest, notes=notes)
    rd.hardware = _json(p / "hardware.json", notes)
    rd.gates = _json(p / "gates.json", notes)
    rd.summary = _json(p / "summary.json", notes)
    rd.builds = _json(p / "builds.json", notes)
    rd.analysis = _json(p / "profile" / "analysis.json", notes)
    rd.bench = _json(p / "bench.json", notes)
    tsv = p / "gate_summary.tsv"
    if tsv.is_file():
        try:
            rd.gate_rows = parse_gate_summary(tsv.read_text())
        except ValueError as e:
            notes.append(str(e))
    if need_summary and not rd.summary:
        raise UsageError(f"{path}: no summary.json (not a snapshot run, or it failed before any result)")
    return rd


def gate_problems(rd: RunData, *, current: bool = False) -> list[str]:
    """Why this run's numbers are not trustworthy; [] when gates are green.
    current=True: the run is still in progress (a campaign reporting on itself)."""
    m = rd.manifest
    out = []
    if m.get("valid") is False:
        out.append("manifest valid=false (" + "; ".join(m.get("invalid_reasons") or ["no reason"]) + ")")
    status = m.get("status")
    if status in ("failed", "interrupted") or (status == "running" and not current):
        out.append(f"run status {status}")
    g = rd.gates
    if not isinstance(g, dict):
        out.append("no gates.json (ungated)")
        return out
    for phase in ("pre", "post"):
        s = g.get(phase)
        if not isinstance(s, dict):
            out.append(f"no {phase}-gate")
        elif s.get("status") != "pass":
            bad = [c.get("check", "?") for c in s.get("checks", []) if c.get("status") != "pass"]
            out.append(f"{phase}-gate red" + (f": {', '.join(bad)}" if bad else ""))
    if g.get("status") != "pass" and not any("gate red" in o for o in out):
        out.append(f"gates.json status {g.get('status')}")
    return out


def values_by_cell(rd: RunData, metric: str) -> dict[tuple[str, int], dict[int, float]]:
    """{(engine, n): {repeat: value}} for one metric from summary rows."""
    out: dict[tuple[str, int], dict[int, float]] = {}
    for i, r in enumerate(rd.rows()):
        v = r.get(metric)
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            continue
        key = (str(r.get("engine")), int(r.get("n", 0)))
        out.setdefault(key, {})[int(r.get("repeat", i))] = float(v)
    return out
