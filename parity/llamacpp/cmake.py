"""The CMake/ninja tool: configure + build commands, and ninja progress parsing."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

BASE_FLAGS = [
    "-G",
    "Ninja",
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_TESTS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
]

_PROGRESS = re.compile(r"^\[(\d+)/(\d+)\]")


def cuda_flags(archs: str | None) -> list[str]:
    """CPU when archs is None; else the CUDA backend for those architectures
    (121 -> sm_121; 121a -> arch=compute_121a,code=[compute_121a,sm_121a])."""
    if not archs:
        return ["-DGGML_CUDA=OFF"]
    archs = ";".join(a.strip() for a in archs.split(";") if a.strip())
    return ["-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={archs}"]


def ccache_flags() -> list[str]:
    """C/C++ through ccache when it is installed (PARITY_CCACHE=0 turns it off): a build that
    differs from a cached one by a patch or two (a lever's arm, a bisection probe) recompiles
    only what the patch touched.  Not for nvcc: CUDA objects go through the plain compiler."""
    if os.environ.get("PARITY_CCACHE", "1") == "0" or not shutil.which("ccache"):
        return []
    return ["-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]


def ccache_env(builds_root: Path) -> dict[str, str]:
    """ccache's settings for builds under builds_root/<key>/{src,build}: paths relative to that
    root, so the same file in two build directories is one cache entry."""
    return {
        "CCACHE_DIR": str(builds_root.parent / "ccache"),
        "CCACHE_BASEDIR": str(builds_root),
        "CCACHE_NOHASHDIR": "1",
        "CCACHE_MAXSIZE": os.environ.get("CCACHE_MAXSIZE", "5G"),
    }


def configure_argv(src: str, build: str, archs: str | None, extra: list[str]) -> list[str]:
    return ["cmake", "-S", src, "-B", build, *BASE_FLAGS, *cuda_flags(archs), *ccache_flags(), *extra]


def build_argv(build: str, targets: list[str], jobs: int | None = None) -> list[str]:
    return ["cmake", "--build", build, "-j", str(jobs or os.cpu_count() or 2), "--target", *targets]


def parse_unused_variables(configure_output: str) -> list[str]:
    """Names under CMake's 'Manually-specified variables were not used by the project'
    warning: a -D flag this source does not know (a typo, or an option renamed upstream)."""
    lines = configure_output.splitlines()
    for i, ln in enumerate(lines):
        if "Manually-specified variables were not used by the project" in ln:
            names = []
            for nxt in lines[i + 1 :]:
                if not nxt.strip():
                    if names:
                        break
                    continue
                if not nxt.startswith("    ") or nxt.startswith("--"):
                    break
                names.append(nxt.strip())
            return names
    return []


def parse_progress(line: str) -> tuple[int, int] | None:
    """ninja's '[n/m] Building ...' -> (n, m)."""
    m = _PROGRESS.match(line.strip())
    return (int(m.group(1)), int(m.group(2))) if m else None
