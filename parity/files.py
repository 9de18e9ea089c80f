"""Files written whole or not at all (a temp file renamed into place), their sha256, and the
JSON encoder every parity file uses (dataclasses, paths, sets, numpy scalars)."""

from __future__ import annotations

import datetime as _dt
import json
import os
import tempfile
from pathlib import Path, PurePath
from typing import Any


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write a temporary beside path, then rename it over path: a reader (or a writer killed
    mid-write) sees the old file or the new one, whole.  The file keeps its mode (a map that
    was 644 stays 644); a new one gets the umask's, as open() would give it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        try:
            mode = os.stat(path).st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o666 & ~_umask()
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _umask() -> int:
    """The process umask, read without changing it (Linux: /proc/self/status)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def fsync_dir(d: Path) -> None:
    """The rename itself on disk (a power loss after it keeps the new file)."""
    try:
        fd = os.open(str(d), os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def sha256(data: bytes | str = b""):
    """A sha256 hash object of bytes or UTF-8 text.  hashlib loads OpenSSL (~3 ms): on first
    use, not at every parity start."""
    import hashlib

    return hashlib.sha256(data.encode() if isinstance(data, str) else data)


def sha256_file(path: str | Path) -> str:
    """sha256 of a file, read in 1 MiB blocks (models and CUDA libraries are large)."""
    h = sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=json_default) + "\n")


def json_default(o):
    import dataclasses

    if dataclasses.is_dataclass(o):
        return dataclasses.asdict(o)
    if hasattr(type(o), "__struct_fields__") and callable(getattr(o, "flat", None)):  # a typed row (results.model.PointRow)
        return o.flat()  # flat, as summary.json holds it
    if hasattr(type(o), "__struct_fields__"):  # a msgspec Struct (the result model, the profile's sections, records), without importing msgspec
        return {f: getattr(o, f) for f in o.__struct_fields__}
    if isinstance(o, (PurePath, _dt.date)):  # a date: from a YAML file (the lever map) the user edited
        return o.isoformat() if isinstance(o, _dt.date) else str(o)
    if isinstance(o, (set, tuple)):
        return list(o)
    if hasattr(o, "item"):  # numpy scalars
        return o.item()
    raise TypeError(f"not JSON serializable: {type(o).__name__}")
