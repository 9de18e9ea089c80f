"""The git tool, the one module that runs it (through a Runner): strict patch application and
tree hashes; a clone's commits (clone, fetch, resolve, list, export) for the sources, the
bisection and the canary; a checkout's file list for --host shipping."""

from __future__ import annotations

import re
import shlex

from parity.errors import InfraError
from parity.runners.base import CommandResult

_ID = ["-c", "user.name=parity", "-c", "user.email=parity@localhost", "-c", "core.autocrlf=false", "-c", "core.fileMode=true"]
_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "LC_ALL": "C"}


def git(runner, args: list[str], cwd: str, timeout: float = 600):
    return runner.run(["git", *_ID, *args], cwd=cwd, timeout=timeout, env=_ENV)


def is_tree_id(value) -> bool:
    return isinstance(value, str) and re.fullmatch(r"[0-9a-f]{40}", value) is not None


def tree_hash(runner, workdir: str) -> str:
    """git tree hash of a directory's content, ignored files included (initialises a repo when
    needed): the tree `git add -A -f` + `git write-tree` names, without storing the blobs.
    update-index --info-only hashes each file but writes no object (the 157 MB pin: ~3x less CPU
    than add), and its stat cache skips files unchanged since the last hash."""
    if not runner.exists(f"{workdir}/.git"):
        _ok(git(runner, ["init", "-q"], workdir), "git init")
    gitc = shlex.join(["git", *_ID])
    listed = ".git/parity-paths"
    script = (
        f"{gitc} ls-files -z --cached --others > {listed} && "
        f"{gitc} update-index -z --add --remove --info-only --stdin < {listed}; rc=$?; rm -f {listed}; exit $rc"
    )
    res = runner.run(["sh", "-c", script], cwd=workdir, timeout=1800, env=_ENV)
    if not res.ok or "Ignoring path" in res.stderr:
        # a nested repository is listed as a directory, which update-index skips ("Ignoring
        # path sub/"): git add records it as a gitlink
        _ok(git(runner, ["-c", "core.looseCompression=0", "add", "-A", "-f", "."], workdir, timeout=1800), "git add")
    return _ok(git(runner, ["write-tree", "--missing-ok"], workdir), "git write-tree").stdout.strip()


def _ok(res, what: str):
    if not res.ok:
        raise InfraError(f"{what} failed: {res.tail(3)}")
    return res


_FAILED = re.compile(r"error: patch failed: (?P<file>\S+):(?P<line>\d+)")
_NOAPPLY = re.compile(r"error: (?P<file>\S+): patch does not apply")
# a work tree's words, then a scratch index's (IndexTree)
_MISSING = re.compile(r"error: (?P<file>\S+): (?:No such file or directory|does not exist in index)")
_EXISTS = re.compile(r"error: (?P<file>\S+): already exists in (?:working directory|index)")


def parse_apply_error(stderr: str) -> dict:
    """The file and hunk start line `git apply` stopped at (plus its first message line)."""
    out: dict = {"message": stderr.strip().splitlines()[0] if stderr.strip() else "git apply failed"}
    m = _FAILED.search(stderr)
    if m:
        out.update(file=m["file"], line=int(m["line"]))
    else:
        m = _NOAPPLY.search(stderr) or _MISSING.search(stderr) or _EXISTS.search(stderr)
        if m:
            out["file"] = m["file"]
    return out


def apply_patch(runner, workdir: str, patch: str):
    """Strict git apply: no fuzz, whitespace must match.  Returns the CommandResult."""
    return git(runner, ["apply", "--whitespace=nowarn", "-p1", patch], workdir)


class WorkTree:
    """Files in a directory (a scratch copy): patches apply to the files, the tree is tree_hash's."""

    def __init__(self, runner, workdir: str):
        self.runner, self.workdir = runner, workdir

    def tree(self) -> str:
        return tree_hash(self.runner, self.workdir)

    def blobs(self, files: list[str]) -> dict[str, str]:
        here = [f for f in files if self.runner.exists(f"{self.workdir}/{f}")]
        if not here:
            return {}
        res = git(self.runner, ["hash-object", "--", *here], self.workdir)
        ids = res.stdout.split() if res.ok else []
        return dict(zip(here, ids)) if len(ids) == len(here) else {}

    def apply(self, patch: str):
        return apply_patch(self.runner, self.workdir, patch)


