"""Real vLLM on CPU as an `endpoint` engine: an OpenAI-compatible server parity neither builds
nor starts, measured beside the paged llama-server of the smoke profile on the same weights
(tiny-hf: vLLM serves the HF directory, llama-server the f32 GGUF made of it).

- The test starts vLLM itself (the smoke profile's vLLM command line); parity reaches it by its
  base URL: paired blocks, reconciliation through vLLM's own /metrics, the binary gates on paged
  only and "not applicable" for the endpoint in summary.json, builds.json and `parity report`.
- An endpoint with start/stop commands: parity runs the test's own start script (which execs
  vLLM) before the arm and its stop script after it.
- The dry run and the doctor say whether the endpoint answers; one that does not, with no start
  command, is a NO-GO; a start command that fails ends the run at readiness, naming it.

vLLM comes from the venv parity installs under ~/.cache/parity/vllm (ensure_vllm: minutes on a
cold cache, skipped when it cannot be downloaded); it takes 1-4 minutes to become ready on 2
busy cores, twice in this file (the test's server, the start script's)."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from parity.engines.base import Launch
from parity.engines.server import wait_ready
from parity.ports import port_free
from parity.runners.local import LocalRunner
from ports import free_port

from tests.conftest import vllm_venv_or_skip

pytestmark = pytest.mark.slow

SERVED = "tiny-hf"  # the smoke profile's served name for tiny-hf
# as the smoke profile's vllm engine starts it: eager, the worker inside the engine-core process,
# one OpenMP thread unbound (half the start on 2 cores); --tokenizer-mode mistral splits runs of
# spaces as SentencePiece (llama.cpp) does
VLLM_ARGS = ["--dtype", "float32", "--gpu-memory-utilization", "0.1", "--max-model-len", "2048", "--max-num-seqs", "8", "--tokenizer-mode", "mistral", "--enforce-eager"]
VLLM_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}
VLLM_READY_S = 900  # 50-230 s seen on a 2-core box


@pytest.fixture(scope="module")
def vllm_setup(smoke_profile):
    """(venv, checkpoint dir): parity's cached vLLM CPU venv and the tiny-hf checkpoint (and its GGUF)."""
    from parity.models.synth import ensure_model

    venv = vllm_venv_or_skip()
    ensure_model(smoke_profile, "tiny-hf")  # the checkpoint vLLM serves and the GGUF llama-server serves
    return venv, Path(smoke_profile.models["tiny-hf"].vllm_path)


def vllm_argv(venv, checkpoint: Path, port: int) -> list[str]:
    return [str(venv.vllm), "serve", str(checkpoint), *VLLM_ARGS, "--served-model-name", SERVED, "--host", "127.0.0.1", "--port", str(port)]


def endpoint_profile(tmp_path: Path, port: int, serving_port: int, **endpoint) -> Path:
    """smoke + an endpoint `ep` at 127.0.0.1:port, measured beside paged; a lock of its own."""
    ep = {"kind": "endpoint", "base_url": f"http://127.0.0.1:{port}", "model": SERVED, "metrics": "vllm", "tokenize": "prompt", "count": "usage", "max_model_len": 2048,
          "ready_timeout_s": VLLM_READY_S, "ready_probe_timeout_s": 10, **endpoint}  # fmt: skip
    doc = {"extends": "smoke", "lock": {"dir": str(tmp_path / "lock"), "poll_s": 0.5, "timeout_s": 60}, "engines": {"ep": ep},
           "serving": {"engines": ["paged", "ep"], "reference_engine": "paged", "port": serving_port,
                       "settle_tolerance_mib": 1 << 20,  # the box's memory is shared with other work: not a test of settling
                       # not a test of windows either: with smoke's 0.5 s rule a busy box made block 0 a
                       # calibration trial (3 blocks where this file counts 2); the window rule has its own tests
                       "min_window_s": 0}}  # fmt: skip
    tmp_path.mkdir(parents=True, exist_ok=True)
    p = tmp_path / "endpoint.yaml"
    p.write_text(json.dumps(doc))
    return p


def snapshot(parity_cli, tmp_path: Path, prof: Path, *args: str, ok=(0,)) -> tuple[dict, Path]:
    r = parity_cli("--artifacts", str(tmp_path / "runs"), "snapshot", "-p", str(prof), "--npl", "2", "--json", *args, timeout=3000)
    assert r.returncode in ok, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    return doc, Path(doc["run_dir"])


