"""The report's Telemetry section and plot, from the report fixture run (tests/data/report/candidate)
with telemetry put on its rows as parity.telemetry writes it."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from parity.config import load_profile
from parity.report.render import ReportRequest, render_report

DATA = Path(__file__).resolve().parent.parent / "data" / "report"


def _run_with_telemetry(tmp_path, gpu: bool) -> Path:
    run = tmp_path / "run"
    shutil.copytree(DATA / "candidate", run)
    doc = json.loads((run / "summary.json").read_text())
    for i, row in enumerate(doc["rows"]):
        row["telemetry"] = {"file": f"telemetry/{row['engine']}-r{row['repeat']}-n{row['n']}.json", "samples": 40, "gpu": "nvml" if gpu else None,
                            "gpu_note": None if gpu else "no GPU telemetry: nvidia-ml-py not installed; nvidia-smi not found",
                            "sm_mhz_median": 1980 - 10 * i if gpu else None, "power_w_median": 142.0 + i if gpu else None, "temp_c_max": 60 if gpu else None,
                            "throttle": {"SwPowerCap": 3} if gpu and i == 0 else {}, "foreign_pids": [] if gpu else None, "load1_min": 0.5, "load1_max": 1.25,
                            "client_cpu_s": 0.2, "client_cpu_pct": 20.0, "server_cpu_s": 0.9, "server_cpu_pct": 90.0}  # fmt: skip
        row["engine_timing"] = {"engine_decode_tps_mean": 100.0, "engine_decode_ms_mean": 300.0, "client_decode_ms_mean": 310.0, "decode_overhead_ms_mean": 10.0}
    doc["arms"] = [{"engine": "paged", "repeat": 0, "affinity": {"applied": False, "why": "not applied: only 2 cores (serving.telemetry.pin_min_cpus: 8)", "cpus": 2}}]
    (run / "summary.json").write_text(json.dumps(doc))
    return run


def _section(text: str) -> str:
    return re.search(r"^## Telemetry\n(.*?)^## ", text, re.M | re.S).group(1)


@pytest.mark.parametrize("gpu", [True, False])
def test_telemetry_section_and_plot(tmp_path, gpu):
    run = _run_with_telemetry(tmp_path, gpu)
    res = render_report(load_profile("smoke"), ReportRequest(run=str(run), out_dir=str(tmp_path / "out"), date="2026-11-22", plots=True))
    text = Path(res["report"]).read_text()
    sec = _section(text)
    assert "| engine | N | points | SM clock MHz | power W |" in sec and "| client CPU % | server CPU % |" in sec
    assert "not applied: only 2 cores" in sec and "engine_decode_tps_mean" in sec and "| 100.00 | - | 300.00 | 310.00 | 10.00 |" in sec
    pngs = {Path(p).name for p in res["plots"]}
    if gpu:
        assert "SwPowerCap x3" in sec and "telemetry.png" in pngs and "no GPU telemetry" not in sec
    else:
        assert "_no GPU telemetry in this run: no GPU telemetry: nvidia-ml-py not installed" in sec and "| 1.25 |" in sec and "telemetry.png" not in pngs