class IndexTree:
    """A commit of repo (a checkout or a bare clone) in a scratch index: patches apply with
    `git apply --cached`, and write-tree names the result, without exporting the commit's files
    (the pin: 157 MB, ~4 CPU-s a probe to export and hash).  New objects go to a scratch object
    directory with the repository's as alternate, so neither its objects nor its index change."""

    def __init__(self, runner, repo: str, commit: str, scratch: str):
        self.runner, self.repo = runner, repo
        res = runner.run(["git", "-C", repo, "rev-parse", "--path-format=absolute", "--git-path", "objects"], env=_ENV)
        objects = _ok(res, "git rev-parse --git-path objects").stdout.strip()
        runner.run(["mkdir", "-p", f"{scratch}/objects"])
        self.env = {**_ENV, "GIT_INDEX_FILE": f"{scratch}/index", "GIT_OBJECT_DIRECTORY": f"{scratch}/objects", "GIT_ALTERNATE_OBJECT_DIRECTORIES": objects}
        _ok(self._git(["read-tree", commit]), f"git read-tree {commit[:12]}")

    def _git(self, args: list[str]):
        return self.runner.run(["git", *_ID, "-C", self.repo, *args], timeout=600, env=self.env)

    def tree(self) -> str:
        return _ok(self._git(["write-tree"]), "git write-tree").stdout.strip()

    def blobs(self, files: list[str]) -> dict[str, str]:
        res = self._git(["--literal-pathspecs", "ls-files", "-s", "-z", "--", *files]) if files else None  # a name with [ or * is a name
        out = {}
        for entry in (res.stdout.split("\0") if res is not None and res.ok else []):
            meta, _, path = entry.partition("\t")
            if path:
                out[path] = meta.split()[1]
        return out

    def apply(self, patch: str):
        return self._git(["apply", "--cached", "--whitespace=nowarn", "-p1", patch])


# ---------------------------------------------------------------- a repository's commits
# Plain git (no _ID config, no _ENV): each call's argv, timeout and env are what its caller ran.
# Those whose failure the caller words return the CommandResult.


def clone_bare(runner, url: str, dest) -> CommandResult:
    """`git clone --bare` of url into dest (a new directory)."""
    return runner.run(["git", "clone", "--quiet", "--bare", url, str(dest)], timeout=3600)


def fetch_all_refs(runner, repo) -> CommandResult:
    """A bare clone's branches and tags brought up to its origin's."""
    refs = ["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"]
    return runner.run(["git", "-C", str(repo), "fetch", "--quiet", "origin", *refs], timeout=3600)


def fetch_commit(runner, repo, commit: str) -> CommandResult:
    return runner.run(["git", "-C", str(repo), "fetch", "--quiet", "origin", commit], timeout=3600)


def has_commit(runner, repo, commit: str) -> bool:
    return runner.run(["git", "-C", str(repo), "cat-file", "-e", f"{commit}^{{commit}}"]).ok


def resolve_commit(runner, repo, ref: str) -> str | None:
    """The commit a ref (branch, tag, sha, `HEAD~3`) names; None when it names none."""
    res = runner.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"])
    return res.stdout.strip() if res.ok and res.stdout.strip() else None


def is_ancestor(runner, repo, old: str, new: str) -> bool:
    return runner.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", old, new]).ok


def first_parent_commits(runner, repo, good: str, bad: str) -> list[str]:
    """The first-parent commits after good up to bad, oldest first (bad last)."""
    res = runner.run(["git", "-C", str(repo), "rev-list", "--first-parent", "--reverse", f"{good}..{bad}"])
    if not res.ok:
        raise InfraError(f"git rev-list {good}..{bad} failed: {res.tail(2)}")
    return res.stdout.split()


def commit_subject(runner, repo, commit: str) -> str:
    """A commit's subject line; empty when git cannot say."""
    res = runner.run(["git", "-C", str(repo), "log", "-1", "--format=%s", commit])
    return res.stdout.strip() if res.ok else ""


def export_commit(runner, repo, commit: str, dest, index) -> CommandResult:
    """A commit's files written into dest through a throwaway index file: the repository's own
    index and work tree are left as they are."""
    return runner.run(
        ["git", "-C", str(repo), "--work-tree", str(dest), "checkout", commit, "--", "."],
        env={"GIT_INDEX_FILE": str(index)},
        timeout=1800,
    )


def listed_files(runner, root) -> list[str]:
    """A checkout's files, tracked and untracked but not ignored; [] when git cannot list them."""
    argv = ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    res = runner.run(argv, timeout=60)
    return [n for n in res.stdout.split("\0") if n] if res.ok else []
