"""Source kinds: git (url + pin), path, archive (+sha256), pypi-sdist (+sha256),
localai (a LocalAI backend dir: pin from its Makefile, series from patches/paged/; llama.cpp
at the pin from a url, a checkout holding the pin, or a `git archive` tarball of it)."""

from __future__ import annotations

import re
import shutil
import sys
from typing import Literal
from pathlib import Path

import msgspec

from parity.files import sha256, sha256_file
from parity.paths import cache_dir, expand_path
from parity.errors import ConfigError, InfraError, UsageError
from parity.filelock import locked
from parity.llamacpp import git as gitmod
from parity import redact

_PIN = re.compile(r"^\s*LLAMA_VERSION\s*\??=\s*([0-9a-f]{7,40})\s*$", re.M)


class SourceConfig(msgspec.Struct):
    kind: Literal["git", "path", "archive", "pypi-sdist", "localai"] = "path"
    url: str | None = None
    pin: str | None = None
    path: str | None = None
    sha256: str | None = None
    package: str | None = None  # pypi-sdist: "name==version"
    subdir: str | None = None  # pypi-sdist/archive: where llama.cpp sits inside
    checkout: str | None = None  # git/localai: an existing upstream clone holding the pin (instead of cloning url)
    fixups: str | None = None  # NNNN-*.patch applied to every engine of this source, stock too, after any series
    archive: str | None = None  # localai: llama.cpp at the pin as a `git archive` tarball (instead of url/checkout)


# kind -> the keys a source of that kind must give
REQUIRED = {"git": ("url", "pin"), "path": ("path",), "archive": ("path", "sha256"),
            "pypi-sdist": ("package", "sha256"), "localai": ("path",)}


def check_source(s: SourceConfig, label: str, key: str) -> None:
    """sources.NAME: the keys its kind needs; an archive of the pin only for localai, and only alone."""
    for attr in REQUIRED[s.kind]:
        if not getattr(s, attr):
            raise ConfigError(label, f"{key}.{attr}", f"required for a {s.kind} source")
    if s.archive and s.kind != "localai":
        raise ConfigError(label, f"{key}.archive",
                          f"only a localai source takes an archive of the pin (a {s.kind} source does not)")
    if s.archive and (s.url or s.checkout):
        raise ConfigError(label, key,
                          "give llama.cpp at the pin one way: archive, checkout or url (set the others to null)")


class Source(msgspec.Struct):
    kind: str
    identity: str  # cheap, stable identity for the cache key
    info: dict  # provenance for build.json
    series_dir: str | None = None  # localai: patches/paged


def localai_pin(name: str, cfg: SourceConfig) -> str:
    """The Makefile pin; a `pin` in the profile must agree with it (a silent bump would
    shift the tree out from under the series)."""
    pin = read_localai_pin(cfg.path)
    if cfg.pin and not (pin.startswith(cfg.pin) or cfg.pin.startswith(pin)):
        raise UsageError(f"source {name}: Makefile LLAMA_VERSION {pin} differs from the profile's pin {cfg.pin}")
    return pin


def archive_commit(archive: str) -> str | None:
    """The commit id `git archive` writes into a tarball's pax global header (what
    `git get-tar-commit-id` prints); None for an archive that has none (or a zip)."""
    import tarfile  # stdlib, but 4 ms at every start for a rare path: imported here

    try:
        with tarfile.open(archive) as t:
            return t.pax_headers.get("comment") or None
    except FileNotFoundError:
        raise UsageError(f"archive not found: {archive}") from None
    except (tarfile.TarError, OSError):
        return None


def localai_archive_pin(name: str, cfg: SourceConfig, pin: str) -> None:
    """Refuse an archive that is not llama.cpp at the Makefile's pin."""
    got = archive_commit(cfg.archive)
    if got is None:
        raise UsageError(f"source {name}: {cfg.archive} carries no commit id (not made by `git archive`), so it cannot be checked against the pin {pin}")
    if got != pin:
        raise UsageError(f"source {name}: Makefile LLAMA_VERSION {pin} differs from the archive's commit {got} ({cfg.archive})")


def read_localai_pin(backend_dir: str) -> str:
    mk = Path(backend_dir) / "Makefile"
    try:
        m = _PIN.search(mk.read_text())
    except OSError:
        raise UsageError(f"{backend_dir}: no Makefile to read LLAMA_VERSION from") from None
    if not m:
        raise UsageError(f"{mk}: no LLAMA_VERSION?=<sha> line")
    return m.group(1)


def _extract(archive: Path, dest: Path) -> None:
    import tarfile
    import zipfile

    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as z:
            z.extractall(tmp)
    else:
        with tarfile.open(archive) as t:
            t.extractall(tmp, filter="tar")
    tmp.rename(dest)


