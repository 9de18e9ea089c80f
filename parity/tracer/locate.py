"""Where the CUPTI headers and library come from: a configured root, the CUDA toolkit's
extras/CUPTI, an installed nvidia-cuda-cupti wheel, or that wheel fetched into the cache.

The CUPTI must match the CUDA the driver runs (nvidia-smi's "CUDA Version", major.minor):
CUPTI newer than the driver does not load its records, and 13.4's headers need 13.4's cuda.h
(seen on the lent H100: they do not compile against CUDA 13.0).  PyPI names the wheel
`nvidia-cuda-cupti` from CUDA 13 on (files under nvidia/cu13/) and `nvidia-cuda-cupti-cu12`
before (nvidia/cuda_cupti/)."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from parity.paths import cache_dir
from parity.errors import UsageError

ENV_ROOT = "PARITY_CUPTI_ROOT"
_API_VERSION = re.compile(r"#define\s+CUPTI_API_VERSION\s+(\d+)")
_CUDA_VERSION = re.compile(r"#define\s+CUDA_VERSION\s+(\d+)")


@dataclass
class Cupti:
    include: str  # directory holding cupti.h
    library: str  # the libcupti.so.N file
    version: str  # "13.0.85" (wheel) or "13.0" (toolkit); what the build cache keys on
    api_version: int | None  # CUPTI_API_VERSION of the headers
    source: str  # where it was found, in words

    def to_dict(self) -> dict:
        return asdict(self)


def wheel_name(cuda: str) -> str:
    """nvidia-cuda-cupti (CUDA >= 13) or nvidia-cuda-cupti-cu12 (CUDA 12)."""
    major = int(cuda.split(".")[0])
    return "nvidia-cuda-cupti" if major >= 13 else f"nvidia-cuda-cupti-cu{major}"


def major_minor(version: str | None) -> str | None:
    m = re.match(r"(\d+)\.(\d+)", version or "")
    return f"{m.group(1)}.{m.group(2)}" if m else None


def api_version(include: str | Path) -> int | None:
    try:
        m = _API_VERSION.search((Path(include) / "cupti_version.h").read_text(errors="replace"))
    except OSError:
        return None
    return int(m.group(1)) if m else None


def from_root(root: str | Path, version: str | None, source: str) -> Cupti | None:
    """A CUPTI under root: include/cupti.h (any depth below root) and a libcupti.so.N beside it."""
    root = Path(root)
    heads = sorted(root.glob("include/cupti.h")) or sorted(root.glob("**/include/cupti.h"))
    for h in heads:
        base = h.parent.parent
        libs = sorted(p for d in ("lib64", "lib") for p in (base / d).glob("libcupti.so.*") if re.fullmatch(r"libcupti\.so\.\d+", p.name))
        if libs:
            return Cupti(str(h.parent), str(libs[-1]), version or "unknown", api_version(h.parent), source)
    return None


def toolkit_roots() -> list[Path]:
    """CUDA toolkits to look in: $CUDA_HOME, $CUDA_PATH, the nvcc on PATH, /usr/local/cuda."""
    import shutil

    out = [Path(os.environ[v]) for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    nvcc = shutil.which("nvcc")
    if nvcc:
        out.append(Path(os.path.realpath(nvcc)).parent.parent)
    out.append(Path("/usr/local/cuda"))
    seen, uniq = set(), []
    for p in out:
        r = os.path.realpath(p)
        if r not in seen:
            seen.add(r)
            uniq.append(p)
    return uniq


def toolkit_version(root: Path) -> str | None:
    """The toolkit's CUDA version from include/cuda.h (13000 -> "13.0")."""
    try:
        m = _CUDA_VERSION.search((root / "include" / "cuda.h").read_text(errors="replace"))
    except OSError:
        return None
    return f"{int(m.group(1)) // 1000}.{int(m.group(1)) % 1000 // 10}" if m else None


def cuda_header_dir() -> str:
    """The include dir with cuda.h that the injection library compiles against."""
    for root in toolkit_roots():
        if (root / "include" / "cuda.h").is_file():
            return str(root / "include")
    raise UsageError("building the CUPTI tracer needs cuda.h of a CUDA toolkit (none under $CUDA_HOME, the nvcc on PATH or /usr/local/cuda): set CUDA_HOME")


def installed_wheel(cuda: str) -> Cupti | None:
    """The nvidia-cuda-cupti distribution of this Python (pip's --target dirs on PYTHONPATH too)."""
    from importlib import metadata

    name = wheel_name(cuda)
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None
    if major_minor(dist.version) != major_minor(cuda):
        return None
    top = Path(str(dist.locate_file("nvidia")))
    return from_root(top, dist.version, f"{name} {dist.version} installed at {top}") if top.is_dir() else None


