"""Compile the CUPTI injection library (parity/tracer/cupti/parity_cupti.cpp) once per source,
CUPTI and compiler, cached under <cache>/tracer/cupti-<key>/ like parity's other builds.

The CUPTI library is copied beside the injection library and found through $ORIGIN, so a
cached build keeps working when the wheel it came from is gone."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from parity.paths import cache_dir
from parity.errors import InfraError, UsageError
from parity.tracer.locate import Cupti, cuda_header_dir
from parity.filelock import locked

SOURCE = Path(__file__).resolve().parent / "cupti" / "parity_cupti.cpp"
LIB_NAME = "libparity_cupti.so"
FORMAT = 1  # the trace format the source writes (its "# parity-cupti N" line); trace.py reads it


@dataclass
class Built:
    library: str  # the injection library: CUDA_INJECTION64_PATH
    key: str
    cupti: dict
    compiler: str
    cached: bool  # found built, not compiled by this call
    argv: list[str]


def compiler(runner) -> tuple[str, str]:
    """(path, first line of --version) of $CXX, else g++, else c++."""
    for name in [os.environ.get("CXX"), "g++", "c++"]:
        path = name and (runner.which(name) if "/" not in name else (name if os.path.isfile(name) else None))
        if path:
            res = runner.run([path, "--version"], timeout=30)
            return path, (res.stdout.splitlines() or ["?"])[0].strip()
    raise UsageError("building the CUPTI tracer needs a C++ compiler (g++ or $CXX)")


def compile_argv(cxx: str, cupti: Cupti, cuda_include: str, out: str) -> list[str]:
    return [cxx, "-O2", "-fPIC", "-shared", "-std=c++17", "-Wall", f"-I{cupti.include}", f"-I{cuda_include}", str(SOURCE), "-o", out,
            str(Path(out).parent / Path(cupti.library).name), "-Wl,-rpath,$ORIGIN", "-ldl", "-lpthread"]  # fmt: skip


def first_errors(text: str, n: int = 2) -> str:
    """The compiler's first error lines, joined on one line (else its last line)."""
    errs = [line.strip() for line in text.splitlines() if " error: " in line or line.startswith("error")]
    return " | ".join(errs[:n]) if errs else (text.strip().splitlines() or ["no output"])[-1]


def build_key(cupti: Cupti, compiler_id: str, cuda_include: str) -> str:
    h = hashlib.sha256(SOURCE.read_bytes())
    for part in (cupti.version, str(cupti.api_version), compiler_id, (Path(cuda_include) / "cuda.h").read_bytes()[:4096].hex()):
        h.update(b"\0" + str(part).encode())
    return h.hexdigest()[:20]


def build_dir(key: str) -> Path:
    return cache_dir() / "tracer" / f"cupti-{key}"


def ensure_built(runner, cupti: Cupti, cuda_include: str | None = None, out=None) -> Built:
    """The injection library for this CUPTI: cached, or compiled now (under a file lock, so two
    parity processes compile it once)."""

    if getattr(runner, "host", "local") != "local":
        raise UsageError(f"the CUPTI tracer is built and loaded on the machine that runs the workload; run parity on {runner.host} (parity remote ships the command)")
    cuda_include = cuda_include or cuda_header_dir()
    cxx, cxx_id = compiler(runner)
    key = build_key(cupti, cxx_id, cuda_include)
    d = build_dir(key)
    lib = d / LIB_NAME
    with locked(d.parent / f"cupti-{key}.lock"):
        if lib.is_file() and (d / "build.json").is_file():
            meta = json.loads((d / "build.json").read_text())
            return Built(str(lib), key, cupti.to_dict(), cxx_id, True, meta.get("argv", []))
        tmp = d.with_name(d.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        shutil.copy2(cupti.library, tmp / Path(cupti.library).name)
        argv = compile_argv(cxx, cupti, cuda_include, str(tmp / LIB_NAME))
        if out:
            out.info(f"[tracer] compiling the CUPTI injection library against {cupti.source}")
        res = runner.run(argv, timeout=600)
        if not res.ok:
            shutil.rmtree(tmp, ignore_errors=True)
            raise InfraError(f"compiling the CUPTI tracer failed (exit {res.rc}) against {cupti.source} and {cuda_include}/cuda.h: {first_errors(res.stdout + res.stderr)}")
        (tmp / "build.json").write_text(json.dumps({"key": key, "cupti": cupti.to_dict(), "compiler": cxx_id, "cuda_include": cuda_include, "argv": argv, "format": FORMAT}, indent=1))
        shutil.rmtree(d, ignore_errors=True)
        tmp.rename(d)
        argv = [a.replace(str(tmp), str(d)) for a in argv]
    return Built(str(lib), key, cupti.to_dict(), cxx_id, False, argv)


def injection_env(library: str, out_pattern: str, buffer_kb: int | None = None, max_buffers: int | None = None) -> dict[str, str]:
    """The environment that loads the tracer into a CUDA process: out_pattern may hold %p (pid)."""
    env = {"CUDA_INJECTION64_PATH": library, "PARITY_CUPTI_OUT": out_pattern}
    if buffer_kb:
        env["PARITY_CUPTI_BUFFER_KB"] = str(buffer_kb)
    if max_buffers:
        env["PARITY_CUPTI_MAX_BUFFERS"] = str(max_buffers)
    return env
