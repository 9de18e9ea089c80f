"""The glue around one serving point (parity.serving.sweep.run_point):

    with watch.point(runner, shape, server_pid, affinity, gpus) as w:
        records = drive(...)
    problems += w.finish(run_dir, row, records, launch.family, before, after, "telemetry/<engine>-r<k>-n<N>.json")

Starting, sampling and summarizing never fail the point: an error is recorded in the
file and on the row instead.  The sampler stops in the finally, also when the load
generator raises."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from parity.telemetry import affinity as aff, energy, engine_timing, point_summary
from parity.telemetry.nvml_gpu import NvmlGpu
from parity.telemetry.sampler import Sampler
from parity.telemetry.smi_gpu import SmiGpu


class Watch:
    def __init__(self, sampler, affinity: dict | None, client_cpus: str | None, server_cpus: str | None, error: str | None = None,
                 meter: energy.Window | None = None):
        self.sampler, self.affinity, self.error, self.meter = sampler, affinity, error, meter
        self.client_cpus, self.server_cpus = client_cpus, server_cpus

    def finish(self, run, row: dict, recs, family, before: dict | None, after: dict | None, path: str) -> list[str]:
        """Write the point's telemetry file, put the short summary, flags and engine timing on the row;
        return the problems that make the point invalid."""

        problems: list[str] = []
        row.setdefault("flags", [])
        lane = self.sampler.lane_doc() if self.sampler is not None else None  # one doc: the check and the file
        joules = energy.of_point(self.meter, self.sampler, self.error, lane)  # J per token, checked against the power
        energy.on_row(row, joules, recs)
        try:
            row["engine_timing"] = engine_timing.compute(recs, family, before, after)
        except Exception as e:  # never the point's failure
            row["engine_timing"] = {"error": repr(e)}
        try:
            s = self.sampler
            if s is None:
                summary, samples = {"error": self.error or "no sampler"}, []
            else:
                tree = s.server_tree_ever() if s.server_pid is not None else None
                summary = point_summary.summarize(s.samples, s.gpu_source, s.gpu_note, s.cpu(), tree,
                                                  getattr(s.gpu, "unsupported", None), s.errors, os.getpid())  # fmt: skip
                samples = s.samples
            summary["affinity"] = {"plan": self.affinity, "client": self.client_cpus, "server": self.server_cpus}
            problems, flags = point_summary.verdict(summary)
            row["flags"] += flags
            run.write_json(path, {"summary": summary, "samples": samples, "power_lane": lane,
                                  "engine_timing": row["engine_timing"], "energy": joules})
            row["telemetry"] = {**point_summary.short(summary, path), "client_cpus": self.client_cpus, "server_cpus": self.server_cpus}
        except Exception as e:
            row["telemetry"] = {"error": f"telemetry failed: {e!r}"}
        return problems


def open_gpu(runner, gpus: list[int] | None = None):
    """(gpu sampler or None, note): NVML where importable (local), else nvidia-smi, else why neither.
    gpus: the NVML indices to sample (a crossover arm's GPU); None: every GPU."""

    notes = []
    if getattr(runner, "host", "local") == "local":
        gpu, note = NvmlGpu.open(gpus)
        if gpu is not None:
            return gpu, note
        notes.append(note)
    gpu, note = SmiGpu.open(runner, gpus)
    if gpu is not None:
        return gpu, note
    notes.append(note)
    return None, "no GPU telemetry: " + "; ".join(notes)


@contextmanager
def point(runner, cfg, server_pid: int | None, affinity: dict | None, gpus: list[int] | None = None):
    """Sample around the block (serving.telemetry: enabled, interval_s, power_interval_s: the power lane
    on the energy counter's GPUs); the client thread pinned per the affinity plan; gpus: the GPUs sampled
    (None: every GPU)."""

    if not cfg.enabled:
        yield Watch(None, affinity, None, None, "off (serving.telemetry.enabled: false)")
        return
    sampler, error = None, None
    with aff.client_pinned(affinity) as client_cpus:
        try:
            gpu, note = open_gpu(runner, gpus)
            idle = aff.is_pinned(client_cpus)  # the sampler shares the pinned client's cores: their idle time alone
            sampler = Sampler(gpu, note, server_pid, cfg.interval_s, cfg.power_interval_s, idle=idle).start()
        except Exception as e:
            sampler, error = None, f"telemetry did not start: {e!r}"
        meter = energy.Window.open(server_pid, getattr(runner, "host", "local"), sampler.t0 if sampler else time.monotonic())
        if sampler is not None:
            sampler.start_lane(meter.gpus())  # the counter's GPUs alone: no counter, no lane
        try:
            yield Watch(sampler, affinity, client_cpus, aff.of_pid(server_pid), error, meter)
        finally:
            meter.stop()  # the energy counter's end read, before the sampler's last sample
            if sampler is not None:
                try:
                    sampler.stop()
                except Exception as e:
                    sampler.errors.setdefault("sampler", {"first": f"stop: {e!r}", "count": 1})