def cache_root() -> Path:
    return cache_dir() / "cupti"


def cached_wheel(cuda: str) -> Cupti | None:
    """A wheel fetched earlier: <cache>/cupti/<name>-<version>/ (newest patch release first)."""
    name = wheel_name(cuda).replace("-", "_")
    found = []
    for d in cache_root().glob(f"{name}-*"):
        v = d.name[len(name) + 1 :]
        if d.is_dir() and major_minor(v) == major_minor(cuda):
            found.append((tuple(int(x) for x in re.findall(r"\d+", v)), v, d))
    for _, v, d in sorted(found, reverse=True):
        c = from_root(d, v, f"{wheel_name(cuda)} {v} from the cache ({d})")
        if c:
            return c
    return None


def pip_download_argv(cuda: str, dest: str) -> list[str]:
    mm = major_minor(cuda)
    return [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", dest, f"{wheel_name(cuda)}=={mm}.*"]


def fetch_wheel(runner, cuda: str) -> Cupti:
    """pip download the wheel for this CUDA major.minor into the cache and unpack it there."""
    import zipfile

    wheels = cache_root() / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    argv = pip_download_argv(cuda, str(wheels))
    res = runner.run(argv, timeout=600)
    mm = major_minor(cuda)
    prefix = wheel_name(cuda).replace("-", "_") + "-"
    got = sorted((w for w in wheels.glob(prefix + "*.whl") if major_minor(w.name[len(prefix) :]) == mm), key=lambda w: w.stat().st_mtime)
    if not res.ok or not got:
        raise UsageError(f"no CUPTI for CUDA {mm}: not in the toolkit (extras/CUPTI), not installed, and `{' '.join(argv[2:])}` failed (exit {res.rc}: {res.tail(1).strip()}); "
                         f"install {wheel_name(cuda)}=={mm}.* (pip) or point profiling.cupti / ${ENV_ROOT} at a CUPTI with include/ and lib/")  # fmt: skip
    whl = got[-1]
    version = whl.name[len(prefix) :].split("-")[0]
    dest = cache_root() / f"{prefix}{version}"
    if not dest.is_dir():
        tmp = dest.with_name(dest.name + f".tmp{os.getpid()}")
        with zipfile.ZipFile(whl) as z:
            z.extractall(tmp)
        for f in tmp.rglob("*.so*"):
            f.chmod(0o755)
        tmp.rename(dest)
    c = from_root(dest, version, f"{wheel_name(cuda)} {version} fetched with pip into {dest}")
    if c is None:
        raise UsageError(f"{whl}: no include/cupti.h and lib/libcupti.so.N in the wheel")
    return c


def find_cupti(cuda: str | None, runner=None, configured: str | None = None, fetch: bool = True) -> Cupti:
    """The CUPTI to build against, in order: configured root (profiling.cupti or $PARITY_CUPTI_ROOT),
    the toolkit's extras/CUPTI (when the toolkit is not newer than the driver's CUDA), an
    installed wheel of the driver's CUDA major.minor, one in the cache, one fetched with pip."""
    root = configured or os.environ.get(ENV_ROOT)
    if root:
        c = from_root(root, None, f"configured ({root})")
        if c is None:
            raise UsageError(f"CUPTI root {root}: no include/cupti.h with a lib/ or lib64/libcupti.so.N beside it")
        c.version = f"api{c.api_version}" if c.api_version else "configured"
        return c
    mm = major_minor(cuda)
    for tk in toolkit_roots():
        v = toolkit_version(tk)
        if (tk / "extras" / "CUPTI").is_dir() and (mm is None or (v and tuple(map(int, v.split("."))) <= tuple(map(int, mm.split("."))))):
            c = from_root(tk / "extras" / "CUPTI", v, f"CUDA {v} toolkit ({tk}/extras/CUPTI)")
            if c:
                return c
    if mm is None:
        raise UsageError("no CUPTI in a CUDA toolkit, and the driver's CUDA version is unknown (nvidia-smi): set profiling.cupti or $PARITY_CUPTI_ROOT")
    c = installed_wheel(mm) or cached_wheel(mm)
    if c:
        return c
    if not fetch or runner is None:
        raise UsageError(f"no CUPTI for CUDA {mm} (toolkit extras/CUPTI, {wheel_name(mm)} installed or cached): install {wheel_name(mm)}=={mm}.* or set profiling.cupti")
    return fetch_wheel(runner, mm)
