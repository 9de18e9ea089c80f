"""An engine bound once: the profile's engine `name`, its section and its kind resolved when
the plan is built, so measuring code asks the value (`eng.launch(...)`) and never looks the
engine up by name again.  Kinds stay stateless: their methods take this value (`eng`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from parity.engines import ENGINES
from parity.engines.base import ContextNeed, EngineKind, Launch, engine_env


@dataclass(frozen=True)
class Engine:
    name: str
    section: Any  # engines.NAME, the kind's msgspec section
    kind: EngineKind
    profile: Any  # the profile it was bound from (the kind reads models and shared sections through it)

    # what the kind declares about itself
    @property
    def kind_name(self) -> str:
        return self.kind.name

    @property
    def binary_gates(self) -> bool:
        return self.kind.binary_gates

    @property
    def on_gpu(self) -> bool:
        return self.kind.on_gpu(self.section)

    def env(self, path: str | None = None) -> dict[str, str]:
        return self.kind.env(self, path)

    def path_env(self, path: str | None = None) -> dict[str, str]:
        """env + paths[path] (the default path when None), whatever the kind: the env a llama.cpp
        tool of this engine runs with (the gates, llama-batched-bench)."""
        return engine_env(self, path)

    def model_file(self, model: str) -> str:
        return self.kind.model_file(self, model)

    def local_model_file(self, model: str) -> str | None:
        return self.kind.local_model_file(self, model)

    def launch(self, model_file: str, port: int, shape, path: str | None = None, dry: bool = False, model: str | None = None, out=None) -> Launch:
        return self.kind.launch(self, model_file, port, shape, path=path, dry=dry, model=model, out=out)

    def context_need(self, shape, model_file: str | None = None) -> ContextNeed:
        return self.kind.context_need(self, shape, model_file)

    def queue_limit(self, shape) -> int | None:
        return self.kind.queue_limit(self.section, shape)

    def load_caveats(self, shape) -> list[str]:
        return self.kind.load_caveats(self, shape)

    def tool_path(self, tool: str, runner, out, dry: bool = False) -> str:
        return self.kind.tool_path(self, tool, runner, out, dry=dry)

    def dry_paths(self, runner) -> dict[str, str]:
        return self.kind.dry_paths(self, runner)

    def provision(self, runner, out) -> dict:
        return self.kind.provision(self, runner, out)

    def provenance(self, runner, out) -> dict:
        return self.kind.provenance(self, runner, out)

    def doctor(self, runner) -> list:
        return self.kind.doctor(self, runner)

    def validate(self, label: str) -> None:
        self.kind.validate(self, label)


def bind(profile, name: str) -> Engine:
    """The profile's engine `name` as a value (a one-line ConfigError for an unknown engine)."""
    section = profile.engine(name)
    return Engine(name, section, ENGINES[section.kind], profile)


def bind_all(profile, names) -> dict[str, Engine]:
    return {n: bind(profile, n) for n in names}
