"""The mirror invariant done right (parity.llamacpp.mirror): the expected tree comes from the
fork checkout (HEAD^{tree}), a profile constant, or the tree recorded for the series digest;
a differing fork names the differing files; preimage ids that do not match are a warning;
a patch that does not apply names its first failing hunk.  Real git, mini-llama + mini-series."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from parity.config import profile_from_dict
from parity.llamacpp import build, mirror, patches
from parity.engines.bound import bind
from parity.errors import GateFailed, InfraError, UsageError
from parity.runners.local import LocalRunner
from parity.ui import Output

DATA = Path(__file__).resolve().parent.parent / "data" / "build"
SERIES = DATA / "mini-series"
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
OUT = Output(json_mode=True)


def _git(cwd, *args) -> str:
    return subprocess.run([*GIT, *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("PARITY_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PARITY_SERIES_TREES", str(tmp_path / "series-trees.yaml"))


@pytest.fixture
def fork(tmp_path) -> Path:
    """The fork branch the series was exported from: the pin, then `git am` of the series."""
    d = tmp_path / "fork"
    shutil.copytree(DATA / "mini-llama", d)
    _git(d, "init", "-q")
    _git(d, "add", "-A")
    _git(d, "commit", "-qm", "pin")
    _git(d, "am", "-q", *sorted(str(p) for p in SERIES.glob("*.patch")))
    return d


def _profile(tmp_path, **engine) -> object:
    return profile_from_dict(
        {
            "sources": {"mini": {"kind": "path", "path": str(DATA / "mini-llama")}},
            "engines": {"paged": {"source": "mini", "series": str(SERIES), **engine}, "stock": {"source": "mini"}},
        },
        str(tmp_path / "p.yaml"),
    )


def test_fork_head_tree_is_the_expected_tree(tmp_path, fork):
    r = build.check_series(bind(_profile(tmp_path, fork=str(fork)), "paged"), LocalRunner(), OUT)
    assert r["mirror_ok"] is True and r["tree_after"] == _git(fork, "rev-parse", "HEAD^{tree}")
    assert r["expected_from"].startswith(f"fork {fork} HEAD (") and r["series_digest"] == patches.digest_of(r["patches"])
    lines = build.check_series_lines(r)
    assert any(r["tree_before"] in ln for ln in lines) and any(r["tree_after"] in ln for ln in lines)
    assert any(r["series_digest"] in ln for ln in lines) and lines[-1].strip().startswith("verdict        OK")


def test_fork_that_moved_on_names_the_differing_files(tmp_path, fork):
    (fork / "common" / "common.c").write_text((fork / "common" / "common.c").read_text() + "/* fork-only */\n")
    (fork / "NEW.md").write_text("only in the fork\n")
    _git(fork, "add", "-A")
    _git(fork, "commit", "-qm", "not exported yet")
    with pytest.raises(GateFailed) as ei:
        build.check_series(bind(_profile(tmp_path, fork=str(fork)), "paged"), LocalRunner(), OUT)
    msg = str(ei.value)
    assert "mirror invariant broken" in msg and _git(fork, "rev-parse", "HEAD^{tree}") in msg
    assert "2 differing file(s): A NEW.md, M common/common.c" in msg
    assert ei.value.differing == ["A\tNEW.md", "M\tcommon/common.c"]
    assert _git(fork, "status", "--porcelain") == ""  # the fork is only read


def test_fork_ref_and_bad_fork(tmp_path, fork):
    _git(fork, "tag", "exported")
    (fork / "x.txt").write_text("later\n")
    _git(fork, "add", "-A")
    _git(fork, "commit", "-qm", "later")
    assert build.check_series(bind(_profile(tmp_path, fork=str(fork), fork_ref="exported"), "paged"), LocalRunner(), OUT)["mirror_ok"] is True
    with pytest.raises(UsageError, match="cannot resolve nope"):
        build.check_series(bind(_profile(tmp_path, fork=str(fork), fork_ref="nope"), "paged"), LocalRunner(), OUT)
    with pytest.raises(UsageError, match="fork checkout not found"):
        build.check_series(bind(_profile(tmp_path, fork=str(tmp_path / "gone")), "paged"), LocalRunner(), OUT)


def test_recorded_tree_per_series_digest(tmp_path):
    prof = _profile(tmp_path)
    first = build.check_series(bind(prof, "paged"), LocalRunner(), OUT)
    assert first["mirror_ok"] is None and first["expected_tree"] is None
    rec = build.record_series_tree(bind(prof, "paged"), LocalRunner(), OUT)
    doc = yaml.safe_load(Path(rec["recorded_in"]).read_text())
    (entry,) = doc["series"][first["series_digest"]]
    assert entry["pin_tree"] == first["tree_before"] and entry["tree"] == first["tree_after"] and entry["patches"] == 2
    again = build.check_series(bind(prof, "paged"), LocalRunner(), OUT)
    assert again["mirror_ok"] is True and "recorded for this series digest" in again["expected_from"]
    # a wrong recorded tree for this digest is a broken mirror (no fork at hand: no file list)
    entry["tree"] = first["tree_before"]
    Path(rec["recorded_in"]).write_text(yaml.safe_dump(doc))
    with pytest.raises(GateFailed, match=f"expected {first['tree_before']} from recorded"):
        build.check_series(bind(prof, "paged"), LocalRunner(), OUT)
    # another series (one patch less) has another digest: nothing recorded for it
    one = tmp_path / "one"
    one.mkdir()
    shutil.copy(SERIES / "0001-mini-env-gated-series-banner.patch", one)
    other = profile_from_dict({"sources": {"mini": {"kind": "path", "path": str(DATA / "mini-llama")}}, "engines": {"paged": {"source": "mini", "series": str(one)}}})
    assert build.check_series(bind(other, "paged"), LocalRunner(), OUT)["mirror_ok"] is None


def test_record_refuses_a_stock_engine_and_bad_trees(tmp_path):
    with pytest.raises(UsageError, match="no series"):
        build.record_series_tree(bind(_profile(tmp_path), "stock"), LocalRunner(), OUT)
    with pytest.raises(UsageError, match="40-hex"):
        mirror.record("d" * 64, "abc", "0" * 40, 1, "x")


def test_preimage_ids_that_do_not_match_are_a_warning_with_the_count(tmp_path):
    """A patch whose `index <pre>..` names another blob still applies (git apply ignores the
    ids): the series result lists it and the warning says how many."""
    series = tmp_path / "series"
    series.mkdir()
    shutil.copy(SERIES / "0001-mini-env-gated-series-banner.patch", series)
    text = (SERIES / "0003-mini-series-id-string-in-the-library.patch").read_text()
    pre = [i for _, i in patches.preimages(text)]
    assert pre, "the fixture patch modifies files"
    (series / "0003-exported-elsewhere.patch").write_text(text.replace(f"index {pre[0]}..", "index 1234567..", 1))
    work = tmp_path / "src"
    shutil.copytree(DATA / "mini-llama", work)
    warnings = []

    class Out(Output):
        def warn(self, msg):
            warnings.append(msg)

    res = patches.apply_series(LocalRunner(), str(work), str(series), Out(json_mode=True))
    assert [m["patch"] for m in res.preimage_mismatch] == ["0003-exported-elsewhere.patch"]
    assert res.preimage_mismatch[0]["index"] == "1234567" and len(res.preimage_mismatch[0]["blob"]) == 40
    assert warnings == [
        "series: 1 of 2 patches carry `index` preimage ids that differ from the files they apply to (0003): "
        "exported from another base; git apply ignores them"
    ]
    clean = tmp_path / "clean"
    shutil.copytree(DATA / "mini-llama", clean)
    assert patches.apply_series(LocalRunner(), str(clean), str(SERIES)).preimage_mismatch == []


def test_failing_patch_names_file_and_first_failing_hunk(tmp_path):
    series = tmp_path / "broken"
    series.mkdir()
    shutil.copy(SERIES / "0001-mini-env-gated-series-banner.patch", series)
    good = (SERIES / "0003-mini-series-id-string-in-the-library.patch").read_text()
    (series / "0002-drifted.patch").write_text(good.replace('#include "common.h"\n', '#include "common_old.h"\n', 1))
    work = tmp_path / "src"
    shutil.copytree(DATA / "mini-llama", work)
    with pytest.raises(InfraError) as ei:
        patches.apply_series(LocalRunner(), str(work), str(series))
    msg = str(ei.value)
    hunk = next(ln for ln in good.splitlines() if ln.startswith("@@ "))
    assert msg.startswith("patch 0002-drifted.patch does not apply at common/common.c:")
    assert f"(hunk {hunk.split(' @@')[0]} @@)" in msg


def test_failing_hunk_parser():
    text = "diff --git a/a.c b/a.c\nindex 1111111..2222222 100644\n--- a/a.c\n+++ b/a.c\n@@ -3,4 +3,5 @@ int f()\n x\n@@ -40 +41,2 @@\n y\ndiff --git a/b.c b/b.c\nnew file mode 100644\nindex 0000000..3333333\n"
    assert patches.failing_hunk(text, "a.c", 40) == "@@ -40 +41,2 @@"
    assert patches.failing_hunk(text, "a.c", 3) == "@@ -3,4 +3,5 @@"
    assert patches.failing_hunk(text, "b.c", 3) is None
    assert patches.preimages(text) == [("a.c", "1111111")]  # a new file has no preimage


def test_fork_in_a_linked_worktree(tmp_path, fork):
    """Users keep branches in `git worktree`s: the objects sit in the main repo's common dir."""
    (fork / "NEW.md").write_text("main branch moved on\n")
    _git(fork, "add", "-A")
    _git(fork, "commit", "-qm", "moved on")
    wt = tmp_path / "wt-localai-paged"
    _git(fork, "worktree", "add", "-q", str(wt), "HEAD~1")
    r = build.check_series(bind(_profile(tmp_path, fork=str(wt)), "paged"), LocalRunner(), OUT)
    assert r["mirror_ok"] is True
    (wt / "common" / "common.c").write_text("/* worktree-only */\n")
    _git(wt, "commit", "-qam", "worktree-only")
    with pytest.raises(GateFailed, match="1 differing file\\(s\\): M common/common.c"):
        build.check_series(bind(_profile(tmp_path, fork=str(wt)), "paged"), LocalRunner(), OUT)
