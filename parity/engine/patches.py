"""Patch series: NNNN-*.patch applied in numeric order, strictly, with tree hashes."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from parity.artifacts import sha256_file as sha256  # the name build provenance and tests use
from parity.engine import git as gitmod
from parity.errors import ConfigError, GateFailed, InfraError, UsageError

_NUM = re.compile(r"^(\d+)-.+\.patch$")


@dataclass
class SeriesResult:
    tree_before: str
    tree_after: str
    patches: list[dict] = field(default_factory=list)
    expected_tree: str | None = None

    @property
    def mirror_ok(self) -> bool | None:
        return None if not self.expected_tree else self.expected_tree == self.tree_after


def list_series(series_dir: str | Path) -> list[Path]:
    d = Path(series_dir)
    if not d.is_dir():
        raise UsageError(f"patch series {d}: not a directory")
    found = []
    for p in d.iterdir():
        if p.suffix == ".patch":
            m = _NUM.match(p.name)
            if not m:
                raise UsageError(f"patch series {d}: {p.name} is not named NNNN-title.patch")
            found.append((int(m.group(1)), p.name, p))
    nums = [n for n, _, _ in found]
    dup = {n for n in nums if nums.count(n) > 1}
    if dup:
        raise UsageError(f"patch series {d}: number {min(dup):04d} used twice")
    return [p for _, _, p in sorted(found)]


def series_digest(series_dir: str | None) -> list[dict]:
    if not series_dir:
        return []
    return [{"name": p.name, "sha256": sha256(p)} for p in list_series(series_dir)]


def apply_series(runner, workdir: str, series_dir: str | None, expected_tree: str | None, out=None, tree_before: str | None = None) -> SeriesResult:
    """Apply in place (workdir must be a scratch copy). Stops at the first failure.
    tree_before: the workdir's tree when the caller already knows it."""
    before = tree_before or gitmod.tree_hash(runner, workdir)
    applied = []
    for p in list_series(series_dir) if series_dir else []:
        res = gitmod.apply_patch(runner, workdir, str(p))
        if not res.ok:
            where = gitmod.parse_apply_error(res.stderr)
            hunk = f" at {where['file']}:{where['line']}" if "line" in where else (f" in {where['file']}" if "file" in where else "")
            raise InfraError(f"patch {p.name} does not apply{hunk}: {where['message']}")
        applied.append({"name": p.name, "sha256": sha256(p)})
        if out:
            out.debug(f"applied {p.name}")
    after = gitmod.tree_hash(runner, workdir) if applied else before
    result = SeriesResult(before, after, applied, expected_tree)
    if expected_tree and after != expected_tree:
        raise GateFailed(f"mirror invariant broken: series on the pin gives tree {after}, expected {expected_tree}")
    return result


def check_expected_tree(value: str | None, label: str) -> None:
    if value and not re.fullmatch(r"[0-9a-f]{40}", value):
        raise ConfigError(label, "expected_tree", f"not a 40-hex git tree hash: {value!r}")
