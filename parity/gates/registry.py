"""Canonical greedy md5s: the profile's entries plus a user registry file.

An entry is keyed by (model, path, form, n_predict) and carries provenance.
`record()` adds to the user registry (default ~/.config/parity/registry.yaml,
env PARITY_REGISTRY) -- only with a green KL check for that path.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

from parity.config import MD5_RE, CanonicalMd5, Profile
from parity.errors import ConfigError, GateFailed, UsageError
from parity.gates.completion import EMPTY_MD5


def registry_path() -> Path:
    return Path(os.environ.get("PARITY_REGISTRY") or Path.home() / ".config" / "parity" / "registry.yaml").expanduser()


def _user_entries(path: Path) -> dict[str, list[CanonicalMd5]]:
    import yaml

    if not path.exists():
        return {}
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(str(path), "", f"YAML syntax error: {getattr(e, 'problem', e)}") from None
    from parity.config import _decode  # typed decoding with the same error messages

    out = {}
    for model, entries in (data.get("models") or {}).items():
        out[model] = _decode(list[CanonicalMd5], entries, str(path), f"models.{model}")
    return out


def lookup(profile: Profile, model: str, path: str, form: str, n_predict: int) -> CanonicalMd5 | None:
    """User registry entries win over the profile's (newest accepted reference)."""
    candidates = list(_user_entries(registry_path()).get(model, []))
    if model in profile.models:
        candidates += profile.models[model].canonical
    for c in candidates:
        if c.path == path and c.form == form and c.n_predict == n_predict:
            return c
    return None


def record(model: str, entry: CanonicalMd5, kl_green: bool) -> Path:
    if not kl_green:
        raise GateFailed(f"refusing to record {entry.md5} for {model}/{entry.path}: a new canonical md5 needs a green KL check for that path first (run with --kl)")
    if not MD5_RE.match(entry.md5) or entry.md5 == EMPTY_MD5:
        raise UsageError(f"refusing to record {entry.md5!r}: not a valid non-empty-output md5")
    import yaml

    from parity.artifacts import atomic_write_text

    path = registry_path()
    data = {}
    if path.exists():
        data = yaml.safe_load(path.read_text()) or {}
    models = data.setdefault("models", {})
    entries = [e for e in models.get(model, []) if not (e.get("path") == entry.path and e.get("form") == entry.form and e.get("n_predict") == entry.n_predict)]
    entries.append({k: v for k, v in asdict(entry).items() if v is not None})
    models[model] = entries
    atomic_write_text(path, yaml.safe_dump(data, sort_keys=False))
    return path
