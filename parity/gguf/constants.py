"""gguf's constants module (ggml types, their block and type sizes) without the gguf package:
the package's __init__ imports numpy and its reader and writer (~0.25 CPU-s on a parity start
that only needs the size table), while constants.py imports only enum and typing."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_NAME = "_parity_gguf_constants"


def constants():
    """gguf.constants when the package is loaded already, else that one file loaded alone."""
    for name in ("gguf.constants", _NAME):
        if name in sys.modules:
            return sys.modules[name]
    found = importlib.util.find_spec("gguf")
    if found is None or not found.submodule_search_locations:
        import gguf.constants  # not installed as a package directory: the plain import says why

        return gguf.constants
    spec = importlib.util.spec_from_file_location(_NAME, Path(found.submodule_search_locations[0]) / "constants.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[_NAME] = mod
    spec.loader.exec_module(mod)
    return mod
