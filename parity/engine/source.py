"""Source kinds: git (url + pin), path, archive (+sha256), pypi-sdist (+sha256),
localai (a LocalAI backend dir: pin from its Makefile, series from patches/paged/)."""

from __future__ import annotations

import hashlib
import re
import shutil
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from parity.config import SourceConfig, cache_dir, expand_path
from parity.errors import InfraError, UsageError

_PIN = re.compile(r"^\s*LLAMA_VERSION\s*\??=\s*([0-9a-f]{7,40})\s*$", re.M)


@dataclass
class Source:
    kind: str
    identity: str  # cheap, stable identity for the cache key
    info: dict  # provenance for build.json
    series_dir: str | None = None  # localai: patches/paged


def read_localai_pin(backend_dir: str) -> str:
    mk = Path(backend_dir) / "Makefile"
    try:
        m = _PIN.search(mk.read_text())
    except OSError:
        raise UsageError(f"{backend_dir}: no Makefile to read LLAMA_VERSION from") from None
    if not m:
        raise UsageError(f"{mk}: no LLAMA_VERSION?=<sha> line")
    return m.group(1)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def _extract(archive: Path, dest: Path) -> None:
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


def describe(name: str, cfg: SourceConfig) -> Source:
    """Identity without touching the network or copying anything (fast)."""
    if cfg.kind == "pypi-sdist":
        return Source(cfg.kind, f"sdist:{cfg.sha256}:{cfg.subdir}", {"kind": cfg.kind, "package": cfg.package, "sha256": cfg.sha256, "subdir": cfg.subdir})
    if cfg.kind == "archive":
        return Source(cfg.kind, f"archive:{cfg.sha256}:{cfg.subdir}", {"kind": cfg.kind, "path": cfg.path, "sha256": cfg.sha256, "subdir": cfg.subdir})
    if cfg.kind == "git":
        return Source(cfg.kind, f"git:{cfg.pin}", {"kind": cfg.kind, "url": cfg.url, "pin": cfg.pin})
    if cfg.kind == "localai":
        pin = read_localai_pin(cfg.path)
        series = str(Path(cfg.path) / "patches" / "paged")
        return Source(cfg.kind, f"git:{pin}", {"kind": cfg.kind, "backend_dir": cfg.path, "url": cfg.url, "pin": pin}, series)
    # path: fingerprint of the tree's files (names, sizes, mtimes) -- cheap and catches edits
    root = Path(cfg.path)
    if not root.is_dir():
        raise UsageError(f"source {name}: path not found: {root}")
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if ".git" in p.parts or "build" in p.relative_to(root).parts[:1]:
            continue
        try:
            st = p.stat()
        except OSError:
            continue
        h.update(f"{p.relative_to(root)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return Source(cfg.kind, f"path:{root}:{h.hexdigest()[:16]}", {"kind": cfg.kind, "path": str(root)})


def materialize(name: str, cfg: SourceConfig, runner, out=None) -> Path:
    """A pristine, read-only-by-convention source tree on this machine."""
    root = cache_dir() / "sources"
    if cfg.kind == "path":
        return Path(cfg.path)
    if cfg.kind in ("pypi-sdist", "archive"):
        dest = root / cfg.sha256
        if not (dest / ".complete").exists():
            if cfg.kind == "archive":
                archive = Path(expand_path(cfg.path))
                if not archive.is_file():
                    raise UsageError(f"source {name}: archive not found: {archive}")
            else:
                archive = _download_sdist(cfg, runner, root / "downloads", out)
            got = _sha256(archive)
            if got != cfg.sha256:
                raise UsageError(f"source {name}: sha256 mismatch for {archive.name}: got {got}, expected {cfg.sha256}")
            shutil.rmtree(dest, ignore_errors=True)
            _extract(archive, dest)
            (dest / ".complete").write_text(got + "\n")
        tree = dest
        if cfg.subdir:
            tops = [p for p in dest.iterdir() if p.is_dir()]
            cand = [dest / cfg.subdir] + [t / cfg.subdir for t in tops]
            tree = next((c for c in cand if c.is_dir()), None)
            if tree is None:
                raise UsageError(f"source {name}: subdir {cfg.subdir!r} not found in the archive")
        return tree
    # git / localai: a bare-ish clone cache, then an exported tree of the pin
    pin = cfg.pin if cfg.kind == "git" else read_localai_pin(cfg.path)
    dest = root / f"git-{pin}"
    if (dest / ".complete").exists():
        return dest
    if not cfg.url:
        raise UsageError(f"source {name}: a url is needed to fetch llama.cpp at {pin}")
    clone = root / "clones" / hashlib.sha256(cfg.url.encode()).hexdigest()[:16]
    if not (clone / "HEAD").exists() and not (clone / ".git").exists():
        clone.parent.mkdir(parents=True, exist_ok=True)
        res = runner.run(["git", "clone", "--quiet", "--no-checkout", cfg.url, str(clone)], timeout=3600)
        if not res.ok:
            raise InfraError(f"source {name}: git clone {cfg.url} failed: {res.tail(2)}")
    have = runner.run(["git", "-C", str(clone), "cat-file", "-e", f"{pin}^{{commit}}"])
    if not have.ok:
        res = runner.run(["git", "-C", str(clone), "fetch", "--quiet", "origin", pin], timeout=3600)
        if not res.ok:
            raise InfraError(f"source {name}: pin {pin} not found in {cfg.url}: {res.tail(2)}")
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    res = runner.run(["git", "-C", str(clone), "--work-tree", str(dest), "checkout", pin, "--", "."], timeout=1800)
    if not res.ok:
        raise InfraError(f"source {name}: checkout of {pin} failed: {res.tail(2)}")
    (dest / ".complete").write_text(pin + "\n")
    return dest


def _download_sdist(cfg: SourceConfig, runner, dl: Path, out=None) -> Path:
    dl.mkdir(parents=True, exist_ok=True)
    pkg = cfg.package or ""
    if "==" not in pkg:
        raise UsageError(f"pypi-sdist source: package must be NAME==VERSION, got {pkg!r}")
    base = pkg.split("==")[0].replace("-", "_").lower()
    for p in dl.glob("*"):
        if p.name.lower().startswith(base) and p.name.endswith((".tar.gz", ".zip")) and _sha256(p) == cfg.sha256:
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
