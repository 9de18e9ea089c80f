"""Dated run directories with manifest.json provenance; every write is atomic.

Layout: <root>/<YYYYMMDD_HHMMSS>_<slug>/manifest.json (+ step outputs).
Status moves running -> complete | failed | interrupted (a dry run ends `dry-run`);
a run whose post-gate failed additionally carries valid=false.
"""

from __future__ import annotations

import datetime as _dt
import getpass
import json
import os
import re
import socket
import sys
from pathlib import Path
from typing import Any, Mapping

from parity import __version__, openblas
from parity.files import atomic_write_json, atomic_write_text, json_default
from parity.results import read_manifest, run_dir
from parity.filelock import locked_dir
from parity.errors import UsageError
from parity.runners.lifetime import started_at
from parity.redact import REDACTED, SECRET_NAME, tree as redacted

STATUSES = ("running", "complete", "failed", "interrupted", "dry-run")


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: (REDACTED if SECRET_NAME.search(k) else v) for k, v in sorted(env.items())}


def slugify(text: str, maxlen: int = 48) -> str:
    slug = re.sub(r"[^a-zA-Z0-9]+", "-", text).strip("-").lower()
    return slug[:maxlen].strip("-") or "run"


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def git_sha(cwd: Path | None = None) -> str | None:
    """The parity checkout's HEAD, read from .git without running git."""
    here = Path(cwd or Path(__file__).resolve().parent.parent)
    head = here / ".git" / "HEAD"
    try:
        ref = head.read_text().strip()
        if ref.startswith("ref: "):
            ref_path = here / ".git" / ref[5:]
            if ref_path.exists():
                return ref_path.read_text().strip()
            packed = here / ".git" / "packed-refs"
            for line in packed.read_text().splitlines() if packed.exists() else []:
                if line.endswith(ref[5:]):
                    return line.split()[0]
            return None
        return ref
    except OSError:
        return None


def slurm_job(env: Mapping[str, str]) -> dict:
    """{"slurm": {...}} for a run inside a Slurm job (its id, partition, node), else {}."""
    if not env.get("SLURM_JOB_ID"):
        return {}
    keys = {"job_id": "SLURM_JOB_ID", "job_name": "SLURM_JOB_NAME", "partition": "SLURM_JOB_PARTITION",
            "node": "SLURMD_NODENAME", "cluster": "SLURM_CLUSTER_NAME", "gpus": "SLURM_JOB_GPUS"}  # fmt: skip
    return {"slurm": {k: env[v] for k, v in keys.items() if env.get(v)}}


def _interrupt_open_steps(manifest: dict) -> None:
    for entry in (manifest.get("steps") or {}).values():
        if isinstance(entry, dict) and entry.get("status") == "running":
            entry["status"] = "interrupted"


