"""Where parity's files live: this checkout, the embedded defaults, the cache, and path
expansion (~, ${PARITY_ROOT}, ${PARITY_CACHE}, ${ENV})."""

from __future__ import annotations

import os
from pathlib import Path

PARITY_ROOT = Path(__file__).resolve().parent.parent
DEFAULTS_DIR = Path(__file__).resolve().parent / "defaults"


def cache_dir() -> Path:
    return Path(os.environ.get("PARITY_CACHE") or Path.home() / ".cache" / "parity").expanduser()


def expand_path(value: str | None) -> str | None:
    """~, ${PARITY_ROOT}, ${PARITY_CACHE} and other ${ENV} references."""
    if value is None:
        return None
    value = value.replace("${PARITY_ROOT}", str(PARITY_ROOT)).replace("${PARITY_CACHE}", str(cache_dir()))
    return os.path.expanduser(os.path.expandvars(value))
