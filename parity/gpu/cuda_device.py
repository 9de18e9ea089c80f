"""Is there a CUDA device (for kernel tracing), and which CUDA its driver runs: nvidia-smi, NVML, /dev/nvidia0."""

from __future__ import annotations

from parity.errors import UsageError
from parity.gpu import nvidia_smi

NO_DEVICE = "kernel tracing needs a CUDA device, and this machine has none ({why}): run the profile on the GPU host (--host, or parity there)"


def cuda_device(runner) -> dict:
    """{"present": bool, "gpus": [names], "cuda": "13.0" | None, "why": str}: nvidia-smi (NVML
    where it answers), else /dev/nvidia0 as the sign of a driver without nvidia-smi."""
    gpus, cuda, note = nvidia_smi.inventory(runner)
    if gpus:
        return {"present": True, "gpus": [g.name for g in gpus], "cuda": cuda, "why": note}
    if runner.exists("/dev/nvidia0"):
        cuda = nvidia_smi.nvml_cuda_version() if runner.host == "local" else None
        return {"present": True, "gpus": [], "cuda": cuda, "why": f"/dev/nvidia0 is there ({note})"}
    return {"present": False, "gpus": [], "cuda": None, "why": f"{note}, no /dev/nvidia0"}


def require_cuda_device(runner) -> dict:
    d = cuda_device(runner)
    if not d["present"]:
        raise UsageError(NO_DEVICE.format(why=d["why"]))
    return d
