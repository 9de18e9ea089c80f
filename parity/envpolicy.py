"""Benchmark env policy: the seeds' forbidden knobs are refused, with the reason."""

from __future__ import annotations

import os
from typing import Iterable, Mapping

from parity.config import PolicyConfig
from parity.errors import UsageError


def check_bench_env(env: Mapping[str, str], policy: PolicyConfig, allow: Iterable[str] = (), context: str = "benchmark", inherit: bool = True) -> None:
    """Refuse a forbidden knob set in the engine env or inherited from the shell."""
    allow = set(allow)
    sources = [("profile", env)] + ([("environment", os.environ)] if inherit else [])
    for where, e in sources:
        for name, reason in policy.forbidden_bench_env.items():
            if name in e and name not in allow:
                raise UsageError(f"{name} is not allowed in {context} runs ({where} sets it): {reason} (pass --allow-env {name} to override)")
