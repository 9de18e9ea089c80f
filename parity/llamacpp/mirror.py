"""The mirror invariant: the pin plus the series must give the tree of the fork branch the
series was exported from (the users' rule, PATCH_MAINTENANCE.md: `git write-tree` of the
applied pin == `HEAD^{tree}` of the fork).

Where the expected tree comes from, first that is set:
  1. engines.NAME.fork: a checkout of the fork branch; its `fork_ref` (HEAD) tree.
  2. engines.NAME.expected_tree: a constant the user wrote down.
  3. the series registry (~/.config/parity/series-trees.yaml, env PARITY_SERIES_TREES):
     trees recorded per series digest and pin tree (`record()`).
None of them: the tree is reported, nothing is compared.

Registry format:
  series:
    <series digest>:
      - {pin_tree: <40 hex>, tree: <40 hex>, patches: 46, recorded: <iso>, how: "..."}
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from parity.llamacpp import git as gitmod
from parity.errors import ConfigError, GateFailed, UsageError
from parity.artifacts import now_iso
from parity.filelock import updating
from parity.yamledit import YamlEditError, edit
from parity.yamlload import safe_load

TREE_LEN = 40


class Expectation(msgspec.Struct):
    tree: str | None  # None: nothing to compare with
    origin: str  # where the tree came from, in words
    fork_repo: str | None = None  # the fork's git dir (to name differing files)


def registry_path() -> Path:
    return Path(os.environ.get("PARITY_SERIES_TREES") or Path.home() / ".config" / "parity" / "series-trees.yaml").expanduser()


def _read_registry(path: Path) -> dict:
    import yaml

    if not path.exists():
        return {}
    try:
        data = safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(str(path), "", f"YAML syntax error: {getattr(e, 'problem', e)}") from None
    if not isinstance(data, dict) or not isinstance(data.get("series") or {}, dict):
        raise ConfigError(str(path), "series", "expected a mapping of series digest -> list of entries")
    return data


def recorded(digest: str, pin_tree: str) -> dict | None:
    path = registry_path()
    entries = (_read_registry(path).get("series") or {}).get(digest) or []
    if not isinstance(entries, list):
        raise ConfigError(str(path), f"series.{digest}", "expected a list of entries")
    return next((e for e in entries if isinstance(e, dict) and e.get("pin_tree") == pin_tree), None)


def record(digest: str, pin_tree: str, tree: str, n_patches: int, how: str) -> Path:
    """Add or replace the (series digest, pin tree) entry in the series registry."""
    for t in (pin_tree, tree):
        if not gitmod.is_tree_id(t):
            raise UsageError(f"refusing to record {t!r}: not a 40-hex git tree id")
    path = registry_path()
    entry = {"pin_tree": pin_tree, "tree": tree, "patches": n_patches, "recorded": now_iso(), "how": how}

    def change(data) -> None:
        if data.get("series") is None:
            data["series"] = {}
        series = data["series"]
        keep = [e for e in (series.get(digest) or []) if not (isinstance(e, dict) and e.get("pin_tree") == pin_tree)]
        series[digest] = [*keep, dict(entry)]

    with updating(path) as write:  # two recordings at once both land; the file's comments stay
        text = path.read_text() if path.exists() else ""
        _read_registry(path)
        try:
            write(edit(text, change))
        except YamlEditError as e:
            raise ConfigError(str(path), "series", f"cannot record the tree without changing what the file holds: {e}") from None
    return path


def fork_tree(runner, fork: str, ref: str = "HEAD") -> tuple[str, str, str]:
    """(tree, commit, git dir) of `ref` in a fork checkout (a work tree or a bare repo)."""
    if not Path(fork).is_dir():
        raise UsageError(f"fork checkout not found: {fork}")
    # the common dir holds the objects, also for a fork checked out with `git worktree add`
    res = gitmod.git(runner, ["rev-parse", "--git-common-dir", f"{ref}^{{commit}}", f"{ref}^{{tree}}"], fork)
    lines = res.stdout.split("\n")
    if not res.ok or len(lines) < 3:
        why = (res.stderr.strip().splitlines() or ["not a git repository"])[-1]
        raise UsageError(f"fork {fork}: cannot resolve {ref}: {why}")
    common = Path(lines[0]) if Path(lines[0]).is_absolute() else Path(fork) / lines[0]
    return lines[2].strip(), lines[1].strip(), str(common)


def expectation(e, runner, digest: str, pin_tree: str) -> Expectation:
    """The expected tree for an engine (EngineConfig e) whose series has `digest`."""
    if getattr(e, "fork", None):
        tree, commit, gitdir = fork_tree(runner, e.fork, e.fork_ref)
        return Expectation(tree, f"fork {e.fork} {e.fork_ref} ({commit[:12]})", gitdir)
    if e.expected_tree:
        return Expectation(e.expected_tree, "the profile's expected_tree")
    hit = recorded(digest, pin_tree)
    if hit:
        return Expectation(str(hit.get("tree")), f"recorded for this series digest in {registry_path()} ({hit.get('recorded', '?')}: {hit.get('how', '')})")
    return Expectation(None, "no fork, expected_tree or recorded tree for this series digest")


def differing_files(runner, workdir: str, tree: str, fork_gitdir: str, fork_tree_id: str) -> list[str]:
    """`git diff-tree -r --name-status` of the applied tree against the fork's, in the scratch
    repo with the fork's objects borrowed as an alternate (nothing is copied or written there)."""
    alt = Path(workdir) / ".git" / "objects" / "info" / "alternates"
    alt.parent.mkdir(parents=True, exist_ok=True)
    with open(alt, "a") as f:
        f.write(str(Path(fork_gitdir) / "objects") + "\n")
    res = gitmod.git(runner, ["diff-tree", "-r", "--name-status", tree, fork_tree_id], workdir)
    if not res.ok:
        return [f"(git diff-tree failed: {res.tail(1)})"]
    return [ln for ln in res.stdout.splitlines() if ln.strip()]


def verify(runner, workdir: str, tree_after: str, exp: Expectation) -> dict:
    """Compare; a mismatch is a GateFailed naming the differing files when the fork is at hand."""
    if exp.tree is None:
        return {"mirror_ok": None, "expected_tree": None, "expected_from": exp.origin, "differing": []}
    if tree_after == exp.tree:
        return {"mirror_ok": True, "expected_tree": exp.tree, "expected_from": exp.origin, "differing": []}
    diff = differing_files(runner, workdir, tree_after, exp.fork_repo, exp.tree) if exp.fork_repo else []
    shown = ", ".join(d.replace("\t", " ") for d in diff[:20]) + (f" (+{len(diff) - 20} more)" if len(diff) > 20 else "")
    raise MirrorBroken(
        f"mirror invariant broken: series on the pin gives tree {tree_after}, expected {exp.tree} from {exp.origin}"
        + (f"; {len(diff)} differing file(s): {shown}" if diff else ""),
        diff,
    )


class MirrorBroken(GateFailed):
    def __init__(self, message: str, differing: list[str]):
        super().__init__(message)
        self.differing = differing
