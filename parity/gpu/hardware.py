"""GPU inventory and hardware_class, written to hardware.txt/json before any server starts
(seed 000_* Phase 24: GB10/workstation Blackwell numbers are not datacenter-Blackwell evidence)."""

from __future__ import annotations

from parity.gpu import nvidia_smi
from parity.errors import UsageError
from parity.files import atomic_write_json, atomic_write_text
from parity.gpu.bandwidth import write_bandwidth

# compute-capability major -> class; 8.x and 7.x split on the minor below
_MAJOR = {12: "gb10_or_workstation_blackwell", 11: "thor_blackwell", 10: "datacenter_blackwell", 9: "hopper"}
_MINOR = {(8, 9): "ada", (8, 0): "ampere", (8, 6): "ampere", (8, 7): "ampere", (7, 5): "turing", (7, 0): "volta", (7, 2): "volta"}


def classify(compute_cap: str | None) -> str:
    """hardware_class for one GPU's compute capability ("12.1", "9.0"); unknown_gpu when the
    driver does not report one (nvidia-smi before 510 has no compute_cap field)."""
    if not compute_cap:
        return "unknown_gpu"
    try:
        major, minor = (int(x) for x in compute_cap.strip().split(".")[:2])
    except ValueError:
        return "unknown_gpu"
    if major in _MAJOR:
        return _MAJOR[major]
    return _MINOR.get((major, minor), f"unknown_sm_{major}{minor}")


def parse_lscpu(text: str) -> dict:
    """model / cpus / arch / vendor from `lscpu` (heterogeneous ARM lists one Model name per cluster)."""
    models, info = [], {}
    for line in text.splitlines():
        key, sep, val = line.partition(":")
        if not sep:
            continue
        key, val = key.strip(), val.strip()
        if key == "Model name" and val not in models:
            models.append(val)
        elif key in ("CPU(s)", "Architecture", "Vendor ID") and key not in info:
            info[key] = val
    cpus = info.get("CPU(s)", "")
    return {
        "model": " + ".join(models) or None,
        "cpus": int(cpus) if cpus.isdigit() else None,
        "arch": info.get("Architecture"),
        "vendor": info.get("Vendor ID"),
    }


def parse_cpuinfo(text: str) -> dict:
    models, n = [], 0
    for line in text.splitlines():
        key, _, val = line.partition(":")
        key = key.strip()
        if key == "processor":
            n += 1
        elif key == "model name" and val.strip() not in models:
            models.append(val.strip())
    return {"model": " + ".join(models) or None, "cpus": n or None, "arch": None, "vendor": None}


def parse_meminfo_mib(text: str) -> int | None:
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                return int(parts[1]) // 1024
    return None


def cpu_info(runner) -> dict:
    res = runner.run(["lscpu"], timeout=30) if runner.which("lscpu") else None
    if res is not None and res.ok:
        info = parse_lscpu(res.stdout)
        if info["model"]:
            return {**info, "source": "lscpu"}
    try:
        return {**parse_cpuinfo(runner.read_text("/proc/cpuinfo")), "source": "/proc/cpuinfo"}
    except OSError:
        return {"model": None, "cpus": None, "arch": None, "vendor": None, "source": "unavailable"}


def _hostname(runner) -> str:
    if runner.host == "local":
        import socket

        return socket.gethostname()
    res = runner.run(["uname", "-n"], timeout=30)
    return res.stdout.strip() if res.ok else runner.host


def _memory_words(mib: int | None) -> str:
    return "unified (nvidia-smi reports [N/A])" if mib is None else f"{mib} MiB"


