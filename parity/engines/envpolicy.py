"""Benchmark env policy: the seeds' forbidden knobs are refused, with the reason."""

from __future__ import annotations

import os
from typing import Iterable, Mapping

import msgspec

from parity.errors import UsageError


class PolicyConfig(msgspec.Struct):
    # env names refused in benchmark contexts, with the reason shown in the refusal
    forbidden_bench_env: dict[str, str] = msgspec.field(
        default_factory=lambda: {
            "LLAMA_MAX_BATCH_TOKENS": "changes the prefill budget; parity benches run the compiled-in scheduler default",
            "GDN_TC": "overrides the compiled-in GDN M5 default (GDN_TC=5); benches must use production defaults",
            "GDN_CHUNK_MIN": "overrides the compiled-in GDN chunk minimum (64); benches must use production defaults",
            "LLAMA_PAGED_DECODE_STABLE": "opt-in S3 scheduling regressed real serving; parity benches keep it off",
        }
    )


def check_bench_env(
    env: Mapping[str, str], policy: PolicyConfig, allow: Iterable[str] = (), context: str = "benchmark", inherit: bool = True
) -> None:
    """Refuse a forbidden knob set in the engine env (from the profile) or inherited
    from the shell (os.environ, unless inherit=False); `allow` names are let through.
    A name in `allow` that is not a forbidden knob is a typo and refused too."""
    allow = set(allow)
    forbidden = policy.forbidden_bench_env
    for name in sorted(allow - set(forbidden)):
        raise UsageError(f"--allow-env {name}: not a forbidden bench knob (forbidden: {', '.join(sorted(forbidden)) or 'none'})")
    sources = [("the profile's engine env", env)] + ([("the inherited environment", os.environ)] if inherit else [])
    for where, e in sources:
        for name, reason in forbidden.items():
            if name in e and name not in allow:
                raise UsageError(f"{name} is not allowed in {context} runs: {reason} ({where} sets {name}={e[name]}; pass --allow-env {name} to override)")
