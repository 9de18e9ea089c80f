#!/usr/bin/env python3
"""NVML's power readings against its energy counter on short windows of load (issue 57's cross-check):
the averaged reading (nvmlDeviceGetPowerUsage) and the field values NVML_FI_DEV_POWER_INSTANT and
NVML_FI_DEV_POWER_AVERAGE, sampled every INTERVAL_S while torch matmuls load GPU 0 for windows of
0.5-5 s with idle between.  Per window: the counter's joules, each reading's trapezoid integral, and
how far each is from the counter.  Measures only; changes no setting.  Writes OUT.json (every sample,
every window) for tests/data.  Usage: nvml-power-forms-check.py OUT.json [INTERVAL_S] [REPEATS]"""
import json
import sys
import threading
import time

import pynvml
import torch

out = sys.argv[1]
interval = float(sys.argv[2]) if len(sys.argv) > 2 else 0.02
repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 2
FI_INSTANT = getattr(pynvml, "NVML_FI_DEV_POWER_INSTANT", 186)
FI_AVERAGE = getattr(pynvml, "NVML_FI_DEV_POWER_AVERAGE", 185)

pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
name = pynvml.nvmlDeviceGetName(h)
samples, stop = [], threading.Event()


def field_mw(values, i):
    v = values[i]
    return v.value.uiVal if v.nvmlReturn == 0 else None


def sample():
    while not stop.is_set():
        t = time.monotonic()
        row = {"t": round(t, 6), "energy_mj": pynvml.nvmlDeviceGetTotalEnergyConsumption(h),
               "power_mw": pynvml.nvmlDeviceGetPowerUsage(h)}
        try:
            fv = pynvml.nvmlDeviceGetFieldValues(h, [FI_INSTANT, FI_AVERAGE])
            row["instant_mw"], row["average_mw"] = field_mw(fv, 0), field_mw(fv, 1)
        except pynvml.NVMLError as e:
            row["field_error"] = str(e)
        samples.append(row)
        time.sleep(max(0.0, interval - (time.monotonic() - t)))


def integral(rows, key, t0, t1):
    pts = [(r["t"], r[key] / 1000.0) for r in rows if r.get(key) is not None and t0 <= r["t"] <= t1]
    return sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in zip(pts, pts[1:])) if len(pts) > 1 else None


a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
threading.Thread(target=sample, daemon=True).start()
time.sleep(1.0)
windows = []
for r in range(repeats):
    for w in (0.5, 1.0, 2.0, 3.0, 5.0):
        t0 = time.monotonic()
        while time.monotonic() - t0 < w:
            for _ in range(8):
                torch.mm(a, b)
            torch.cuda.synchronize()
        t1 = time.monotonic()
        windows.append({"repeat": r, "window_s": w, "t0": t0, "t1": t1})
        time.sleep(1.5)
stop.set()
time.sleep(2 * interval)
pynvml.nvmlShutdown()

for win in windows:
    rows = [s for s in samples if win["t0"] <= s["t"] <= win["t1"]]
    counter = (rows[-1]["energy_mj"] - rows[0]["energy_mj"]) / 1000.0 if len(rows) > 1 else None
    win["counter_j"] = counter
    for key in ("power_mw", "instant_mw", "average_mw"):
        j = integral(samples, key, rows[0]["t"], rows[-1]["t"]) if rows else None
        win[key.replace("_mw", "_j")] = j
        win[key.replace("_mw", "_pct")] = None if not (j and counter) else round((j / counter - 1) * 100, 2)
    print(f"{win['window_s']:>4} s: counter {counter:8.1f} J  getPowerUsage {win['power_pct']:+6.2f} %  "
          f"instant {win['instant_pct'] if win['instant_pct'] is None else format(win['instant_pct'], '+6.2f')} %  "
          f"average {win['average_pct'] if win['average_pct'] is None else format(win['average_pct'], '+6.2f')} %")
doc = {"format": "parity-nvml-power-forms/1", "device": name if isinstance(name, str) else name.decode(),
       "interval_s": interval, "field_ids": {"instant": FI_INSTANT, "average": FI_AVERAGE},
       "windows": windows, "samples": samples}
with open(out, "w") as f:
    json.dump(doc, f)
print(f"{len(samples)} samples, {len(windows)} windows -> {out}")
