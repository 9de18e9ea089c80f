"""A canonical greedy md5: the reference a model's md5 gate compares with."""

from __future__ import annotations

import re
from typing import Literal

import msgspec

from parity.errors import ConfigError

MD5_RE = re.compile(r"^[0-9a-f]{32}$")
EMPTY_MD5 = "d41d8cd98f00b204e9800998ecf8427e"  # the md5 of no output at all


class CanonicalMd5(msgspec.Struct):
    md5: str
    path: str = "paged"  # paged | nonpaged (a path is an engine's env set)
    form: Literal["chat", "no-cnv"] = "chat"
    n_predict: int = 48
    validated: str = ""  # provenance: how this md5 was accepted (KL check, date, artifact)
    transcript: str | None = None  # stored reference output, to show the first divergence


def check_canonical(canonical: list[CanonicalMd5], label: str, key: str) -> None:
    """models.NAME.canonical: each md5 well formed and not that of empty output."""
    for i, c in enumerate(canonical):
        where = f"{key}[{i}].md5"
        if not MD5_RE.match(c.md5):
            raise ConfigError(label, where, f"not an md5 (32 lowercase hex digits): {c.md5!r}")
        if c.md5 == EMPTY_MD5:
            raise ConfigError(label, where, "is the md5 of empty output and can never be canonical")
