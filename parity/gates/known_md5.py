"""Canonical greedy md5s: the profile's entries plus a user registry file.

An entry is keyed by (model, path, form, n_predict) and carries provenance.
The user registry (--registry FILE, env PARITY_REGISTRY, default
~/.config/parity/registry.yaml) is merged over the profile's read-only
entries; `record()` writes only there, and only after a green KL check for
that path (the seeds' rule: a new md5 is accepted only after KL validation).

File format:
  models:
    tiny:
      - {md5: ..., path: paged, form: no-cnv, n_predict: 48, validated: "...", transcript: transcripts/x.out}
A relative transcript is relative to the registry file's directory.
"""

from __future__ import annotations

import os
from pathlib import Path

from msgspec.structs import asdict

from parity.decode import replace
from parity.gates.canonical import CanonicalMd5

from parity.paths import expand_path
from parity.errors import ConfigError, GateFailed, UsageError
from parity.gates.completion import usable_md5
from parity.decode import decode_value, read_utf8
from parity.files import atomic_write_bytes, atomic_write_text
from parity.yamlload import safe_load


def registry_path(override: str | None = None) -> Path:
    return Path(override or os.environ.get("PARITY_REGISTRY") or Path.home() / ".config" / "parity" / "registry.yaml").expanduser()


def _read(path: Path) -> dict:
    import yaml

    if not path.exists():
        return {}
    text = read_utf8(path, str(path))
    try:
        data = safe_load(text) or {}
    except yaml.YAMLError as e:
        raise ConfigError(str(path), "", f"YAML syntax error: {getattr(e, 'problem', e)}") from None
    if not isinstance(data, dict) or not isinstance(data.get("models") or {}, dict):
        raise ConfigError(str(path), "models", "expected a mapping of model name -> list of entries")
    return data


def user_entries(path: Path) -> dict[str, list[CanonicalMd5]]:
    out = {}
    for model, entries in (_read(path).get("models") or {}).items():
        decoded = decode_value(list[CanonicalMd5], entries, str(path), f"models.{model}")
        for i, e in enumerate(decoded):
            if not usable_md5(e.md5):
                raise ConfigError(str(path), f"models.{model}[{i}].md5", f"not a usable md5: {e.md5!r}")
        out[str(model)] = [replace(e, transcript=_resolve(e.transcript, path.parent)) for e in decoded]
    return out


def _resolve(transcript: str | None, base: Path) -> str | None:
    if not transcript:
        return None
    p = Path(expand_path(transcript))
    return str(p if p.is_absolute() else base / p)


def lookup(models: dict, model: str, path: str, form: str, n_predict: int, registry: str | None = None) -> CanonicalMd5 | None:
    """User registry entries win over the profile's (models: its models section; the newest accepted reference)."""
    candidates = list(user_entries(registry_path(registry)).get(model, []))
    if model in models:
        candidates += [replace(c, transcript=_resolve(c.transcript, Path.cwd())) for c in models[model].canonical]
    for c in candidates:
        if c.path == path and c.form == form and c.n_predict == n_predict:
            return c
    return None


def record(model: str, entry: CanonicalMd5, kl_green: bool, transcript: bytes | None = None, registry: str | None = None) -> Path:
    """Add or replace the (model, path, form, n_predict) entry in the user registry."""
    if not kl_green:
        raise GateFailed(
            f"refusing to record {entry.md5} for {model}/{entry.path}: a new canonical md5 needs a green KL check "
            f"for path {entry.path} first (run with --kl)"
        )
    if not usable_md5(entry.md5):
        raise UsageError(f"refusing to record {entry.md5!r}: not the md5 of a non-empty output")
    import yaml

    path = registry_path(registry)
    data = _read(path)
    if transcript:
        rel = f"transcripts/{model}-{entry.path}-{entry.form}-n{entry.n_predict}-{entry.md5}.out"
        atomic_write_bytes(path.parent / rel, transcript)
        entry = replace(entry, transcript=rel)
    models = data.setdefault("models", {})
    same = lambda e: e.get("path") == entry.path and e.get("form") == entry.form and e.get("n_predict") == entry.n_predict  # noqa: E731
    entries = [e for e in (models.get(model) or []) if not same(e)]
    entries.append({k: v for k, v in asdict(entry).items() if v is not None})
    models[model] = entries
    atomic_write_text(path, yaml.safe_dump(data, sort_keys=False))
    return path
