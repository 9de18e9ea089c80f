"""Engine kinds, one file each, registered here: everything parity knows about a kind lives
in its file (profile section, provisioning, launch, readiness, token counting, /metrics
family, engine clock, memory, doctor, provenance).  A new kind is one file plus one line here."""

from __future__ import annotations

from parity.engines.base import EngineKind, NotApplicable
from parity.registry import Registry

ENGINES: Registry = Registry({  # kind -> its KIND, imported when a profile names the kind
    "llama": "parity.engines.llama:KIND",
    "vllm": "parity.engines.vllm:KIND",
    "endpoint": "parity.engines.endpoint:KIND",
})


def kind_of(profile, name: str) -> EngineKind:
    """The kind of the profile's engine `name` (a one-line ConfigError for an unknown engine)."""
    return ENGINES[profile.engine(name).kind]


def with_binaries(profile, names=None) -> list[str]:
    """The engines (of `names`, default all) whose own llama.cpp binaries the gates and the static bench can run."""
    return [n for n in (names if names is not None else profile.engines) if kind_of(profile, n).binary_gates]


def buildable(profile, names=None) -> list[str]:
    """The engines parity builds from a source (a lever arm or a bisection probe derives from one)."""
    return [n for n in (names if names is not None else profile.engines) if kind_of(profile, n).variants and getattr(profile.engine(n), "source", None)]


__all__ = ["ENGINES", "EngineKind", "NotApplicable", "kind_of", "with_binaries", "buildable"]
