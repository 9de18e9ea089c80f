"""A llama.cpp checkout or clone as the bisection and the canary see it: resolve a ref to a
commit, list the commits between two, name a commit's subject (the repository's index and
work tree are never touched)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from parity.errors import InfraError, UsageError
from parity.paths import cache_dir, expand_path

_URL = re.compile(r"^(https?|ssh|git|file)://|^[\w.-]+@[\w.-]+:")


def repository(where: str, runner, out=None) -> Path:
    """A checkout (work tree or bare) as is; a url cloned (bare) once into the cache, then fetched."""

    if _URL.match(where):
        repo = cache_dir() / "sources" / "clones" / hashlib.sha256(where.encode()).hexdigest()[:16]
        if not (repo / "HEAD").exists():
            repo.parent.mkdir(parents=True, exist_ok=True)
            if out:
                out.info(f"cloning {where}")
            res = runner.run(["git", "clone", "--quiet", "--bare", where, str(repo)], timeout=3600)
            if not res.ok:
                raise InfraError(f"git clone {where} failed: {res.tail(2)}")
        else:
            res = runner.run(["git", "-C", str(repo), "fetch", "--quiet", "origin", "+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"], timeout=3600)
            if not res.ok:
                raise InfraError(f"git fetch {where} failed: {res.tail(2)}")
        return repo
    repo = Path(expand_path(where))
    if not repo.is_dir() or not ((repo / ".git").exists() or (repo / "HEAD").exists()):
        raise UsageError(f"{where}: not a git checkout or clone (nor a url)")
    return repo


def commit_of(repo: Path, ref: str, runner) -> str:
    res = runner.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"])
    if not res.ok or not res.stdout.strip():
        raise UsageError(f"{ref}: not a commit of {repo}")
    return res.stdout.strip()


def commits_between(repo: Path, good: str, bad: str, runner) -> list[str]:
    """The first-parent commits after good up to bad, oldest first (bad last)."""
    anc = runner.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", good, bad])
    if not anc.ok:
        raise UsageError(f"{good[:12]} is not an ancestor of {bad[:12]} in {repo}")
    res = runner.run(["git", "-C", str(repo), "rev-list", "--first-parent", "--reverse", f"{good}..{bad}"])
    if not res.ok:
        raise InfraError(f"git rev-list {good}..{bad} failed: {res.tail(2)}")
    return res.stdout.split()


def subject(repo: Path, commit: str, runner) -> str:
    res = runner.run(["git", "-C", str(repo), "log", "-1", "--format=%s", commit])
    return res.stdout.strip() if res.ok else ""
