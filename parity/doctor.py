"""`parity doctor`: what this machine has for each capability parity uses.

Each check returns one row: ok / missing / degraded, what was found, and the
consequence in words.  Version parsers are pure (tested on captured output in
tests/data/doctor/); the checks run tools through a Runner.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import asdict, dataclass
from parity.engines.bound import bind_all
from parity.engines.base import DoctorRow
from parity.gpu import docker, nvidia_smi
from parity.gpu.hardware import classify

OK, MISSING, DEGRADED = "ok", "missing", "degraded"
MIN_PYTHON = (3, 11)
MIN_CMAKE = (3, 14)  # llama.cpp's cmake_minimum_required


@dataclass
class Check:
    name: str
    status: str  # ok | missing | degraded
    found: str  # version / path / what answered
    consequence: str = ""  # what does not work, in words ("" when ok)


# --------------------------------------------------------------------------- parsers


def parse_version(text: str) -> str | None:
    """The first dotted version number in a tool's --version output."""
    m = re.search(r"(?<![\w.])v?(\d+\.\d+(?:\.\d+)*)", text)
    return m.group(1) if m else None


def parse_nvcc_version(text: str) -> str | None:
    """`nvcc --version` -> "13.0.88" (from 'release 13.0, V13.0.88')."""
    m = re.search(r"release\s+[\d.]+,\s*V([\d.]+)", text)
    if m:
        return m.group(1)
    m = re.search(r"release\s+([\d.]+)", text)
    return m.group(1) if m else None


def parse_gpu_archs(text: str) -> list[str]:
    """`nvcc --list-gpu-arch` -> ["75", "80", ..., "121"] (compute_NN lines, in nvcc's order)."""
    return re.findall(r"^\s*compute_(\d+[a-z]?)\s*$", text, re.M)


def parse_openssh_version(text: str) -> str | None:
    """`ssh -V` / `sshd -V` (stderr) -> "9.2p1" / "9.2"."""
    m = re.search(r"OpenSSH_([\w.]+)", text)
    return m.group(1) if m else None


def wanted_archs(cuda_archs: str) -> list[str]:
    """Profile cuda_archs "90;121a-real" -> ["90", "121"] (the compute_NN nvcc must know)."""
    out = []
    for part in cuda_archs.split(";"):
        m = re.match(r"\s*(\d+)", part)
        if m:
            out.append(m.group(1))
    return out


def _tuple(version: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version or "")[:3])


# --------------------------------------------------------------------------- checks


def _first_line(res) -> str:
    text = (res.stdout or res.stderr).strip()
    return text.splitlines()[0] if text else ""


def _tool(runner, name: str, argv: list[str], purpose: str, parse=parse_version, missing_status: str = MISSING) -> Check:
    path = runner.which(name)
    if not path:
        return Check(name, missing_status, "not found on PATH", purpose)
    res = runner.run(argv, timeout=60)
    if not res.ok:
        return Check(name, DEGRADED, f"{path}: `{' '.join(argv)}` exited {res.rc}: {res.tail(1)}", purpose)
    version = parse(res.stdout + res.stderr)
    return Check(name, OK, f"{version or _first_line(res)} ({path})")


def check_python() -> Check:
    v = ".".join(str(x) for x in sys.version_info[:3])
    if sys.version_info[:2] < MIN_PYTHON:
        return Check("python", DEGRADED, f"{v} ({sys.executable})", f"parity needs Python >= {'.'.join(map(str, MIN_PYTHON))}")
    return Check("python", OK, f"{v} ({sys.executable})")


def check_package(module: str, dist: str, purpose: str) -> Check:
    if importlib.util.find_spec(module) is None:
        return Check(dist, MISSING, "not installed", purpose)
    from importlib.metadata import PackageNotFoundError, version

    try:
        return Check(dist, OK, version(dist))
    except PackageNotFoundError:
        return Check(dist, OK, "installed")


def check_cmake(runner) -> Check:
    c = _tool(runner, "cmake", ["cmake", "--version"], "cannot build llama.cpp engines (give engines.X.bin_dir with prebuilt binaries instead)")
    if c.status == OK and _tuple(c.found) < MIN_CMAKE:
        return Check("cmake", DEGRADED, c.found, f"llama.cpp needs cmake >= {'.'.join(map(str, MIN_CMAKE))}: builds will fail to configure")
    return c


def check_compilers(runner) -> Check:
    found, missing = [], []
    for name in ("cc", "c++"):
        path = runner.which(name)
        if not path:
            missing.append(name)
            continue
        res = runner.run([name, "--version"], timeout=30)
        found.append(f"{name} {parse_version(_first_line(res)) or '?'}" if res.ok else f"{name} (--version exited {res.rc})")
    if missing:
        return Check("compilers", MISSING, ", ".join(found) or "none", f"no {' / '.join(missing)}: cannot build llama.cpp engines")
    return Check("compilers", OK, ", ".join(found))


