"""GPU inventory and hardware_class, written to hardware.txt before any server starts."""

from __future__ import annotations

import os
import platform

from parity import nvidia_smi

CLASSES = [
    (12, "gb10_or_workstation_blackwell"),
    (10, "datacenter_blackwell"),
    (9, "hopper"),
]


def classify(compute_cap: str | None) -> str:
    if not compute_cap:
        return "cpu_only"
    try:
        major, minor = (int(x) for x in compute_cap.split(".")[:2])
    except ValueError:
        return "unknown"
    for m, name in CLASSES:
        if major == m:
            return name
    if major == 8:
        return "ada" if minor == 9 else "ampere"
    if major == 7:
        return "turing" if minor == 5 else "volta"
    return f"sm_{major}{minor}"


def _cpu(runner) -> dict:
    name = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"model": name, "cores": os.cpu_count(), "arch": platform.machine()}


def inventory(runner) -> dict:
    gpus, cuda, note = nvidia_smi.inventory(runner)
    cls = classify(gpus[0].compute_cap) if gpus else "cpu_only"
    return {
        "hardware_class": cls,
        "gpus": [
            {"name": g.name, "driver": g.driver, "compute_cap": g.compute_cap, "memory_mib": g.memory_mib, "memory": "unified (nvidia-smi reports [N/A])" if g.memory_mib is None else f"{g.memory_mib} MiB"}
            for g in gpus
        ],
        "cuda_version": cuda,
        "cpu": _cpu(runner),
        "host": platform.node(),
        "source": note,
    }


def render(info: dict) -> str:
    lines = [f"hardware_class: {info['hardware_class']}", f"host: {info['host']}"]
    for i, g in enumerate(info["gpus"]):
        lines.append(f"gpu{i}: {g['name']} | driver {g['driver']} | cc {g['compute_cap'] or 'n/a'} | memory {g['memory']}")
    if not info["gpus"]:
        lines.append(f"gpu: none ({info['source']})")
    lines.append(f"cuda: {info['cuda_version'] or 'n/a'}")
    c = info["cpu"]
    lines.append(f"cpu: {c['model']} x{c['cores']} ({c['arch']})")
    return "\n".join(lines) + "\n"


def write_hardware(ctx) -> dict:
    info = inventory(ctx.runner)
    if ctx.run is not None:
        ctx.run.write_text("hardware.txt", render(info))
        ctx.run.write_json("hardware.json", info)
    expected = ctx.profile.hardware_class
    if expected and info["hardware_class"] != expected:
        ctx.out.warn(f"hardware_class is {info['hardware_class']}, the profile expects {expected}: numbers are not comparable with that class")
    return info
