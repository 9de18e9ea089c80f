"""The background sampler: one thread, one sample per interval (Event.wait, no busy loop),
stopped in a finally by its caller.  A source that fails is recorded (first error, count)
and, after MAX_FAILURES in a row, dropped; it never stops the point."""

from __future__ import annotations

import threading
import time

from parity.telemetry import procfs

MAX_FAILURES = 3
MAX_SAMPLES = 20000  # ~33 min at 10 Hz: past that, every other sample is dropped (bounded memory and file)


class Sampler:
    def __init__(self, gpu, gpu_note: str, server_pid: int | None, interval_s: float):
        self.gpu, self.gpu_note = gpu, gpu_note
        self.gpu_source = getattr(gpu, "source", None)
        self.server_pid, self.interval_s = server_pid, interval_s
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

    def stop(self) -> None:
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