def check_nvcc(runner, profile=None, gpu_cc: str | None = None) -> Check:
    path = runner.which("nvcc")
    if not path:
        return Check("nvcc", MISSING, "not found on PATH", "CPU builds only: engines with cuda_archs cannot build here")
    res = runner.run(["nvcc", "--version"], timeout=60)
    version = parse_nvcc_version(res.stdout) if res.ok else None
    arch_res = runner.run(["nvcc", "--list-gpu-arch"], timeout=60)
    archs = parse_gpu_archs(arch_res.stdout) if arch_res.ok else []
    found = f"{version or '?'} ({path}); archs: {' '.join(archs) or 'unknown'}"
    if not res.ok or not archs:
        return Check("nvcc", DEGRADED, found, "nvcc did not answer --version/--list-gpu-arch: CUDA builds may fail")
    problems = []
    for ename, e in (profile.engines.items() if profile is not None else []):
        for a in wanted_archs(getattr(e, "cuda_archs", None) or ""):
            if a not in archs:
                problems.append(f"engine {ename} wants sm_{a}, this nvcc cannot compile it")
    if gpu_cc:
        a = gpu_cc.replace(".", "")
        if a not in archs:
            problems.append(f"the GPU is sm_{a}, this nvcc cannot compile for it")
    if problems:
        return Check("nvcc", DEGRADED, found, "; ".join(problems))
    return Check("nvcc", OK, found)


def gpu_info(runner) -> tuple[list[dict], str]:
    """(gpus, source): NVML first (local only), then nvidia-smi."""

    notes = []
    if runner.host == "local":
        gpus, note = nvidia_smi.nvml_gpus()
        if gpus:
            return gpus, note
        notes.append(note)

    smi, _cuda, note = nvidia_smi.inventory(runner)
    notes.append(note)
    return [{"name": g.name, "driver": g.driver, "compute_cap": g.compute_cap} for g in smi], "; ".join(notes) if not smi else note


def check_gpu(gpus: list[dict], source: str) -> Check:
    if not gpus:
        return Check("gpu", MISSING, source, "no GPU: CPU builds and CPU smoke runs only; GPU lock idle checks follow lock.nvidia_smi_missing")

    desc = "; ".join(f"{g['name']} (cc {g['compute_cap'] or '?'}, {classify(g['compute_cap'])}), driver {g['driver']}" for g in gpus)
    return Check("gpu", OK, f"{desc} via {source}")


def check_docker(runner, profile=None) -> Check:
    st = docker.running(runner)
    if st.state == "no-cli":
        return Check("docker", MISSING, "not found on PATH", "the idle preflight cannot see docker workers (fine when none run here)")
    if st.state == "no-daemon":
        policy = profile.lock.docker_no_daemon if profile is not None else "idle"
        return Check("docker", DEGRADED, f"client only: {st.note}", f"no daemon: the idle preflight counts docker as {policy} (lock.docker_no_daemon)")
    if st.state != "ok":
        return Check("docker", DEGRADED, st.note, "docker ps failed: the idle preflight cannot see docker workers")
    return Check("docker", OK, f"daemon up, {len(st.containers)} running container(s)")


def check_vllm(runner, profile=None) -> list[Check]:
    """What the profile's engines need, as each kind says (vLLM: `vllm_bin: auto` is the cached CPU
    venv installed on the first real run, a path is that binary); no such engine: vllm on PATH."""

    purpose = "vllm engines cannot start here (llama.cpp-only comparisons)"
    engines = bind_all(profile, profile.engines) if profile is not None else {}
    found = [(n, e.kind, row) for n, e in engines.items() for row in e.doctor(runner)]
    if not found or runner.host != "local":
        return [_tool(runner, "vllm", ["vllm", "--version"], purpose)]
    checks = []
    for name, kind, row in found:
        label = kind.name if sum(1 for _, k, _ in found if k is kind) == 1 else f"{kind.name} ({name})"
        if isinstance(row, DoctorRow):
            checks.append(Check(label, row.status, row.found, row.consequence))
            continue
        c = _tool(runner, row.binary, row.argv, row.purpose)
        checks.append(Check(label, c.status, c.found, c.consequence))
    return checks


def check_sshd(runner) -> Check:
    path = runner.which("sshd") or next((p for p in ("/usr/sbin/sshd", "/usr/local/sbin/sshd") if runner.exists(p)), None)
    if not path:
        return Check("sshd", MISSING, "not found", "the SSH runner's tests (sshd on 127.0.0.1) cannot run here")
    res = runner.run([path, "-V"], timeout=30)
    version = parse_openssh_version(res.stdout + res.stderr)
    return Check("sshd", OK, f"OpenSSH {version or '?'} ({path})")


def run_checks(runner, profile=None) -> list[Check]:
    gpus, source = gpu_info(runner)
    gpu_cc = gpus[0]["compute_cap"] if gpus else None
    return [
        check_python(),
        check_package("gguf", "gguf", "cannot synthesize tiny GGUF models (models with a synth: spec)"),
        check_package("paramiko", "paramiko", "--host remote runs are unavailable (pip install paramiko)"),
        check_package("pynvml", "nvidia-ml-py", "GPU queries fall back to nvidia-smi"),
        check_cmake(runner),
        _tool(runner, "ninja", ["ninja", "--version"], "cannot build llama.cpp engines (the build uses the Ninja generator)"),
        check_compilers(runner),
        check_nvcc(runner, profile, gpu_cc),
        check_gpu(gpus, source),
        _tool(runner, "nsys", ["nsys", "--version"], "`parity profile` cannot capture decode profiles (needs nsys --cuda-graph-trace=node)"),
        *check_vllm(runner, profile),
        check_docker(runner, profile),
        _tool(runner, "ssh", ["ssh", "-V"], "--host remote runs are unavailable", parse=parse_openssh_version),
        check_sshd(runner),
    ]


def report(checks: list[Check]) -> dict:
    counts = {s: sum(c.status == s for c in checks) for s in (OK, DEGRADED, MISSING)}
    return {"checks": [asdict(c) for c in checks], "summary": counts}


def diagnose(ctx) -> dict:
    """`parity doctor`: every capability check, as plain data."""
    return report(run_checks(ctx.runner, ctx.profile))
