"""A plain-dict registry of "module:NAME" strings, each imported on first use, so a command
loads only the kinds it runs (tests/unit/test_import_graph.py reads the strings as edges)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any


def resolve(ref: str) -> Any:
    """The object a "module:NAME" string names."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


class Registry(Mapping):
    """name -> object, from name -> "module:NAME"; `in`, len and the names cost no import."""

    def __init__(self, refs: dict[str, str]):
        self.refs = dict(refs)
        self._loaded: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._loaded:
            self._loaded[name] = resolve(self.refs[name])
        return self._loaded[name]

    def __contains__(self, name: object) -> bool:
        return name in self.refs

    def __iter__(self):
        return iter(self.refs)

    def __len__(self) -> int:
        return len(self.refs)
