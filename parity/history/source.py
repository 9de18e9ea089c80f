"""The one door through which history reads a run directory (every file through parity.results,
the typed reader); everything else in parity.history takes what it returns."""

from __future__ import annotations

import os
from pathlib import Path

from parity import results
from parity.errors import UsageError
from parity.report.rundata import RunData, is_users_artifact, load_run
from parity.report.rundata import parse_users_hardware

RUN_MARKERS = ("manifest.json",)
COPY_MARKERS = ("summary.json", "bench.json")  # a run's files copied without their manifest (docs/evidence/device-h100-*)
SKIP_DIRS = {"requests", "servers", "telemetry", "outputs", "gates", "steps", "bench", "profile", "reports", "logs", "__pycache__", "node_modules"}


def read_run(path) -> RunData:
    """A parity run dir, an artifact dir of the users' harness, or a copy of a run's summary.json /
    bench.json without its manifest (kind `copy`, status unknown, no date)."""
    p = Path(os.path.expanduser(path)).resolve()
    if (p / "manifest.json").is_file() or (is_users_artifact(p) and not any((p / f).is_file() for f in COPY_MARKERS)):
        return load_run(p, need_summary=False)
    if not any((p / f).is_file() for f in COPY_MARKERS):
        raise UsageError(f"{path}: not a run directory (no manifest.json, summary.json, bench.json or the users' summary.tsv)")
    notes: list[str] = []

    def read(name, reader):
        f = p / name
        if not f.is_file():
            return None
        try:
            return reader(f).data
        except results.BadResultFile as e:  # one line naming the file and its problem
            notes.append(str(e))
            return None

    summary = read("summary.json", results.read_summary)
    kind = (summary or {}).get("kind") or "bench"
    rd = RunData(p, {"run_id": p.name, "kind": kind, "status": "unknown", "valid": None, "origin": "copy", "argv": []}, notes=notes)
    rd.summary = summary if isinstance(summary, dict) else None
    rd.bench = read("bench.json", results.read_bench)
    rd.hardware = read("hardware.json", lambda f: results.check(results.load_json(f), results.model.Hardware, f, ""))
    if rd.hardware is None and (p / "hardware.txt").is_file():
        hw = parse_users_hardware((p / "hardware.txt").read_text(errors="replace"))
        rd.hardware = hw if hw.get("hardware_class") else None
    return rd


def is_run_dir(p: Path) -> bool:
    if any((p / m).is_file() for m in RUN_MARKERS):
        return True
    try:
        return is_users_artifact(p) or any((p / m).is_file() for m in COPY_MARKERS)
    except OSError:
        return False


def find_run_dirs(paths, max_depth: int = 6) -> tuple[list[Path], list[str]]:
    """(run dirs under each path, the paths that hold none).  A run dir is not searched further
    except its hosts/ (a campaign fanned out over hosts keeps each host's run there)."""
    found: list[Path] = []
    empty: list[str] = []

    def walk(d: Path, depth: int) -> None:
        if is_run_dir(d):
            found.append(d)
            hosts = d / "hosts"
            if hosts.is_dir():
                for h in sorted(hosts.iterdir()):
                    if h.is_dir():
                        walk(h, depth + 1)
            return
        if depth >= max_depth:
            return
        try:
            subs = sorted(x for x in d.iterdir() if x.is_dir() and not x.name.startswith(".") and x.name not in SKIP_DIRS)
        except OSError:
            return
        for s in subs:
            walk(s, depth + 1)

    for raw in paths:
        p = Path(raw).expanduser()
        if not p.is_dir():
            raise UsageError(f"{raw}: no such directory")
        before = len(found)
        walk(p.resolve(), 0)
        if len(found) == before:
            empty.append(str(raw))
    return list(dict.fromkeys(found)), empty
