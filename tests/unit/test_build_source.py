"""Source kinds: archive (+sha256), git (url + pin, or an existing checkout), path,
localai (pin from its Makefile, series from patches/paged), pypi-sdist lookup."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from parity.config import SourceConfig, profile_from_dict
from parity.llamacpp import git as gitmod
from parity.engines.bound import bind
from parity.llamacpp import source as srcmod
from parity.errors import UsageError
from parity.runners.local import LocalRunner
from parity.ui import Output

from conftest import CountingRunner

DATA = Path(__file__).resolve().parent.parent / "data" / "build"
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]


def _git(cwd, *args) -> str:
    return subprocess.run([*GIT, *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("PARITY_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def upstream(tmp_path) -> tuple[Path, str, str]:
    """A git repo standing in for upstream llama.cpp: (repo, pin, later commit)."""
    repo = tmp_path / "upstream"
    shutil.copytree(DATA / "mini-llama", repo)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "pin")
    pin = _git(repo, "rev-parse", "HEAD")
    (repo / "NEWER.txt").write_text("after the pin\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "later")
    return repo, pin, _git(repo, "rev-parse", "HEAD")


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


# ---------------------------------------------------------------- archive


@pytest.mark.parametrize("fmt", ["tar.gz", "zip"])
def test_archive_unpacks_once_into_sha_dir(tmp_path, cache, fmt):
    arc = tmp_path / f"src.{fmt}"
    if fmt == "zip":
        with zipfile.ZipFile(arc, "w") as z:
            for f in (DATA / "mini-llama").rglob("*"):
                z.write(f, "top/llama.cpp/" + str(f.relative_to(DATA / "mini-llama")))
    else:
        with tarfile.open(arc, "w:gz") as t:
            t.add(DATA / "mini-llama", arcname="top/llama.cpp")
    cfg = SourceConfig(kind="archive", path=str(arc), sha256=_sha(arc), subdir="llama.cpp")
    tree = srcmod.materialize("arc", cfg, LocalRunner())
    assert tree == cache / "sources" / _sha(arc) / "top" / "llama.cpp"
    assert (tree / "CMakeLists.txt").read_text() == (DATA / "mini-llama" / "CMakeLists.txt").read_text()
    # second call: no re-extraction (the marker is there; a file we drop survives)
    (tree / "marker").write_text("x")
    assert srcmod.materialize("arc", cfg, LocalRunner()) == tree and (tree / "marker").exists()


def test_archive_sha_mismatch_and_missing(tmp_path):
    arc = tmp_path / "src.tar.gz"
    with tarfile.open(arc, "w:gz") as t:
        t.add(DATA / "mini-llama", arcname="llama.cpp")
    with pytest.raises(UsageError, match=f"got {_sha(arc)}, expected {'0' * 64}"):
        srcmod.materialize("arc", SourceConfig(kind="archive", path=str(arc), sha256="0" * 64), LocalRunner())
    with pytest.raises(UsageError, match="archive not found"):
        srcmod.materialize("arc", SourceConfig(kind="archive", path=str(tmp_path / "no.tgz"), sha256="0" * 64), LocalRunner())
    with pytest.raises(UsageError, match="subdir 'vendor/llama.cpp' not found"):
        srcmod.materialize("arc", SourceConfig(kind="archive", path=str(arc), sha256=_sha(arc), subdir="vendor/llama.cpp"), LocalRunner())


# ---------------------------------------------------------------- git


def test_git_url_pin_exports_the_pin_tree(upstream, cache):
    repo, pin, later = upstream
    r = CountingRunner()
    tree = srcmod.materialize("up", SourceConfig(kind="git", url=str(repo), pin=pin), r)
    assert (tree / "CMakeLists.txt").exists() and not (tree / "NEWER.txt").exists()
    # the exported files hash to the pin's own tree
    scratch = cache.parent / "scratch"
    shutil.copytree(tree, scratch, ignore=shutil.ignore_patterns(".complete"))
    assert gitmod.tree_hash(LocalRunner(), str(scratch)) == _git(repo, "rev-parse", f"{pin}^{{tree}}")
    # cached: the second call runs nothing
    n = len(r.calls)
    assert srcmod.materialize("up", SourceConfig(kind="git", url=str(repo), pin=pin), r) == tree
    assert len(r.calls) == n


def test_git_checkout_is_left_untouched(upstream):
    repo, pin, later = upstream
    tree = srcmod.materialize("up", SourceConfig(kind="git", url=None, checkout=str(repo), pin=pin), LocalRunner())
    assert (tree / "CMakeLists.txt").exists() and not (tree / "NEWER.txt").exists()
    assert _git(repo, "rev-parse", "HEAD") == later
    assert _git(repo, "status", "--porcelain") == ""


def test_git_unknown_pin(upstream):
    repo, _, _ = upstream
    with pytest.raises(UsageError, match="not in checkout"):
        srcmod.materialize("up", SourceConfig(kind="git", checkout=str(repo), pin="f" * 40), LocalRunner())


def test_git_needs_url_or_checkout():
    with pytest.raises(UsageError, match="url or a checkout"):
        srcmod.materialize("up", SourceConfig(kind="git", pin="a" * 40), LocalRunner())


# ---------------------------------------------------------------- localai


def _localai_backend(tmp_path, pin: str) -> Path:
    d = tmp_path / "llama-cpp-localai-paged"
    (d / "patches" / "paged").mkdir(parents=True)
    (d / "Makefile").write_text(f"\nLLAMA_REPO?=https://github.com/ggml-org/llama.cpp\nLLAMA_VERSION?={pin}\n\nCMAKE_ARGS?=\n")
    for p in (DATA / "mini-series").glob("*.patch"):
        shutil.copy(p, d / "patches" / "paged")
    return d


def test_read_localai_pin(tmp_path):
    d = _localai_backend(tmp_path, "0ed235ea2c17a19fc8238668653946721ed136fd")
    assert srcmod.read_localai_pin(str(d)) == "0ed235ea2c17a19fc8238668653946721ed136fd"
    (d / "Makefile").write_text("LLAMA_VERSION=b8508\n")
    with pytest.raises(UsageError, match="no LLAMA_VERSION"):
        srcmod.read_localai_pin(str(d))
    with pytest.raises(UsageError, match="no Makefile"):
        srcmod.read_localai_pin(str(tmp_path / "nowhere"))


def test_localai_profile_pin_must_match_makefile(tmp_path):
    d = _localai_backend(tmp_path, "0ed235ea2c17a19fc8238668653946721ed136fd")
    cfg = SourceConfig(kind="localai", path=str(d), url="x", pin="c299a92c")
    with pytest.raises(UsageError, match="differs from the profile's pin c299a92c"):
        srcmod.describe("la", cfg)
    srcmod.describe("la", SourceConfig(kind="localai", path=str(d), url="x", pin="0ed235ea"))  # a prefix agrees


def test_localai_series_auto_builds_plan(upstream, tmp_path):
    repo, pin, _ = upstream
    d = _localai_backend(tmp_path, pin)
    prof = profile_from_dict(
        {
            "sources": {"la": {"kind": "localai", "path": str(d), "checkout": str(repo)}},
            "engines": {"paged": {"source": "la", "series": "auto"}, "stock": {"source": "la"}},
        }
    )
    from parity.llamacpp import build

    p = build.plan(bind(prof, "paged"))
    assert p.series_dir == str(d / "patches" / "paged")
    assert [s["name"][:4] for s in p.series] == ["0001", "0003"]
    assert build.plan(bind(prof, "stock")).series == []
    res = build.check_series(bind(prof, "paged"), LocalRunner(), Output(json_mode=True))
    assert res["tree_before"] == _git(repo, "rev-parse", f"{pin}^{{tree}}") != res["tree_after"]


def test_series_auto_needs_localai(tmp_path):
    prof = profile_from_dict({"sources": {"p": {"kind": "path", "path": str(DATA / "mini-llama")}}, "engines": {"e": {"source": "p", "series": "auto"}}})
    from parity.llamacpp import build

    with pytest.raises(UsageError, match="localai"):
        build.plan(bind(prof, "e"))


# ---------------------------------------------------------------- path, pypi-sdist


def test_path_identity_changes_with_content(tmp_path):
    d = tmp_path / "tree"
    shutil.copytree(DATA / "mini-llama", d)
    cfg = SourceConfig(kind="path", path=str(d))
    a = srcmod.describe("p", cfg).identity
    assert srcmod.describe("p", cfg).identity == a
    (d / "common" / "common.c").write_text("/* edited */\n")
    assert srcmod.describe("p", cfg).identity != a
    assert srcmod.materialize("p", cfg, LocalRunner()) == d
    with pytest.raises(UsageError, match="path not found"):
        srcmod.describe("p", SourceConfig(kind="path", path=str(tmp_path / "gone")))


def test_sdist_reuses_a_verified_download_without_pip(tmp_path, cache):
    """A download already in the cache with the right sha256 is used; pip is not run."""
    dl = cache / "sources" / "downloads"
    dl.mkdir(parents=True)
    arc = dl / "llama_cpp_python-0.3.36.tar.gz"
    with tarfile.open(arc, "w:gz") as t:
        t.add(DATA / "mini-llama", arcname="llama_cpp_python-0.3.36/vendor/llama.cpp")
    cfg = SourceConfig(kind="pypi-sdist", package="llama-cpp-python==0.3.36", sha256=_sha(arc), subdir="vendor/llama.cpp")
    r = CountingRunner()
    tree = srcmod.materialize("sdist", cfg, r)
    assert tree.name == "llama.cpp" and (tree / "CMakeLists.txt").exists()
    assert r.calls == []


def test_sdist_needs_name_eq_version():
    cfg = SourceConfig(kind="pypi-sdist", package="llama-cpp-python", sha256="0" * 64)
    with pytest.raises(UsageError, match="NAME==VERSION"):
        srcmod.materialize("sdist", cfg, LocalRunner())


def test_copy_skips_only_top_level_git_and_cmake_build_dirs(tmp_path):
    d = tmp_path / "checkout"
    shutil.copytree(DATA / "mini-llama", d)
    (d / "build-cuda").mkdir()
    (d / "build-cuda" / "CMakeCache.txt").write_text("x")
    (d / "tools" / "build").mkdir()
    (d / "tools" / "build" / "keep.c").write_text("int x;\n")
    (d / "build-notes").mkdir()
    (d / "build-notes" / "keep.md").write_text("a source dir named build-*\n")
    (d / ".git").mkdir()
    ident = srcmod.describe("p", SourceConfig(kind="path", path=str(d))).identity
    (d / "build-cuda" / "CMakeCache.txt").write_text("changed by a build")
    assert srcmod.describe("p", SourceConfig(kind="path", path=str(d))).identity == ident
    dest = tmp_path / "copy"
    srcmod.copy_tree(d, dest)
    assert (dest / "tools" / "build" / "keep.c").exists() and (dest / "build-notes" / "keep.md").exists()
    assert not (dest / "build-cuda").exists() and not (dest / ".git").exists()


def test_copy_leaves_out_bytecode_at_any_depth(tmp_path):
    d = tmp_path / "checkout"
    shutil.copytree(DATA / "mini-llama", d)
    (d / "gguf-py" / "gguf" / "__pycache__").mkdir(parents=True)
    (d / "gguf-py" / "gguf" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\x00")
    (d / "gguf-py" / "gguf" / "x.py").write_text("X = 1\n")
    srcmod.copy_tree(d, tmp_path / "copy")
    assert (tmp_path / "copy" / "gguf-py" / "gguf" / "x.py").exists() and list((tmp_path / "copy").rglob("__pycache__")) == []


# ---------------------------------------------------------------- localai + a `git archive` of the pin


def _git_archive(repo: Path, commit: str, out: Path) -> Path:
    subprocess.run(["git", "archive", "--format=tar.gz", f"--prefix=llama.cpp-{commit[:8]}/", "-o", str(out), commit], cwd=repo, check=True)
    return out


def test_archive_commit_is_what_git_get_tar_commit_id_prints(upstream, tmp_path):
    repo, pin, _ = upstream
    arc = _git_archive(repo, pin, tmp_path / "pin.tar.gz")
    got = subprocess.run(f"gzip -dc {arc} | git get-tar-commit-id", shell=True, capture_output=True, text=True).stdout.strip()
    assert srcmod.archive_commit(str(arc)) == got == pin
    plain = tmp_path / "plain.tar.gz"
    with tarfile.open(plain, "w:gz") as t:
        t.add(DATA / "mini-llama", arcname="x")
    assert srcmod.archive_commit(str(plain)) is None


def test_localai_archive_at_the_pin_is_the_pin_tree(upstream, tmp_path, cache):
    repo, pin, _ = upstream
    d = _localai_backend(tmp_path, pin)
    cfg = SourceConfig(kind="localai", path=str(d), archive=str(_git_archive(repo, pin, tmp_path / "pin.tar.gz")))
    src = srcmod.describe("la", cfg)
    assert src.identity == f"git:{pin}" and src.info["archive"] == cfg.archive  # same identity as a clone of the pin
    tree = srcmod.materialize("la", cfg, LocalRunner())
    assert tree == cache / "sources" / f"git-{pin}" and (tree / "CMakeLists.txt").exists() and not (tree / "NEWER.txt").exists()
    scratch = tmp_path / "scratch"
    shutil.copytree(tree, scratch, ignore=shutil.ignore_patterns(".complete"))
    assert gitmod.tree_hash(LocalRunner(), str(scratch)) == _git(repo, "rev-parse", f"{pin}^{{tree}}")


def test_localai_archive_at_another_commit_is_refused(upstream, tmp_path):
    repo, pin, later = upstream
    d = _localai_backend(tmp_path, pin)
    cfg = SourceConfig(kind="localai", path=str(d), archive=str(_git_archive(repo, later, tmp_path / "later.tar.gz")))
    with pytest.raises(UsageError, match=f"Makefile LLAMA_VERSION {pin} differs from the archive's commit {later}"):
        srcmod.describe("la", cfg)
    plain = tmp_path / "plain.tar.gz"
    with tarfile.open(plain, "w:gz") as t:
        t.add(DATA / "mini-llama", arcname="x")
    with pytest.raises(UsageError, match="carries no commit id"):
        srcmod.describe("la", SourceConfig(kind="localai", path=str(d), archive=str(plain)))
    with pytest.raises(UsageError, match="archive not found"):
        srcmod.describe("la", SourceConfig(kind="localai", path=str(d), archive=str(tmp_path / "gone.tar.gz")))


def test_localai_checkout_without_the_pin_is_refused(upstream, tmp_path):
    repo, pin, _ = upstream
    d = _localai_backend(tmp_path, "f" * 40)
    with pytest.raises(UsageError, match="not in checkout"):
        srcmod.materialize("la", SourceConfig(kind="localai", path=str(d), checkout=str(repo)), LocalRunner())


@pytest.mark.parametrize(
    "source, msg",
    [
        ({"kind": "localai", "path": "/x", "archive": "/a.tgz", "url": "u"}, "one way: archive, checkout or url"),
        ({"kind": "localai", "path": "/x", "archive": "/a.tgz", "checkout": "/c"}, "one way: archive, checkout or url"),
        ({"kind": "git", "url": "u", "pin": "p", "archive": "/a.tgz"}, "only a localai source takes an archive"),
    ],
)
def test_archive_config_errors(source, msg):
    from parity.errors import ConfigError

    with pytest.raises(ConfigError, match=msg):
        profile_from_dict({"sources": {"s": source}})


def test_an_engines_build_is_resolved_once_and_its_archive_is_not_read_again(upstream, tmp_path):
    """A 20-block run on the H200 resolved the stock build at every server start, re-reading the
    pin's archive each time; when the archive went away mid-run, block 4 died (exit 2).  Once an
    engine's build is found, later asks in the process get it without the source; a build whose
    BUILD_OK has gone is planned again (and then the missing archive is named)."""
    from parity.llamacpp import build

    repo, pin, _ = upstream
    d = _localai_backend(tmp_path, pin)
    arc = _git_archive(repo, pin, tmp_path / "pin.tar.gz")
    prof = profile_from_dict({"sources": {"la": {"kind": "localai", "path": str(d), "archive": str(arc)}}, "engines": {"stock": {"source": "la"}}})
    eng = bind(prof, "stock")
    p = build.plan(eng)
    p.dir.mkdir(parents=True)
    (p.dir / "build.json").write_text('{"engine": "stock"}')
    (p.dir / build.OK_MARKER).write_text("")
    out = Output(json_mode=True)
    first = build.ensure_built(eng, LocalRunner(), out)
    assert first.cached and first.bin_dir == p.dir / "build" / "bin"
    arc.unlink()
    assert build.ensure_built(eng, LocalRunner(), out) == first  # the value, not the archive again
    with pytest.raises(UsageError, match="archive not found"):
        build.plan(eng)  # what every server start did before
    with pytest.raises(UsageError, match="archive not found"):  # another binding of the same engine resolves its own
        build.ensure_built(bind(profile_from_dict({"sources": {"la": {"kind": "localai", "path": str(d), "archive": str(arc)}},
                                                   "engines": {"stock": {"source": "la"}}}), "stock"), LocalRunner(), out)
    (p.dir / build.OK_MARKER).unlink()
    with pytest.raises(UsageError, match="archive not found"):
        build.ensure_built(eng, LocalRunner(), out)
