"""Patch series: ordering, strict git apply, failure naming, tree hashes and the
mirror invariant (series tree == the fork branch's tree), with real git."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from parity.llamacpp import git as gitmod
from parity.llamacpp import mirror
from parity.llamacpp import patches
from parity.errors import GateFailed, InfraError, UsageError
from parity.runners.local import LocalRunner

DATA = Path(__file__).resolve().parent.parent / "data" / "build"
SERIES = DATA / "mini-series"
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]


def _git(cwd, *args) -> str:
    return subprocess.run([*GIT, *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def work(tmp_path) -> Path:
    d = tmp_path / "src"
    shutil.copytree(DATA / "mini-llama", d)
    return d


def test_list_series_numeric_order_gaps_and_other_files(tmp_path):
    for name in ("10-ten.patch", "9-nine.patch", "0003-three.patch", "README.md", "series.txt"):
        (tmp_path / name).write_text("")
    assert [p.name for p in patches.list_series(tmp_path)] == ["0003-three.patch", "9-nine.patch", "10-ten.patch"]


@pytest.mark.parametrize("names, msg", [(["fix.patch"], "NNNN-title"), (["0001-a.patch", "1-b.patch"], "0001 used twice")])
def test_list_series_refuses_bad_names(tmp_path, names, msg):
    for n in names:
        (tmp_path / n).write_text("")
    with pytest.raises(UsageError, match=msg):
        patches.list_series(tmp_path)


def test_list_series_missing_dir(tmp_path):
    with pytest.raises(UsageError, match="not a directory"):
        patches.list_series(tmp_path / "nope")


@pytest.mark.parametrize(
    "sample, file, line, message",
    [
        ("bad-context", "common/common.cpp", 2, "error: patch failed: common/common.cpp:2"),
        ("missing-file", "tools/absent.cpp", None, "error: tools/absent.cpp: No such file or directory"),
        ("already-exists", "exists.txt", None, "error: exists.txt: already exists in working directory"),
        ("cached-missing-file", "tools/absent.cpp", None, "error: tools/absent.cpp: does not exist in index"),
        ("cached-already-exists", "exists.txt", None, "error: exists.txt: already exists in index"),
        ("corrupt", None, None, "error: corrupt patch at line 7"),
    ],
)
def test_parse_apply_error_real_git_output(sample, file, line, message):
    got = gitmod.parse_apply_error((DATA / f"git-apply-{sample}.txt").read_text())
    assert got.get("file") == file
    assert got.get("line") == line
    assert got["message"] == message


def test_tree_hash_equals_git_commit_tree(work, tmp_path):
    """Our tree hash of an exported tree is the tree git records for that content."""
    repo = tmp_path / "repo"
    shutil.copytree(work, repo)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    assert gitmod.tree_hash(LocalRunner(), str(work)) == _git(repo, "rev-parse", "HEAD^{tree}")


def _added_tree(d: Path, tmp_path) -> str:
    """The tree `git add -A -f` + `git write-tree` names for a copy of d's content."""
    ref = tmp_path / "ref"
    shutil.rmtree(ref, ignore_errors=True)
    shutil.copytree(d, ref, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    _git(ref, "init", "-q")
    _git(ref, "-c", "core.fileMode=true", "add", "-A", "-f", ".")
    return _git(ref, "write-tree")


def test_tree_hash_follows_edits_deletions_modes_and_ignored_files(work, tmp_path):
    """The second hash reuses the first's index (stat cache): an edit, a deletion, a mode change,
    a new file, a symlink and a gitignored file all reach the tree, as they would with git add."""
    first = gitmod.tree_hash(LocalRunner(), str(work))
    assert first == _added_tree(work, tmp_path)
    victim, edited = sorted(p for p in work.rglob("*") if p.is_file() and ".git" not in p.parts)[:2]
    victim.unlink()
    edited.write_text(edited.read_text() + "// edited\n")
    edited.chmod(0o755)
    (work / ".gitignore").write_text("*.o\n")
    (work / "built.o").write_bytes(b"\0\1")
    (work / "new dir").mkdir()
    (work / "new dir" / "x y.txt").write_text("new\n")
    (work / "link").symlink_to("new dir/x y.txt")
    second = gitmod.tree_hash(LocalRunner(), str(work))
    assert second != first
    assert second == _added_tree(work, tmp_path)


def test_tree_hash_of_a_tree_holding_a_nested_repository(work, tmp_path):
    """update-index refuses a nested repository's directory; the hash falls back to git add,
    which records it as a gitlink."""
    nested = work / "vendor" / "sub"
    nested.mkdir(parents=True)
    (nested / "f.txt").write_text("f\n")
    _git(nested, "init", "-q")
    _git(nested, "add", "-A")
    _git(nested, "commit", "-qm", "sub")
    got = gitmod.tree_hash(LocalRunner(), str(work))
    assert "160000 commit" in _git(work, "ls-tree", "-r", got, "vendor")


def test_series_matches_fork_branch_mirror_invariant(work, tmp_path):
    """Seeds' invariant: strict-apply the series on the pin == `git am` of the same
    format-patch files on a branch (the fork)."""
    fork = tmp_path / "fork"
    shutil.copytree(work, fork)
    _git(fork, "init", "-q")
    _git(fork, "add", "-A")
    _git(fork, "commit", "-qm", "pin")
    base_tree = _git(fork, "rev-parse", "HEAD^{tree}")
    _git(fork, "am", "-q", *sorted(str(p) for p in SERIES.glob("*.patch")))
    fork_tree = _git(fork, "rev-parse", "HEAD^{tree}")

    res = patches.apply_series(LocalRunner(), str(work), str(SERIES))
    assert res.tree_before == base_tree
    assert res.tree_after == fork_tree != base_tree
    assert mirror.verify(LocalRunner(), str(work), res.tree_after, mirror.Expectation(fork_tree, "test fork"))["mirror_ok"] is True
    assert [p["name"] for p in res.patches] == ["0001-mini-env-gated-series-banner.patch", "0003-mini-series-id-string-in-the-library.patch"]
    assert "PARITY_DEMO_BANNER" in (work / "common" / "common.c").read_text()


def _committed(work: Path, tmp_path) -> tuple[Path, str]:
    """work's files as the one commit of a bare clone (the canary's cached upstream)."""
    src = tmp_path / "upstream"
    shutil.copytree(work, src)
    _git(src, "init", "-q")
    _git(src, "add", "-A")
    _git(src, "commit", "-qm", "pin")
    _git(tmp_path, "clone", "-q", "--bare", str(src), "upstream.git")
    return tmp_path / "upstream.git", _git(src, "rev-parse", "HEAD")


def test_series_in_a_scratch_index_gives_the_work_trees_trees_and_writes_nothing(work, tmp_path):
    """The canary's way (a commit read into a scratch index, `git apply --cached`) names the same
    trees as applying to exported files, and the repository gains no object."""
    repo, commit = _committed(work, tmp_path)
    objects = sorted(p.name for p in (repo / "objects").rglob("*"))
    on_files = patches.apply_series(LocalRunner(), str(work), str(SERIES))
    in_index = patches.apply_series(LocalRunner(), gitmod.IndexTree(LocalRunner(), str(repo), commit, str(tmp_path / "scratch")), str(SERIES))
    assert (in_index.tree_before, in_index.tree_after) == (on_files.tree_before, on_files.tree_after)
    assert in_index.patches == on_files.patches and in_index.preimage_mismatch == on_files.preimage_mismatch
    assert sorted(p.name for p in (repo / "objects").rglob("*")) == objects


def test_series_in_a_scratch_index_stops_where_the_files_do(work, tmp_path):
    repo, commit = _committed(work, tmp_path)
    broken = _broken_series(tmp_path)
    with pytest.raises(patches.PatchDoesNotApply) as on_files:
        patches.apply_series(LocalRunner(), str(work), str(broken))
    with pytest.raises(patches.PatchDoesNotApply) as in_index:
        patches.apply_series(LocalRunner(), gitmod.IndexTree(LocalRunner(), str(repo), commit, str(tmp_path / "scratch")), str(broken))
    assert in_index.value.to_dict() == on_files.value.to_dict()
    assert in_index.value.patch == "0002-drifted.patch" and in_index.value.line is not None


def test_expected_tree_mismatch_is_gate_failure(work):
    res = patches.apply_series(LocalRunner(), str(work), str(SERIES))
    with pytest.raises(GateFailed, match=f"mirror invariant broken: series on the pin gives tree {res.tree_after}, expected 0000"):
        mirror.verify(LocalRunner(), str(work), res.tree_after, mirror.Expectation("0" * 40, "the profile's expected_tree"))


def test_no_series_keeps_the_tree(work):
    res = patches.apply_series(LocalRunner(), str(work), None)
    assert res.tree_after == res.tree_before and res.patches == []


def _broken_series(tmp_path) -> Path:
    """0001 applies; 0002 expects context that is not there; 0005 is never tried."""
    d = tmp_path / "broken"
    d.mkdir()
    shutil.copy(SERIES / "0001-mini-env-gated-series-banner.patch", d)
    good = (SERIES / "0003-mini-series-id-string-in-the-library.patch").read_text()
    (d / "0002-drifted.patch").write_text(good.replace('#include "common.h"\n', '#include "common_old.h"\n', 1))
    shutil.copy(SERIES / "0003-mini-series-id-string-in-the-library.patch", d / "0005-never-tried.patch")
    return d


def test_broken_patch_names_patch_and_hunk_and_stops(work, tmp_path):
    with pytest.raises(InfraError) as ei:
        patches.apply_series(LocalRunner(), str(work), str(_broken_series(tmp_path)))
    msg = str(ei.value)
    assert "0002-drifted.patch" in msg and "common/common.c:" in msg
    assert "0005" not in msg
    text = (work / "common" / "common.c").read_text()
    assert "PARITY_DEMO_BANNER" in text and "mini_series_id" not in text  # stopped at the first failure


def test_strict_apply_refuses_fuzz(work, tmp_path):
    """A hunk whose context differs in one line does not apply (patch(1) would fuzz it)."""
    (work / "common" / "common.c").write_text((work / "common" / "common.c").read_text().replace("_IOLBF", "_IOFBF"))
    with pytest.raises(InfraError, match="0001-mini-env-gated-series-banner.patch"):
        patches.apply_series(LocalRunner(), str(work), str(SERIES))


def test_series_digest_and_expected_tree_format():
    dig = patches.series_digest(str(SERIES))
    assert [d["name"][:4] for d in dig] == ["0001", "0003"]
    assert all(len(d["sha256"]) == 64 for d in dig)
    assert patches.series_digest(None) == []
    patches.check_expected_tree("a" * 40, "x")
    from parity.errors import ConfigError

    with pytest.raises(ConfigError, match="40-hex"):
        patches.check_expected_tree("dedb118", "x")


def test_scratch_index_blobs_take_names_literally(tmp_path):
    """A preimage path with glob characters names that file, not the files it would match."""
    src = tmp_path / "r"
    src.mkdir()
    (src / "w[1].txt").write_text("bracketed\n")
    (src / "w1.txt").write_text("plain\n")
    _git(src, "init", "-q")
    _git(src, "add", "-A")
    _git(src, "commit", "-qm", "x")
    blobs = gitmod.IndexTree(LocalRunner(), str(src), "HEAD", str(tmp_path / "scratch")).blobs(["w[1].txt"])
    assert blobs == {"w[1].txt": _git(src, "rev-parse", "HEAD:w[1].txt")}
