"""Patch series: NNNN-*.patch applied in numeric order, strictly, with tree hashes.

Also checked on the way: each patch's `index <pre>..<post>` preimage ids against the
files it applies to (a mismatch is only a warning: `git apply` ignores those ids, and
patches exported while the fork sat on another base carry them).
"""

from __future__ import annotations

import re
from pathlib import Path

import msgspec

from parity.files import sha256 as sha256_of, sha256_file as sha256  # sha256: a file's, the name build provenance and tests use
from parity.llamacpp import git as gitmod
from parity.errors import ConfigError, InfraError, UsageError

_NUM = re.compile(r"^(\d+)-.+\.patch$")
_DIFF = re.compile(r"^diff --git a/(\S+) b/(\S+)$")
_INDEX = re.compile(r"^index ([0-9a-f]{4,40})\.\.([0-9a-f]{4,40})")
_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@")


class PatchDoesNotApply(InfraError):
    """The strict apply stopped at a patch: which one, where (file, hunk start line), its hunk
    header, and git's first message line (a canary or a pin bisection reads these)."""

    def __init__(self, patch: str, where: dict, hunk: str | None):
        self.patch, self.file, self.line, self.hunk, self.detail = patch, where.get("file"), where.get("line"), hunk, where["message"]
        at = f" at {self.file}:{self.line}" if self.line is not None else (f" in {self.file}" if self.file else "")
        super().__init__(f"patch {patch} does not apply{at}" + (f" (hunk {hunk})" if hunk else "") + f": {self.detail}")

    def to_dict(self) -> dict:
        return {"patch": self.patch, "file": self.file, "line": self.line, "hunk": self.hunk, "message": self.detail}


class SeriesResult(msgspec.Struct):
    tree_before: str
    tree_after: str
    patches: list[dict] = msgspec.field(default_factory=list)
    preimage_mismatch: list[dict] = msgspec.field(default_factory=list)  # {patch, file, index, blob}


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


class Selection(msgspec.Struct, frozen=True):
    """A variant of a series: only patches numbered <= until, and none of `without` (numbers as
    written, e.g. "0055" or "55").  The empty selection is the whole series."""

    until: str | None = None
    without: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.until or self.without)

    def describe(self) -> str:
        parts = ([f"until {self.until}"] if self.until else []) + ([f"without {', '.join(self.without)}"] if self.without else [])
        return "; ".join(parts) or "whole series"


def patch_number(value: str, what: str) -> int:
    if not re.fullmatch(r"\d{1,6}", str(value).strip()):
        raise UsageError(f"{what}: {value!r} is not a patch number (NNNN, as in NNNN-title.patch)")
    return int(value)


def select(found: list[Path], sel: Selection | None, series_dir: str | Path = "") -> list[Path]:
    """The patches of a selection, in order; a number the series does not hold is an error."""
    if not sel:
        return found
    nums = {int(_NUM.match(p.name).group(1)): p for p in found}
    drop = set()
    for w in sel.without:
        n = patch_number(w, "series without")
        if n not in nums:
            raise UsageError(f"series {series_dir}: no patch {int(w):04d} to leave out (it holds {min(nums, default=0):04d}..{max(nums, default=0):04d})")
        drop.add(n)
    last = None
    if sel.until:
        last = patch_number(sel.until, "series until")
        if last not in nums:
            raise UsageError(f"series {series_dir}: no patch {last:04d} to stop at (it holds {min(nums, default=0):04d}..{max(nums, default=0):04d})")
    return [p for n, p in sorted(nums.items()) if n not in drop and (last is None or n <= last)]


def series_digest(series_dir: str | None, sel: Selection | None = None) -> list[dict]:
    if not series_dir:
        return []
    return [{"name": p.name, "sha256": sha256(p)} for p in select(list_series(series_dir), sel, series_dir)]


def digest_of(series: list[dict]) -> str:
    """One id for a whole series: names (the order) and contents of its patches."""
    return sha256_of("".join(f"{d['name']} {d['sha256']}\n" for d in series)).hexdigest()


def preimages(text: str) -> list[tuple[str, str]]:
    """(path, preimage id) of every file a patch modifies (new files have none)."""
    out, path = [], None
    for ln in text.splitlines():
        if m := _DIFF.match(ln):
            path = m.group(1)
        elif path and (m := _INDEX.match(ln)):
            if set(m.group(1)) != {"0"}:
                out.append((path, m.group(1)))
            path = None
    return out


def failing_hunk(text: str, file: str, line: int) -> str | None:
    """The `@@ -line,...` header of the hunk `git apply` reports as `patch failed: file:line`
    (git names a hunk by its old start line)."""
    cur = None
    for ln in text.splitlines():
        if m := _DIFF.match(ln):
            cur = m.group(1)
        elif cur == file and (m := _HUNK.match(ln)) and int(m.group(1)) == line:
            return ln.split(" @@", 1)[0] + " @@"
    return None


def _check_preimages(target, patch: Path, text: str) -> list[dict]:
    pre = preimages(text)
    blobs = target.blobs([f for f, _ in pre]) if pre else {}
    return [{"patch": patch.name, "file": f, "index": i, "blob": blobs[f]} for f, i in pre if f in blobs and not blobs[f].startswith(i)]


def apply_series(runner, workdir, series_dir: str | None, out=None, tree_before: str | None = None, what: str = "series", sel: Selection | None = None) -> SeriesResult:
    """Apply in place: workdir is a scratch copy's path (its files change) or a git.IndexTree
    (a commit in a scratch index). Stops at the first failure.
    tree_before: the workdir's tree when the caller already knows it. The mirror invariant
    (the result against the fork or a recorded tree) is mirror.verify's job."""
    target = gitmod.WorkTree(runner, workdir) if isinstance(workdir, str) else workdir
    before = tree_before or target.tree()
    applied, mismatch = [], []
    for p in select(list_series(series_dir), sel, series_dir) if series_dir else []:
        text = p.read_text(errors="surrogateescape")
        mismatch += _check_preimages(target, p, text)
        res = target.apply(str(p))
        if not res.ok:
            where = gitmod.parse_apply_error(res.stderr)
            raise PatchDoesNotApply(p.name, where, failing_hunk(text, where["file"], where["line"]) if "line" in where else None)
        applied.append({"name": p.name, "sha256": sha256(p)})
        if out:
            out.debug(f"applied {p.name}")
    if mismatch and out:
        names = sorted({m["patch"][:4] for m in mismatch})
        out.warn(
            f"{what if Path(series_dir).name == what else what + ' ' + Path(series_dir).name}: {len(names)} of {len(applied)} patches carry `index` preimage ids that differ from the files they apply to "
            f"({', '.join(names)}): exported from another base; git apply ignores them"
        )
    after = target.tree() if applied else before
    return SeriesResult(before, after, applied, mismatch)


def check_expected_tree(value: str | None, label: str) -> None:
    if value and not re.fullmatch(r"[0-9a-f]{40}", value):
        raise ConfigError(label, "expected_tree", f"not a 40-hex git tree hash: {value!r}")