def vllm_counters_reconcile(row: dict) -> None:
    """The endpoint's point reconciled through vLLM's own counters: requests and tokens exactly, its
    latency histograms read (their status is a comparison with the client's clock, not asserted)."""
    rec = {x["quantity"]: x for x in row["reconciliation"]}
    for q in ("requests", "generation_tokens", "prompt_tokens"):
        assert rec[q]["status"] == "ok" and rec[q]["server"] == rec[q]["client"] > 0, rec[q]
    assert rec["generation_tokens"]["client"] == row["gen_total"] * row["rounds"]  # the point's rounds: a row holds one round's
    assert rec["ttft_mean_ms"]["status"] in ("ok", "MISMATCH") and rec["e2e_mean_ms"]["server"] > 0, rec


# ------------------------------------------------------------------ parity starts it: the endpoint's start/stop commands


def test_start_and_stop_commands_run_around_the_arm(parity_cli, tmp_path, vllm_setup):
    """The user's own launch script as engines.ep.start (it execs vLLM), a stop script that reads
    vLLM's request counter, then stops it and waits for its pid to go: start before the arm, stop
    after its last request (parity reaps the start command meanwhile, or the pid would stay)."""
    venv, checkpoint = vllm_setup
    port = free_port()
    events, pidfile, at_stop = tmp_path / "events.txt", tmp_path / "vllm.pid", tmp_path / "metrics-at-stop.txt"
    env = " ".join(f"{k}={v}" for k, v in {**venv.serve_env(), **VLLM_ENV}.items())
    start, stop = tmp_path / "start-vllm.sh", tmp_path / "stop-vllm.sh"
    start.write_text(f"#!/bin/sh\necho \"start $$\" >> {events}\necho $$ > {pidfile}\nexec env {env} {' '.join(vllm_argv(venv, checkpoint, port))}\n")
    metrics = f"import sys, urllib.request; sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:{port}/metrics', timeout=30).read().decode())"
    stop.write_text(f"#!/bin/sh\npid=$(cat {pidfile})\n{sys.executable} -c \"{metrics}\" > {at_stop}\nkill -TERM $pid\n"
                    f"while kill -0 $pid 2>/dev/null; do sleep 0.2; done\necho \"stop $pid\" >> {events}\n")  # fmt: skip
    for f in (start, stop):
        f.chmod(0o755)
    prof = endpoint_profile(tmp_path, port, free_port(), start=str(start), stop=str(stop))
    doc, run = snapshot(parity_cli, tmp_path, prof, "--engines", "ep", "--repeat", "1", "--no-gates")

    lines = events.read_text().split()
    assert lines[0::2] == ["start", "stop"] and lines[1] == lines[3], lines  # once each, the same process
    pid = int(lines[1])
    assert "Application startup complete" in (run / "servers/ep-r0.log").read_text()  # the start command's own log
    # the stop script read vLLM's counter after the arm: every request of the arm had been served
    served = sum(float(v) for v in re.findall(r"^vllm:request_success_total\{[^}]*\} ([0-9.e+]+)$", at_stop.read_text(), re.M))
    sent = sum(len(json.loads((run / f).read_text())) for f in ("requests/ep-r0-warmup.json", "requests/ep-r0-n2.json", "outputs/ep.json"))
    point_warmup = sum(r["point_warmup"]["requests"] for r in json.loads((run / "summary.json").read_text())["rows"])  # discarded, before each point
    assert served == sent + point_warmup and sent > 2 and point_warmup == 1
    (row,) = doc["rows"]
    assert row["engine"] == "ep" and row["valid"], row["invalid_reasons"]
    vllm_counters_reconcile(row)
    rec = json.loads((run / "servers/ep-r0.json").read_text())
    assert rec["argv"] == [] and rec["started_by_parity"] is False and rec["start"] == [str(start)] and rec["stop"] == [str(stop)]
    assert port_free(port)  # nothing left behind
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_start_command_that_fails_or_is_missing_ends_the_run(parity_cli, tmp_path):
    prof = endpoint_profile(tmp_path, free_port(), free_port(), start="sh -c 'echo no GPU here >&2; exit 3'", ready_timeout_s=600)
    r = parity_cli("--artifacts", str(tmp_path / "runs"), "snapshot", "-p", str(prof), "--engines", "ep", "--no-gates", timeout=300)
    assert r.returncode == 4, r.stderr[-2000:]
    assert "parity: error: ep's start command (sh -c 'echo no GPU here >&2; exit 3') exited with code 3 before becoming ready" in r.stderr
    assert "no GPU here" in r.stderr  # its log's tail
    assert (tmp_path / "lock" / "owner").read_text().startswith("FREE released-by-")  # the lock given back
    # a start command that is not there: the dry run names the path (2), the real run refuses it in
    # the same words (2) before its lock and run dir (issue 56, N6)
    prof = endpoint_profile(tmp_path / "missing", free_port(), free_port(), start=str(tmp_path / "no-such-serve.sh"))
    r = parity_cli("--artifacts", str(tmp_path / "missing-runs"), "snapshot", "-p", str(prof), "--engines", "ep", "--dry-run", timeout=300)
    assert r.returncode == 2 and f"start command of ep: {tmp_path}/no-such-serve.sh does not exist" in r.stderr, r.stderr[-2000:]
    r = parity_cli("--artifacts", str(tmp_path / "missing-runs"), "snapshot", "-p", str(prof), "--engines", "ep", "--no-gates", timeout=300)
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1] == f"parity: error: start command of ep: {tmp_path}/no-such-serve.sh does not exist", r.stderr[-2000:]
    assert [p.name for p in (tmp_path / "missing-runs").iterdir() if p.is_dir() and not p.name.endswith("-dry-run")] == []