class RunDir:
    """One run's directory and its manifest."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.manifest_path = self.path / "manifest.json"

    # --- creation -------------------------------------------------------
    @classmethod
    def create(
        cls,
        root: Path,
        slug: str,
        *,
        argv: list[str] | None = None,
        config: Any = None,
        kind: str = "",
        host: str = "local",
        env: Mapping[str, str] | None = None,
    ) -> "RunDir":
        root = Path(root).expanduser()
        stamp = _dt.datetime.now().strftime("%Y%m%d_%H%M%S")
        base = f"{stamp}_{slugify(slug)}"
        path = root / base
        n = 1
        while True:
            try:
                path.mkdir(parents=True, exist_ok=False)
                break
            except FileExistsError:
                if not root.is_dir():
                    raise _unusable_root(root, path, "not a directory") from None
                n += 1
                path = root / f"{base}-{n}"
            except OSError as e:
                raise _unusable_root(root, path, e.strerror or type(e).__name__) from None
        rd = cls(path)
        rd._write_manifest(
            {
                "run_id": path.name,
                "kind": kind,
                "status": "running",
                "valid": True,
                "parity_version": __version__,
                "parity_git_sha": git_sha(),
                "argv": list(argv if argv is not None else sys.argv),
                "cwd": os.getcwd(),
                "host": host,
                "user": _user(),
                "hostname": socket.gethostname(),
                "pid": os.getpid(),
                "started": now_iso(),
                "ended": None,
                "config": _plain(config),
                "env": redact_env(env if env is not None else openblas.callers_environ()),
                "steps": {},
                **slurm_job(os.environ),
            }
        )
        return rd

    @classmethod
    def open(cls, path: Path) -> "RunDir":
        rd = cls(run_dir(path))
        if not rd.manifest_path.is_file():
            raise UsageError(f"{path}: not a parity run directory (no manifest.json)")
        return rd

    # --- manifest -------------------------------------------------------
    @property
    def run_id(self) -> str:
        return self.path.name

    def manifest(self) -> dict:
        return read_manifest(self.manifest_path).data

    def _write_manifest(self, data: dict) -> None:
        atomic_write_json(self.manifest_path, redacted(data))  # no URL password of an argv, a profile or an error

    def _edit(self, change) -> dict:
        """Read, change, write the manifest with the run directory locked: the threads of a
        matrix and any other parity touching this run (settle, resume) never lose an update."""
        with locked_dir(self.path):
            data = self.manifest()
            if change(data) is not False:  # False: nothing to write
                self._write_manifest(data)
            return data

    def update(self, **fields) -> dict:
        def change(data):
            data.update(fields)

        return self._edit(change)

    def finish(self, status: str, error: str | None = None) -> None:
        """Close the run; an interrupted run's steps still marked running are interrupted too
        (its parity may have been killed before it could say so: Slurm's KillWait, SIGKILL)."""
        assert status in STATUSES, status

        def change(data):
            data.update(status=status, ended=now_iso(), **({"error": error} if error else {}))
            if status == "interrupted":
                _interrupt_open_steps(data)

        self._edit(change)

    def settle(self, seen_by: str) -> bool:
        """A run whose parity died without closing it (SIGKILL, OOM, power loss) says `running`
        forever: when its pid is gone from this host, mark it interrupted.  True when marked."""
        marked = []

        def change(m):
            if m.get("status") != "running" or m.get("hostname") != socket.gethostname() or not isinstance(m.get("pid"), int):
                return False
            if process_alive_since(m["pid"], m.get("resumed_at") or m.get("started")):
                return False
            m.update(status="interrupted", ended=now_iso(),
                     error=f"parity (pid {m['pid']}) ended without closing this run (killed?); marked by {seen_by} on {socket.gethostname()}")  # fmt: skip
            _interrupt_open_steps(m)
            marked.append(True)

        try:
            self._edit(change)
        except (OSError, ValueError):
            return False
        return bool(marked)

    def mark_invalid(self, reason: str) -> None:
        def change(data):
            data["valid"] = False
            data.setdefault("invalid_reasons", []).append(reason)

        self._edit(change)

    def record_step(self, name: str, status: str, **info) -> None:
        def change(data):
            entry = data["steps"].get(name, {})
            entry.update({"status": status, "at": now_iso(), **info})
            data["steps"][name] = entry

        self._edit(change)

    def step_status(self, name: str) -> str | None:
        return self.manifest().get("steps", {}).get(name, {}).get("status")

    # --- files ------------------------------------------------------------
    def file(self, name: str) -> Path:
        p = self.path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def write_text(self, name: str, text: str) -> Path:
        p = self.file(name)
        atomic_write_text(p, text)
        return p

    def write_json(self, name: str, obj: Any) -> Path:
        p = self.file(name)
        atomic_write_json(p, obj)
        return p

    def read_json(self, name: str) -> Any:
        return json.loads((self.path / name).read_text())


def process_alive_since(pid: int, started_iso: str | None) -> bool:
    """True when pid is a live (non-zombie) process on this host that started no later than
    started_iso (a later start means the pid was reused by another process)."""

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    began = started_at(pid)
    if began is None:
        return not os.path.isdir("/proc/self")  # no /proc: the pid answers, so count it alive
    try:
        return not started_iso or began <= _dt.datetime.fromisoformat(started_iso).timestamp() + 2
    except ValueError:
        return True


def _unusable_root(root: Path, path: Path, why: str):
    return UsageError(f"artifacts dir {root} (--artifacts / PARITY_ARTIFACTS): cannot create the run directory {path}: {why}")


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry in some containers
        return str(os.getuid())


def _plain(obj: Any) -> Any:
    """Config dataclasses -> plain JSON data."""
    if obj is None:
        return None
    return json.loads(json.dumps(obj, default=json_default))
