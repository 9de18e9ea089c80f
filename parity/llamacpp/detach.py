"""Detached builds: `parity build --detach` runs the same build in the background with
a log and a .done file holding its exit status; `parity build --status` reads them."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from parity.paths import cache_dir
from parity.files import atomic_write_text
from parity.llamacpp import cmake
from parity.runners.lifetime import pid_alive


def detach_dir() -> Path:
    d = cache_dir() / "builds" / "detached"
    d.mkdir(parents=True, exist_ok=True)
    return d


def start_detached(parity_args: list[str], runner) -> dict:
    """Run `python -m parity <parity_args>` in the background with a log; a .done file
    holds its exit status when it ends."""
    import shlex
    import sys

    stamp = f"{time.strftime('%Y%m%d_%H%M%S')}_{os.getpid()}"
    log = detach_dir() / f"{stamp}.log"
    state = detach_dir() / f"{stamp}.json"
    done = state.with_suffix(".done")
    cmd = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "parity", *parity_args])
    tmp = done.with_suffix(".done.tmp")
    proc = runner.spawn(["sh", "-c", f"{cmd}; echo $? > {shlex.quote(str(tmp))} && mv {shlex.quote(str(tmp))} {shlex.quote(str(done))}"], log_path=str(log), detached=True)  # outlives this parity; the exit status appears whole
    doc = {"id": stamp, "pid": proc.pid, "argv": parity_args, "log": str(log), "started": stamp}
    atomic_write_text(state, json.dumps(doc))  # `parity build --status` never reads half of it
    return doc


_BUILDING = re.compile(r"building \S+ \(([0-9a-f]{20})\)")


def _build_progress(detach_log: str) -> str:
    """Ninja's progress lives in the build's own build.log (the key is in the detached log)."""
    keys = _BUILDING.findall(detach_log)
    if not keys:
        return ""
    try:
        text = (cache_dir() / "builds" / keys[-1] / "build.log").read_text(errors="replace")
    except OSError:
        return ""
    prog = [ln.strip() for ln in text.splitlines() if cmake.parse_progress(ln)]
    return prog[-1][-200:] if prog else ""


def detached_status() -> list[dict]:
    rows = []
    for st in sorted(detach_dir().glob("*.json")):
        doc = json.loads(st.read_text())
        done = st.with_suffix(".done")

        alive = pid_alive(doc["pid"])  # before looking for the exit status: one written in between is then seen
        if done.exists():
            rc = int(done.read_text().strip() or 1)
            doc["state"], doc["rc"] = ("done" if rc == 0 else "failed"), rc
        else:
            doc["state"], doc["rc"] = ("running", None) if alive else ("failed", None)  # failed: died without writing its exit status
        try:
            text = Path(doc["log"]).read_text(errors="replace")
        except OSError:
            text = ""
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        doc["last_line"] = lines[-1][-200:] if lines else ""
        doc["progress"] = _build_progress(text)
        rows.append(doc)
    return rows
