"""The background sampler: one thread, one sample per interval (Event.wait, no busy loop),
stopped in a finally by its caller.  A source that fails is recorded (first error, count)
and, after MAX_FAILURES in a row, dropped; it never stops the point.

Beside it, the power lane (PowerLane, started by start_lane once the energy counter's GPUs are
known, stopped with the sampler): NVML's instantaneous power field alone, every power_interval_s,
for the energy cross-check.  On an H200 NVML refreshes that field and the energy counter about
every 100 ms, so samples 100 ms apart beat against the refresh (tests/data/telemetry/README.md)."""

from __future__ import annotations

import os
import threading
import time

from parity.telemetry import procfs

MAX_FAILURES = 3
MAX_SAMPLES = 20000  # ~33 min at 10 Hz: past that, every other sample is dropped (bounded memory and file)
MAX_LANE_SAMPLES = 100_000  # ~33 min at 50 Hz, the same rule
LANE_FIELD = "NVML_FI_DEV_POWER_INSTANT"


class PowerLane:
    """read() (watts per GPU, NvmlGpu.power_reader) every interval_s on its own thread, on a fixed
    schedule (a late read moves the schedule, never bursts); rows of (t s on the sampler's clock, watts...)."""

    def __init__(self, read, gpus: list[int], interval_s: float, t0: float):
        self.read, self.gpus, self.interval_s, self.t0 = read, list(gpus), interval_s, t0
        self.rows: list[tuple] = []
        self.note: str | None = None
        self.errors: dict | None = None  # {"first", "count"}
        self.thinned = 0  # times every other row was dropped (MAX_LANE_SAMPLES)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> PowerLane:
        self._thread = threading.Thread(target=self._run, name="parity-power-lane", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(10.0, 20 * self.interval_s))
            if self._thread.is_alive():
                self.note = "the power lane did not stop within its bound (a read hangs?)"

    def _run(self) -> None:
        read, clock, t0, step, failures = self.read, time.monotonic, self.t0, self.interval_s, 0
        due = clock()
        while True:
            now = clock()
            try:
                self.rows.append((now - t0, *read()))
                failures = 0
            except Exception as e:
                failures += 1
                self.errors = self.errors or {"first": str(e) or type(e).__name__, "count": 0}
                self.errors["count"] += 1
                if failures >= MAX_FAILURES:
                    self.note = f"dropped after {MAX_FAILURES} failures in a row: {e}"
                    return
            if len(self.rows) >= MAX_LANE_SAMPLES:
                self.rows, self.thinned = self.rows[::2], self.thinned + 1
            due, now = due + step, clock()
            if due <= now:  # late (a slow read, the GIL): the next read a full step away, no burst
                due = now + step
            if self._stop.wait(due - now):
                return

    def doc(self) -> dict:
        rows = [[round(r[0], 4), *(round(w, 3) for w in r[1:])] for r in self.rows]
        return {"field": LANE_FIELD, "interval_s": self.interval_s, "gpus": self.gpus, "samples": rows,
                "note": self.note, "errors": self.errors, "thinned": self.thinned}