def _shown(url: str | None) -> str | None:
    """The url as provenance records it (builds.json, the build cache): without its credentials."""
    return None if url is None else redact.text(url)


def describe(name: str, cfg: SourceConfig) -> Source:
    """Identity without touching the network or copying anything (fast)."""
    if cfg.kind == "pypi-sdist":
        return Source(cfg.kind, f"sdist:{cfg.sha256}:{cfg.subdir}", {"kind": cfg.kind, "package": cfg.package, "sha256": cfg.sha256, "subdir": cfg.subdir})
    if cfg.kind == "archive":
        return Source(cfg.kind, f"archive:{cfg.sha256}:{cfg.subdir}", {"kind": cfg.kind, "path": cfg.path, "sha256": cfg.sha256, "subdir": cfg.subdir})
    if cfg.kind == "git":
        return Source(cfg.kind, f"git:{cfg.pin}", {"kind": cfg.kind, "url": _shown(cfg.url), "checkout": cfg.checkout, "pin": cfg.pin})
    if cfg.kind == "localai":
        pin = localai_pin(name, cfg)
        series = str(Path(cfg.path) / "patches" / "paged")
        info = {"kind": cfg.kind, "backend_dir": cfg.path, "url": _shown(cfg.url), "checkout": cfg.checkout, "pin": pin}
        if cfg.archive:
            localai_archive_pin(name, cfg, pin)
            info["archive"] = cfg.archive
        # the pin's content, however it is obtained: the identity is the pin
        return Source(cfg.kind, f"git:{pin}", info, series)
    # path: fingerprint of the tree's files (names, sizes, mtimes) -- cheap and catches edits
    root = Path(cfg.path)
    if not root.is_dir():
        raise UsageError(f"source {name}: path not found: {root}")
    h = sha256()
    skip = set(copy_ignore(root)(str(root), [p.name for p in root.iterdir()]))
    for p in sorted(root.rglob("*")):
        if p.relative_to(root).parts[0] in skip:
            continue
        try:
            st = p.stat()
        except OSError:
            continue
        h.update(f"{p.relative_to(root)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return Source(cfg.kind, f"path:{root}:{h.hexdigest()[:16]}", {"kind": cfg.kind, "path": str(root)})


def copy_ignore(root: Path):
    """shutil.copytree ignore: the top level's .git, our .complete marker, and CMake build
    dirs (a dir holding CMakeCache.txt) -- never a source file, whatever its name; and, at any
    depth, __pycache__ (bytecode a tree's own Python tools left there would change its tree id)."""
    root = Path(root)

    def ignore(d, names):
        junk = [n for n in names if n == "__pycache__"]
        if Path(d) != root:
            return junk
        return junk + [n for n in names if n in (".git", ".complete") or (root / n / "CMakeCache.txt").exists()]

    return ignore


def copy_tree(src: Path, dest: Path) -> None:
    shutil.copytree(src, dest, symlinks=True, ignore=copy_ignore(src))


def materialize(name: str, cfg: SourceConfig, runner, out=None) -> Path:
    """A pristine, read-only-by-convention source tree on this machine."""
    if cfg.kind == "path":
        if not Path(cfg.path).is_dir():
            raise UsageError(f"source {name}: path not found: {cfg.path}")
        return Path(cfg.path)
    root = cache_dir() / "sources"
    if cfg.kind in ("pypi-sdist", "archive"):
        dest = root / cfg.sha256
        with locked(root / f"{cfg.sha256}.lock"):
            if not (dest / ".complete").exists():
                _unpack_checked(name, cfg, runner, root, dest, out)
        return _subdir(name, cfg, dest)
    pin = cfg.pin if cfg.kind == "git" else localai_pin(name, cfg)
    dest = root / f"git-{pin}"
    with locked(root / f"git-{pin}.lock"):
        if not (dest / ".complete").exists():
            if cfg.kind == "localai" and cfg.archive:
                _unpack_pin_archive(name, cfg, pin, dest)
            else:
                _export_pin(name, cfg, pin, runner, root, dest, out)
    return dest


def _unpack_pin_archive(name, cfg, pin: str, dest: Path) -> None:
    """A `git archive` of the pin (one top folder) unpacked as the pin's tree."""
    localai_archive_pin(name, cfg, pin)
    shutil.rmtree(dest, ignore_errors=True)
    tmp = dest.with_name(dest.name + ".unpack")
    shutil.rmtree(tmp, ignore_errors=True)
    _extract(Path(cfg.archive), tmp)
    tops = list(tmp.iterdir())
    top = tops[0] if len(tops) == 1 and tops[0].is_dir() else tmp
    top.rename(dest)
    shutil.rmtree(tmp, ignore_errors=True)
    (dest / ".complete").write_text(pin + "\n")


def _unpack_checked(name, cfg, runner, root: Path, dest: Path, out) -> None:
    if cfg.kind == "archive":
        archive = Path(expand_path(cfg.path))
        if not archive.is_file():
            raise UsageError(f"source {name}: archive not found: {archive}")
    else:
        archive = _download_sdist(cfg, runner, root / "downloads", out)
    got = sha256_file(archive)
    if got != cfg.sha256:
        raise UsageError(f"source {name}: sha256 mismatch for {archive.name}: got {got}, expected {cfg.sha256}")
    shutil.rmtree(dest, ignore_errors=True)
    _extract(archive, dest)
    (dest / ".complete").write_text(got + "\n")


def _subdir(name, cfg, dest: Path) -> Path:
    if not cfg.subdir:
        return dest
    tops = [p for p in dest.iterdir() if p.is_dir()]
    cand = [dest / cfg.subdir] + [t / cfg.subdir for t in tops]
    tree = next((c for c in cand if c.is_dir()), None)
    if tree is None:
        raise UsageError(f"source {name}: subdir {cfg.subdir!r} not found in the archive")
    return tree


def _export_pin(name, cfg, pin: str, runner, root: Path, dest: Path, out) -> None:
    """Export the pin's files from a clone (ours, or the user's `checkout`) without
    touching that clone's index or work tree (a throwaway GIT_INDEX_FILE)."""
    if cfg.checkout:
        repo = Path(cfg.checkout)
        if not (repo / ".git").exists() and not (repo / "HEAD").exists():
            raise UsageError(f"source {name}: checkout {repo} is not a git repository")
    else:
        if not cfg.url:
            raise UsageError(f"source {name}: a url or a checkout is needed to fetch llama.cpp at {pin}")
        repo = root / "clones" / sha256(cfg.url).hexdigest()[:16]
        if not (repo / "HEAD").exists():
            repo.parent.mkdir(parents=True, exist_ok=True)
            if out:
                out.info(f"cloning {cfg.url}")
            res = gitmod.clone_bare(runner, cfg.url, repo)
            if not res.ok:
                raise InfraError(f"source {name}: git clone {cfg.url} failed: {res.tail(2)}")
    if not gitmod.has_commit(runner, repo, pin):
        if cfg.checkout:
            raise UsageError(f"source {name}: pin {pin} is not in checkout {repo} (git fetch it there)")
        res = gitmod.fetch_commit(runner, repo, pin)
        if not res.ok:
            raise InfraError(f"source {name}: pin {pin} not found in {cfg.url}: {res.tail(2)}")
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    index = root / f"git-{pin}.index"
    res = gitmod.export_commit(runner, repo, pin, dest, index)
    index.unlink(missing_ok=True)
    if not res.ok:
        raise InfraError(f"source {name}: checkout of {pin} failed: {res.tail(2)}")
    (dest / ".complete").write_text(pin + "\n")


def _download_sdist(cfg: SourceConfig, runner, dl: Path, out=None) -> Path:
    dl.mkdir(parents=True, exist_ok=True)
    pkg = cfg.package or ""
    if "==" not in pkg:
        raise UsageError(f"pypi-sdist source: package must be NAME==VERSION, got {pkg!r}")
    base = pkg.split("==")[0].replace("-", "_").lower()
    for p in dl.glob("*"):
        if p.name.lower().startswith(base) and p.name.endswith((".tar.gz", ".zip")) and sha256_file(p) == cfg.sha256:
            return p
    if out:
        out.info(f"downloading {pkg} sdist")
    res = runner.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", pkg, "-d", str(dl)], timeout=1800)
    if not res.ok:
        raise InfraError(f"pip download {pkg} failed: {res.tail(3)}")
    for p in dl.glob("*"):
        if p.name.lower().startswith(base) and p.name.endswith((".tar.gz", ".zip")):
            return p
    raise InfraError(f"pip download {pkg}: no sdist file appeared in {dl}")


def add_pinned_source(profile, engine: str, repo: str, commit: str) -> str:
    """Register (in this profile object) a git source: llama.cpp at `commit` of the checkout or
    bare clone `repo`, with the engine's source's fixups; returns its name.  What a build at
    another pin (a lever arm, a bisection probe over the pin) builds from."""

    fixups = profile.sources[profile.engine(engine).source].fixups if profile.engine(engine).source else None
    name = f"pin-{commit[:12]}"
    profile.sources[name] = SourceConfig(kind="git", checkout=str(repo), pin=commit, fixups=fixups)
    return name
