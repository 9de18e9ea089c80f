#!/usr/bin/env python3
"""Capture a GPU's NVML energy counter and power draw side by side (for tests/data: the energy
cross-check of issue 57 is tested on real samples).  Measures only; changes no setting.
Usage: nvml-energy-capture.py OUT.json SECONDS [INTERVAL_S] [GPU_INDEX]"""
import json
import sys
import time

import pynvml

out, seconds = sys.argv[1], float(sys.argv[2])
interval = float(sys.argv[3]) if len(sys.argv) > 3 else 0.1
index = int(sys.argv[4]) if len(sys.argv) > 4 else 0
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(index)
name = pynvml.nvmlDeviceGetName(h)
doc = {"format": "parity-nvml-energy-capture/1", "device": name if isinstance(name, str) else name.decode(),
       "driver": pynvml.nvmlSystemGetDriverVersion(), "index": index, "interval_s": interval,
       "fields": {"t": "time.monotonic() s", "energy_mj": "nvmlDeviceGetTotalEnergyConsumption (mJ since the driver loaded)",
                  "power_mw": "nvmlDeviceGetPowerUsage (mW)"},
       "samples": []}
end = time.monotonic() + seconds
while time.monotonic() < end:
    t = time.monotonic()
    doc["samples"].append({"t": round(t, 6), "energy_mj": pynvml.nvmlDeviceGetTotalEnergyConsumption(h), "power_mw": pynvml.nvmlDeviceGetPowerUsage(h)})
    time.sleep(max(0.0, interval - (time.monotonic() - t)))
pynvml.nvmlShutdown()
with open(out, "w") as f:
    json.dump(doc, f)
print(f"{len(doc['samples'])} samples of {doc['device']} in {out}")