def inventory(runner) -> dict:
    gpus, cuda, source = nvidia_smi.inventory(runner)
    classes = sorted({classify(g.compute_cap) for g in gpus})
    if not gpus:
        hw_class = "cpu_only"
    elif len(classes) == 1:
        hw_class = classes[0]
    else:
        hw_class = "mixed:" + "+".join(classes)
    try:
        sys_mib = parse_meminfo_mib(runner.read_text("/proc/meminfo"))
    except OSError:
        sys_mib = None
    return {
        "hardware_class": hw_class,
        "host": _hostname(runner),
        "gpus": [
            {
                "index": i,
                "name": g.name,
                "driver": g.driver,
                "compute_cap": g.compute_cap,
                "memory_mib": g.memory_mib,
                "unified_memory": g.memory_mib is None,
                "memory": _memory_words(g.memory_mib),
                "hardware_class": classify(g.compute_cap),
            }
            for i, g in enumerate(gpus)
        ],
        "driver": gpus[0].driver if gpus else None,
        "cuda_version": cuda,
        "cpu": cpu_info(runner),
        "system_memory_mib": sys_mib,
        "source": source,
    }


def render(info: dict) -> str:
    """hardware.txt: `key=value` lines (the seeds' harness greps `hardware_class=`)."""
    lines = [f"hardware_class={info['hardware_class']}", f"host={info['host']}"]
    for g in info["gpus"]:
        cc = g["compute_cap"] or "not reported"
        lines.append(f"gpu{g['index']}={g['name']}, driver {g['driver']}, compute capability {cc}, memory {g['memory']}")
    if not info["gpus"]:
        lines.append(f"gpu=none ({info['source']})")
    lines.append(f"driver={info['driver'] or 'n/a'}")
    lines.append(f"cuda_version={info['cuda_version'] or 'n/a'}")
    c = info["cpu"]
    lines.append(f"cpu={c['model'] or 'unknown'} x{c['cpus'] or '?'} ({c['arch'] or '?'}, via {c['source']})")
    mem = info["system_memory_mib"]
    lines.append(f"system_memory={f'{mem} MiB' if mem else 'unknown'}")
    return "\n".join(lines) + "\n"


def write_hardware(runner, out, run_dir, expected: str | None, bandwidth: bool = True) -> dict:
    """Inventory -> hardware.txt + hardware.json in run_dir (a RunDir, or None: nothing written);
    warns on a class other than `expected` (the profile's hardware_class).  Call before any server
    starts.  bandwidth: also bandwidth.json, the published and measured memory bandwidth
    (parity.gpu.bandwidth)."""
    info = inventory(runner)
    if run_dir is not None:
        run_dir.write_text("hardware.txt", render(info))
        run_dir.write_json("hardware.json", info)
        if bandwidth:
            write_bandwidth(run_dir, runner, info)
    if expected and info["hardware_class"] != expected:
        out.warn(f"hardware_class is {info['hardware_class']}, the profile expects {expected}: numbers are not comparable with that class")
    return info


def every_gpu_seen(info: dict, placed: bool, local: bool, visible: str | None, engines_set: list[str]) -> str | None:
    """The warning for servers that will see every GPU of a multi-GPU host (llama.cpp splits a model's
    layers over all it sees), None when they will not or parity cannot tell.  placed: a crossover
    puts each server on its GPU; local: the servers start on this machine (a remote one's env is its
    own); visible: CUDA_VISIBLE_DEVICES here; engines_set: the engines whose own env sets it."""
    n = len(info.get("gpus") or [])
    if n < 2 or placed or not local or visible is not None or engines_set:
        return None
    return (f"{n} GPUs here and CUDA_VISIBLE_DEVICES is not set: every server sees all {n} (llama.cpp splits a "
            "model's layers over every GPU it sees); one GPU: CUDA_VISIBLE_DEVICES=0, two at once: --gpus 0,1")


def hw(ctx, out_dir: str | None = None) -> dict:
    """`parity hw`: the inventory; with out_dir, also hardware.txt + hardware.json there."""
    info = inventory(ctx.runner)
    if out_dir:
        from pathlib import Path

        d = Path(out_dir)
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"--out {out_dir}: {e.strerror}") from None
        atomic_write_text(d / "hardware.txt", render(info))
        atomic_write_json(d / "hardware.json", info)
    return info
