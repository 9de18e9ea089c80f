"""The series applied, strictly, to one upstream commit: the canary's check and the pin
bisection's cheapest criterion.  The commit is read into a scratch index, not exported: the
patches apply there (`git apply --cached`, the same strict rules) and write-tree names the
result, the tree a build of that commit and series would have."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from parity.llamacpp import git as gitmod
from parity.llamacpp import patches


def apply_at(repo: Path, commit: str, series_dir: str, runner, out=None) -> dict:
    """{ok, commit, tree_before, tree_after, applied, patches, failure: {patch, file, line, hunk, message} | None, seconds}."""
    t0 = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="parity-apply-"))
    try:
        n = len(patches.list_series(series_dir))
        index = gitmod.IndexTree(runner, str(repo), commit, str(tmp))
        try:
            res = patches.apply_series(runner, index, series_dir, out)
        except patches.PatchDoesNotApply as e:
            return {"ok": False, "commit": commit, "patches": n, "applied": _applied_before(series_dir, e.patch), "failure": e.to_dict(), "seconds": round(time.monotonic() - t0, 1)}
        return {"ok": True, "commit": commit, "patches": n, "applied": len(res.patches), "tree_before": res.tree_before, "tree_after": res.tree_after, "failure": None,
                "seconds": round(time.monotonic() - t0, 1)}  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _applied_before(series_dir: str, failing: str) -> int:
    names = [p.name for p in patches.list_series(series_dir)]
    return names.index(failing) if failing in names else 0


def failure_line(f: dict) -> str:
    where = f" at {f['file']}:{f['line']}" if f.get("line") is not None else (f" in {f['file']}" if f.get("file") else "")
    return f"patch {f['patch']} does not apply{where}" + (f" (hunk {f['hunk']})" if f.get("hunk") else "") + f": {f['message']}"
