"""Helpers every gate kind shares: a path's env, model lookup, tool paths,
saving outputs into the run dir, and memoised file hashes."""

from __future__ import annotations

import json
import os
from pathlib import Path

from parity.paths import cache_dir
from parity.engines import kind_of
from parity.engines.base import engine_env
from parity.errors import ParityError, UsageError
from parity.models.synth import ensure_model
from parity.files import atomic_write_json, sha256_file as hash_file


def path_env(ctx, engine: str, path: str | None) -> dict[str, str]:
    """engine.env + engine.paths[path] (the default path when None)."""
    return engine_env(ctx.profile, engine, path)


def resolve_model(ctx, model: str) -> tuple[str, str]:
    """(label, file) for a profile model name or a GGUF path (prepared before the lock: here it is
    a lookup, parity.session.prepare made it)."""
    if model in ctx.profile.models:
        return model, ensure_model(ctx.profile, model)
    p = Path(model).expanduser()
    if p.is_file():
        return p.stem, str(p)
    known = ", ".join(ctx.profile.models) or "none"
    raise UsageError(f"model {model!r}: neither a model of profile {ctx.profile.name} ({known}) nor a file")


def tool(ctx, engine: str, name: str, dry: bool = False) -> str:
    """A llama.cpp tool of the engine (NotApplicable for a kind without llama.cpp binaries); dry:
    the cached build's path or a "<placeholder>", building nothing."""
    return kind_of(ctx.profile, engine).tool_path(ctx.profile, engine, name, ctx.runner, ctx.out, dry=dry)


def dry_tool(ctx, engine: str, name: str) -> str:
    """tool(dry=True), or a "<placeholder>" naming why there is none (the go / no-go lists it)."""
    try:
        return tool(ctx, engine, name, dry=True)
    except ParityError as e:
        return f"<{name} of {engine}: {e}>"


def dry_model(ctx, model: str) -> tuple[str, str, dict[str, str]]:
    """(label, file, {what: file} to check) for a dry run: the profile's path, made or not; a model
    made on the first real run (synth, hf) has nothing to check yet."""
    m = ctx.profile.models.get(model)
    if m is not None:
        return model, m.path, {} if (m.synth is not None or m.hf is not None) else {f"model {model}": m.path}
    label, path = resolve_model(ctx, model)
    return label, path, {}


def gate_engine(ctx, engine: str | None) -> str:
    engine = engine or ctx.profile.gates.engine or next(iter(ctx.profile.engines), None)
    if engine is None:
        raise UsageError(f"profile {ctx.profile.name} has no engines to run gates with")
    ctx.profile.engine(engine)
    return engine


def save(ctx, name: str, data: bytes | str) -> str | None:
    """Write into the run dir (when there is one); returns the relative name."""
    if ctx.run is None:
        return None
    p = ctx.run.file(name)
    p.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8", "surrogateescape"))
    return str(p.relative_to(ctx.run.path))


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
