"""GPU samples through nvidia-smi (where NVML is not importable): one query per sample,
run through the Runner; compute processes about once a second.  The argv and the parse of
its output are gpu/nvidia_smi.py's (telemetry, compute_pids).  Given GPU indices (a crossover
arm's), only their rows are kept and the compute processes are asked of them alone (-i)."""

from __future__ import annotations

from parity.gpu import nvidia_smi

APPS_EVERY = 10  # samples between two compute-process queries


class SmiGpu:
    source = "nvidia-smi"

    def __init__(self, runner, indices: list[int] | None = None):
        self.runner, self.indices = runner, indices
        self.unsupported: dict[str, str] = {}
        self._count = 0

    @classmethod
    def open(cls, runner, indices: list[int] | None = None) -> tuple[SmiGpu | None, str]:
        if not runner.which("nvidia-smi"):
            return None, "nvidia-smi not found"
        return cls(runner, indices), "nvidia-smi"

    def sample(self) -> list[dict]:
        gpus = nvidia_smi.telemetry(self.runner)
        if self.indices is not None:
            gpus = [g for g in gpus if g["index"] in self.indices]
        if self._count % APPS_EVERY == 0:  # one process list for the GPUs sampled (the verdict needs no split)
            pids = nvidia_smi.compute_pids(self.runner, self.indices)
            for g in gpus:
                g["pids"] = pids
        self._count += 1
        return gpus

    def close(self) -> None:
        pass
