"""A llama.cpp checkout or clone as the bisection and the canary see it: resolve a ref to a
commit, list the commits between two, name a commit's subject (the repository's index and
work tree are never touched)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from parity.errors import InfraError, UsageError
from parity.llamacpp import git as gitmod
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
            res = gitmod.clone_bare(runner, where, repo)
            if not res.ok:
                raise InfraError(f"git clone {where} failed: {res.tail(2)}")
        else:
            res = gitmod.fetch_all_refs(runner, repo)
            if not res.ok:
                raise InfraError(f"git fetch {where} failed: {res.tail(2)}")
        return repo
    repo = Path(expand_path(where))
    if not repo.is_dir() or not ((repo / ".git").exists() or (repo / "HEAD").exists()):
        raise UsageError(f"{where}: not a git checkout or clone (nor a url)")
    return repo


def commit_of(repo: Path, ref: str, runner) -> str:
    commit = gitmod.resolve_commit(runner, repo, ref)
    if commit is None:
        raise UsageError(f"{ref}: not a commit of {repo}")
    return commit


def commits_between(repo: Path, good: str, bad: str, runner) -> list[str]:
    """The first-parent commits after good up to bad, oldest first (bad last)."""
    if not gitmod.is_ancestor(runner, repo, good, bad):
        raise UsageError(f"{good[:12]} is not an ancestor of {bad[:12]} in {repo}")
    return gitmod.first_parent_commits(runner, repo, good, bad)


def subject(repo: Path, commit: str, runner) -> str:
    return gitmod.commit_subject(runner, repo, commit)
