"""The matrix file:

  name: gb10-vs-b200
  campaign: nightly.yaml           # relative to this file (or absolute, or ${PARITY_ROOT}/...)
  profile: cluster.yaml            # where host names resolve; what each target runs unless it names its own
  targets:
    - {host: dgx}                            # an SSH host
    - {host: b200, profile: b200-qwen36}     # a kind: slurm host, its own profile
    - {host: b200, profile: b200-alt, name: b200-alt}   # a host twice: name the second

Targets on different hosts run at the same time; targets on the same host one after another.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from parity.errors import ConfigError
from parity.decode import read_yaml
from parity.paths import expand_path

KEYS = {"name", "campaign", "profile", "targets", "description"}
TARGET_KEYS = {"host", "profile", "name"}


@dataclass
class Target:
    name: str
    host: str
    profile: str | None = None  # what runs there (a name or a file); None: the matrix's, else the campaign's


@dataclass
class Matrix:
    name: str
    campaign: str
    targets: list[Target]
    profile: str | None = None
    source: str = ""
    sha256: str = ""
    hosts: list[str] = field(default_factory=list)  # in order of first appearance


def _path(value: str, base: Path) -> str:
    p = Path(expand_path(value))
    if not p.is_absolute() and (base / p).exists():
        p = base / p
    return str(p)


def load_matrix(path: str) -> Matrix:
    label = str(path)
    p = Path(path).expanduser()
    data = read_yaml(p, label, missing="matrix file not found", not_mapping="a matrix must be a mapping with campaign: and targets:")
    bad = set(data) - KEYS
    if bad:
        raise ConfigError(label, sorted(bad)[0], f"unknown key (known: {', '.join(sorted(KEYS))})")
    camp = data.get("campaign")
    if not isinstance(camp, str) or not camp:
        raise ConfigError(label, "campaign", "required: the campaign file every target runs")
    camp = _path(camp, p.parent)
    if not Path(camp).is_file():
        raise ConfigError(label, "campaign", f"campaign file not found: {camp}")
    prof = data.get("profile")
    if prof is not None and not isinstance(prof, str):
        raise ConfigError(label, "profile", "must be a profile name or file")
    prof = _path(prof, p.parent) if prof else None
    raw = data.get("targets")
    if not isinstance(raw, list) or not raw:
        raise ConfigError(label, "targets", "must be a non-empty list of {host, profile}")
    targets, names = [], set()
    for i, t in enumerate(raw):
        key = f"targets[{i}]"
        if isinstance(t, str):
            t = {"host": t}
        if not isinstance(t, dict):
            raise ConfigError(label, key, "each target is a host name or {host, profile, name}")
        bad = set(t) - TARGET_KEYS
        if bad:
            raise ConfigError(label, f"{key}.{sorted(bad)[0]}", f"unknown key (known: {', '.join(sorted(TARGET_KEYS))})")
        host = t.get("host")
        if not isinstance(host, str) or not host.strip() or host in ("local", "localhost"):
            raise ConfigError(label, f"{key}.host", "required: a host name (profile hosts: SSH or Slurm, or ~/.ssh/config)")
        name = str(t.get("name") or host)
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
            raise ConfigError(label, f"{key}.name", f"{name!r}: use letters, digits, '-', '_', '.' (it names a directory)")
        if name in names:
            raise ConfigError(label, f"{key}.name", f"two targets named {name!r}: give the second a name:")
        names.add(name)
        tp = t.get("profile")
        if tp is not None and not isinstance(tp, str):
            raise ConfigError(label, f"{key}.profile", "must be a profile name or file")
        targets.append(Target(name, host, _path(tp, p.parent) if tp else None))
    return Matrix(str(data.get("name") or p.stem), camp, targets, prof, label, hashlib.sha256(p.read_bytes()).hexdigest(),
                  list(dict.fromkeys(t.host for t in targets)))  # fmt: skip