def idle_priority() -> None:
    """The calling thread at SCHED_IDLE (Linux schedules threads, not processes): it runs only when its cores
    have nothing else to run.  The sampler started beside a pinned load generator shares its cores (a thread
    inherits its creator's affinity); a tick over llama-server's 105 threads took ~3.5 ms of CPU there, and
    open-loop sends falling due in one were written 1-3 ms late (0.5-1.2 ms at nice 19).  A load generator
    that keeps its cores busy delays the ticks instead."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):  # not Linux: the default policy
        pass


class Sampler:
    def __init__(self, gpu, gpu_note: str, server_pid: int | None, interval_s: float,
                 power_interval_s: float | None = None, idle: bool = False):
        self.idle = idle  # its thread at SCHED_IDLE (idle_priority)
        self.gpu, self.gpu_note = gpu, gpu_note
        self.gpu_source = getattr(gpu, "source", None)
        self.server_pid, self.interval_s, self.power_interval_s = server_pid, interval_s, power_interval_s
        self.lane: PowerLane | None = None
        self.lane_note = "not started"
        self.samples: list[dict] = []
        self.errors: dict[str, dict] = {}
        self.server_first: dict[int, float] = {}  # pid -> its CPU seconds when first seen (0 for a pid born during the point)
        self.server_last: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._gpu_failures = 0
        self.t0 = self.t1 = 0.0
        self.client0 = self.client1 = None

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> Sampler:
        self.t0 = time.monotonic()
        self.client0 = procfs.self_cpu()
        self._server_cpu(first=True)
        self._thread = threading.Thread(target=self._run, name="parity-telemetry", daemon=True)
        self._thread.start()
        return self

    def start_lane(self, gpus: list[int]) -> None:
        """The power lane on these NVML indices (the energy counter's GPUs) where the GPU source reads
        NVML's instantaneous power; else lane_note says why not.  Never raises."""
        reader = getattr(self.gpu, "power_reader", None)
        if not gpus:
            self.lane_note = "no energy counter to check"
        elif self.power_interval_s is None:
            self.lane_note = "off (no power_interval_s)"
        elif reader is None:
            self.lane_note = f"the GPU is sampled by {self.gpu_source or 'nothing'}, not NVML"
        else:
            try:
                read, why = reader(gpus)
                if read is None:
                    self.lane_note = why
                else:
                    self.lane, self.lane_note = PowerLane(read, gpus, self.power_interval_s, self.t0).start(), None
            except Exception as e:
                self.lane_note = f"did not start: {e!r}"

    def lane_doc(self) -> dict:
        """The power lane's entry in the point's file (parity.telemetry.energy reads it)."""
        if self.lane is None:
            return {"field": LANE_FIELD, "interval_s": self.power_interval_s, "gpus": [], "samples": [],
                    "note": self.lane_note}
        return self.lane.doc()

    def stop(self) -> None:
        if self.lane is not None:
            self.lane.stop()  # before the GPU's NVML session closes
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(10.0, 20 * self.interval_s))
            if self._thread.is_alive():
                self._error("sampler", "the sampling thread did not stop within its bound (a query hangs?)")
        self.t1 = time.monotonic()
        self.client1 = procfs.self_cpu()
        self._server_cpu()
        if self.gpu is not None:
            try:
                self.gpu.close()
            except Exception as e:
                self._error("gpu", f"close: {e}")

    # ---------------------------------------------------------------- sampling
    def _run(self) -> None:
        if self.idle:
            idle_priority()
        while True:
            try:
                self._tick()
            except Exception as e:  # never let the thread die silently
                self._error("sampler", repr(e))
            if self._stop.wait(self.interval_s):
                return

    def _tick(self) -> None:
        s: dict = {"t": round(time.monotonic() - self.t0, 4)}
        load = procfs.loadavg()
        s["load1"] = load["load1"] if load else None
        s["server_pids"] = self._server_cpu()
        if self.gpu is not None:
            try:
                s["gpus"] = self.gpu.sample()
                self._gpu_failures = 0
            except Exception as e:
                self._gpu_failures += 1
                self._error("gpu", str(e) or type(e).__name__)
                if self._gpu_failures >= MAX_FAILURES:
                    self.gpu_note = f"{self.gpu.source} dropped after {MAX_FAILURES} failures in a row: {e}"
                    self.gpu = None
        self.samples.append(s)
        if len(self.samples) >= MAX_SAMPLES:
            self.samples = self.samples[::2]

    def _server_cpu(self, first: bool = False) -> list[int] | None:
        if self.server_pid is None:
            return None
        pids = procfs.tree(self.server_pid)
        for p, sec in procfs.cpu_seconds(pids).items():
            self.server_first.setdefault(p, sec if first else 0.0)
            self.server_last[p] = sec
        return pids

    def _error(self, source: str, msg: str) -> None:
        e = self.errors.setdefault(source, {"first": msg, "count": 0})
        e["count"] += 1

    # ---------------------------------------------------------------- results
    def server_tree_ever(self) -> set[int]:
        return set(self.server_first) | {p for s in self.samples for p in s.get("server_pids") or []}

    def cpu(self) -> dict:
        wall = max(self.t1 - self.t0, 1e-9)
        out = {"wall_s": round(wall, 4)}
        if self.client0 is not None and self.client1 is not None:
            c = self.client1["self_s"] - self.client0["self_s"]
            out["client_cpu_s"] = round(c, 3)
            out["client_children_cpu_s"] = round(self.client1["children_s"] - self.client0["children_s"], 3)
            out["client_cpu_pct"] = round(100 * c / wall, 1)
        if self.server_pid is not None and self.server_last:
            srv = sum(self.server_last[p] - self.server_first.get(p, 0.0) for p in self.server_last)
            out["server_cpu_s"] = round(srv, 3)
            out["server_cpu_pct"] = round(100 * srv / wall, 1)
            out["server_processes"] = len(self.server_last)
        return out
