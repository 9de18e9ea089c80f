"""A canonical greedy md5: the reference a model's md5 gate compares with."""

from __future__ import annotations

import re
from typing import Literal

import msgspec

MD5_RE = re.compile(r"^[0-9a-f]{32}$")


class CanonicalMd5(msgspec.Struct):
    md5: str
    path: str = "paged"  # paged | nonpaged (a path is an engine's env set)
    form: Literal["chat", "no-cnv"] = "chat"
    n_predict: int = 48
    validated: str = ""  # provenance: how this md5 was accepted (KL check, date, artifact)
    transcript: str | None = None  # stored reference output, to show the first divergence