# ------------------------------------------------------------------ started by the test: parity only reaches it


@pytest.fixture(scope="module")
def vllm_endpoint(vllm_setup, tmp_path_factory):
    """vLLM started by this test (not by parity); its port."""
    venv, checkpoint = vllm_setup
    port = free_port()
    log = tmp_path_factory.mktemp("vllm-endpoint") / "vllm.log"
    argv = vllm_argv(venv, checkpoint, port)
    proc = LocalRunner().spawn(argv, env={**venv.serve_env(), **VLLM_ENV}, log_path=str(log))
    try:
        wait_ready(proc, port, Launch(argv, {}, [], "/health", SERVED, "prompt", "/v1/models", "/metrics", engine="vllm"), VLLM_READY_S, 10)
    except BaseException:
        proc.stop(20)
        raise
    yield port
    proc.stop(20)


def test_snapshot_of_paged_against_a_running_vllm_endpoint(parity_cli, tmp_path, vllm_endpoint, engine_bins):
    port = vllm_endpoint
    prof = endpoint_profile(tmp_path, port, free_port())
    doc, run = snapshot(parity_cli, tmp_path, prof, "--repeat", "2")

    # both measured in paired blocks
    assert doc["engines"] == ["paged", "ep"] and doc["reference_engine"] == "paged"
    assert [sorted(b["order"]) for b in doc["blocks"]] == [["ep", "paged"], ["ep", "paged"]] and doc["stop"]["blocks"] == 2
    rows = {(r["engine"], r["repeat"]): r for r in doc["rows"]}
    assert set(rows) == {("paged", 0), ("paged", 1), ("ep", 0), ("ep", 1)}
    assert all(r["valid"] for r in rows.values()), [(k, r["invalid_reasons"]) for k, r in rows.items() if not r["valid"]]
    paired = {p["metric"]: p for p in doc["paired"] if p["engine"] == "ep"}
    assert paired["decode_agg_tps"]["reference"] == "paged" and paired["decode_agg_tps"]["n_blocks"] == 2 and len(paired["decode_agg_tps"]["ratios"]) == 2
    assert "ep/paged decode_agg at N=2" in doc["headline"]
    # reconciliation through the endpoint's own /metrics (vLLM's counters), scraped around each point
    for rep in (0, 1):
        vllm_counters_reconcile(rows[("ep", rep)])
        assert "vllm:generation_tokens_total" in (run / f"servers/ep-r{rep}-n2.metrics.txt").read_text()
    # the same weights, greedy: the endpoint answers as paged does
    assert doc["output_parity"]["status"] == "pass", doc["output_parity"]["failures"]

    # the binary gates: on paged's binaries only; not applicable to the endpoint
    assert doc["binary_gates"]["ep"] == {"status": "not applicable", "why": "not applicable: parity runs no binary of an endpoint"}
    assert doc["binary_gates"]["paged"]["status"] == "gated" and "md5 of tiny" in doc["binary_gates"]["paged"]["why"]
    gates = json.loads((run / "gates.json").read_text())
    checks = [c["check"] for phase in ("pre", "post") for c in gates[phase]["checks"]]
    assert gates["status"] == "pass" and "md5 tiny/paged" in checks and not any("ep" in c.split() or "/ep" in c for c in checks)
    builds = json.loads((run / "builds.json").read_text())
    assert builds["ep"] == {"engine": "ep", "kind": "endpoint", "base_url": f"http://127.0.0.1:{port}", "build": "not applicable: parity neither builds nor starts an endpoint"}
    assert builds["paged"]["key"]
    # memory per process: paged's server tree; the endpoint has no process of parity's
    mem = doc["efficiency"]["memory"]
    assert mem["engines"]["ep"]["not_applicable"] is True and mem["engines"]["ep"]["peak_mib"] is None and mem["engines"]["ep"]["source"].startswith("not applicable")
    assert mem["engines"]["paged"]["peak_mib"] > 0 and "VmRSS" in mem["engines"]["paged"]["source"]
    assert mem["ratios"] == [{"engine": "ep", "reference": "paged", "peak": None, "steady": None, "why": "not applicable: ep is not a process parity started"}]
    assert all(a["memory"]["not_applicable"] for a in doc["arms"] if a["engine"] == "ep")
    assert json.loads((run / "servers/ep-r0.json").read_text())["started_by_parity"] is False
    # % of roofline: the bytes per step come from the GGUF paged reads; which weights the endpoint serves parity does not know
    points = {p["engine"]: p for p in doc["efficiency"]["points"]}
    assert points["paged"]["pct_measured"] > 0 and points["ep"]["achieved_gbps"] is None and points["ep"]["why"].startswith("not applicable: parity does not know the weights")

    # the report says the same
    r = parity_cli("report", str(run), "--out-dir", str(tmp_path / "reports"), "--no-plots", "--json", timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    md = Path(json.loads(r.stdout)["report"]).read_text()
    assert "| ep | not applicable | not applicable: parity runs no binary of an endpoint |" in md
    assert re.search(r"^\| paged \| gated \| pre and post: md5 of tiny; op-oracle ", md, re.M)
    assert f"| ep | endpoint http://127.0.0.1:{port} (not built or started by parity) | not applicable | not applicable | not applicable | not applicable | not applicable |" in md
    assert "| ep | - | - | 2 | not applicable: the server is not a process parity started (memory per process does not apply) |" in md
    assert "- ep N=2: not applicable: parity does not know the weights engine ep serves (no bytes per step)" in md
    recon = re.findall(r"^\| ep \| [01] \| 2 \| (requests|generation_tokens|prompt_tokens) \| [0-9.]+ \| [0-9.]+ \| exact \| ok \|$", md, re.M)
    assert sorted(recon) == sorted(["requests", "generation_tokens", "prompt_tokens"] * 2)


def test_dry_run_and_doctor_say_whether_the_endpoint_answers(parity_cli, tmp_path, vllm_endpoint):
    up = endpoint_profile(tmp_path / "up", vllm_endpoint, free_port())
    r = parity_cli("--artifacts", str(tmp_path / "runs"), "snapshot", "-p", str(up), "--dry-run", "--json", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    plan = json.loads(r.stdout)
    ep = next(c for c in plan["commands"] if c["engine"] == "ep")
    assert ep["argv"] == [] and ep["spawned"] is False and ep["answering"] == "HTTP 200" and ep["ready"] == f"http://127.0.0.1:{vllm_endpoint}/health"
    assert plan["go_no_go"]["go"] and not [k for k in plan["go_no_go"]["paths"] if k.endswith("of ep")]  # no binary of the endpoint to check
    human = parity_cli("--artifacts", str(tmp_path / "runs"), "snapshot", "-p", str(up), "--dry-run", timeout=300)
    human.stderr += human.stdout
    assert f"# ep (served as {SERVED}; ready: http://127.0.0.1:{vllm_endpoint}/health within {VLLM_READY_S} s" in human.stderr
    assert "not started by parity; answering now: HTTP 200; start: none (it already runs); stop: none" in human.stderr
    d = parity_cli("doctor", "-p", str(up), "--json", timeout=300)
    row = {c["name"]: c for c in json.loads(d.stdout)["checks"]}["endpoint"]
    assert row["status"] == "ok" and row["found"].startswith(f"ep: http://127.0.0.1:{vllm_endpoint}/health answers (HTTP 200)")

    # nothing listens there and no start command: the real run could not start: NO-GO (4), and the doctor says missing
    down = endpoint_profile(tmp_path, free_port(), free_port(), ready_probe_timeout_s=2)
    r = parity_cli("--artifacts", str(tmp_path / "runs"), "snapshot", "-p", str(down), "--dry-run", timeout=300)
    assert r.returncode == 4, r.stderr[-2000:]
    assert re.search(r"NO GO: engine ep: http://127\.0\.0\.1:\d+/health does not answer \(no \(\w+\)\) and it has no start command: start it first", r.stderr)
    d = parity_cli("doctor", "-p", str(down), "--json", timeout=300)
    row = {c["name"]: c for c in json.loads(d.stdout)["checks"]}["endpoint"]
    assert row["status"] == "missing" and "give engines.ep.start" in row["consequence"]
