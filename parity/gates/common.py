"""Helpers every gate kind shares: model lookup, the gate engine, tool paths for a dry run,
saving outputs into the run dir, and memoised file hashes."""

from __future__ import annotations

import json
import os
from pathlib import Path

from parity.paths import cache_dir
from parity.context import Run
from parity.engines.bound import Engine
from parity.errors import ParityError, UsageError
from parity.files import atomic_write_json, sha256_file as hash_file
from parity.gates.base import GateInputs


def resolve_model(inputs: GateInputs, model: str) -> tuple[str, str]:
    """(label, file) for a profile model name or a GGUF path (prepared before the lock: here it is
    a lookup, parity.session.prepare made it)."""
    if model in inputs.models:
        return model, inputs.model_file(model)
    p = Path(model).expanduser()
    if p.is_file():
        return p.stem, str(p)
    known = ", ".join(inputs.models) or "none"
    raise UsageError(f"model {model!r}: neither a model of profile {inputs.profile} ({known}) nor a file")


def dry_tool(eng: Engine, name: str, runner, out) -> str:
    """The tool's cached build or a "<placeholder>", building nothing; a placeholder naming why
    there is none (a kind without llama.cpp binaries: the go / no-go lists it)."""
    try:
        return eng.tool_path(name, runner, out, dry=True)
    except ParityError as e:
        return f"<{name} of {eng.name}: {e}>"


def dry_model(inputs: GateInputs, model: str) -> tuple[str, str, dict[str, str]]:
    """(label, file, {what: file} to check) for a dry run: the profile's path, made or not; a model
    made on the first real run (synth, hf) has nothing to check yet."""
    m = inputs.models.get(model)
    if m is not None:
        return model, m.path, {} if (m.synth is not None or m.hf is not None) else {f"model {model}": m.path}
    label, path = resolve_model(inputs, model)
    return label, path, {}


def gate_engine(inputs: GateInputs, engine: str | None) -> Engine:
    """The engine a check runs on: its own, else gates.engine, else the profile's first."""
    engine = engine or inputs.gates.engine or next(iter(inputs.engines), None)
    if engine is None:
        raise UsageError(f"profile {inputs.profile} has no engines to run gates with")
    return inputs.engine(engine)


def save(run: Run, name: str, data: bytes | str) -> str | None:
    """Write into the run dir (when there is one); returns the relative name."""
    if run.dir is None:
        return None
    p = run.dir.file(name)
    p.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8", "surrogateescape"))
    return str(p.relative_to(run.dir.path))


def sha256_file(path: str) -> str:
    """sha256 of a file, memoised by (path, size, mtime): reference models can be tens of GB."""
    st = os.stat(path)
    key = f"{os.path.abspath(path)}:{st.st_size}:{st.st_mtime_ns}"
    index_file = cache_dir() / "kl" / "sha-index.json"
    try:
        index = json.loads(index_file.read_text())
    except (OSError, ValueError):
        index = {}
    if key in index:
        return index[key]

    index[key] = hash_file(path)

    try:
        atomic_write_json(index_file, index)
    except OSError:
        pass  # a read-only cache only costs a re-hash
    return index[key]
