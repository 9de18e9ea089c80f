"""Engine adapters (exact argv/env) and the server lifecycle, run for real
against the fake `vllm` executable (tests/fakes/bin/vllm)."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from parity.config import load_profile
from parity.context import Context, Run
from parity.errors import ConfigError, InfraError
from parity.engines.bound import bind
from parity.engines.base import Launch
from parity.engines.vllm import HARNESS_VARS as VLLM_HARNESS_VARS
from parity.runners.local import LocalRunner
from parity.engines.server import serving
from parity.ports import check_port, parse_proc_net_tcp
from parity.ui import Output
from ports import free_port

FAKE_VLLM = Path(__file__).resolve().parent.parent / "fakes" / "bin" / "vllm"


def launch(ctx, engine: str, *args, **kw):
    return bind(ctx.profile, engine).launch(*args, **kw)


def model_for(ctx, engine: str, model: str) -> str:
    return bind(ctx.profile, engine).model_file(model)




def make_ctx(tmp_path, extra: str = "") -> Context:
    (tmp_path / "weights").mkdir(exist_ok=True)
    (tmp_path / "bin").mkdir(exist_ok=True)
    (tmp_path / "bin" / "llama-server").write_text("")
    prof = tmp_path / "p.yaml"
    prof.write_text(
        f"""extends: smoke
models:
  small: {{vllm_path: {tmp_path}/weights, served_name: small-served}}
engines:
  vllm:
    kind: vllm
    vllm_bin: {FAKE_VLLM}
    gpu_memory_utilization: 0.5
    max_model_len: 2048
    max_num_seqs: 64
    tensor_parallel_size: 1
    extra_args: [--enforce-eager]
    dtype: null
    env: {{VLLM_LOGGING_LEVEL: DEBUG}}
    ready_timeout_s: 20
    ready_probe_timeout_s: 2
  prebuilt: {{kind: llama, bin_dir: {tmp_path}/bin, env: {{A: "1"}}, paths: {{fast: {{B: "2"}}}}, default_path: fast}}
serving: {{model: small}}
{extra}"""
    )
    return Context(profile=load_profile(str(prof)), runner=LocalRunner(), out=Output(json_mode=True), artifacts_root=tmp_path / "runs")


def test_vllm_launch_exact_argv_and_env(tmp_path):
    ctx = make_ctx(tmp_path)
    s = ctx.profile.serving
    la = launch(ctx, "vllm", model_for(ctx, "vllm", "small"), 8123, s)
    assert la.argv == [
        str(FAKE_VLLM), "serve", f"{tmp_path}/weights",
        "--gpu-memory-utilization", "0.5", "--max-model-len", "2048", "--max-num-seqs", "64", "--tensor-parallel-size", "1",
        "--served-model-name", "small-served", "--host", "127.0.0.1", "--port", "8123", "--enforce-eager",
    ]  # fmt: skip
    # as the users start it: no hub lookups, the vLLM binary's own bin first on PATH
    # engines.X.env merges over the smoke profile's (its worker in the engine-core process)
    assert la.env == {"HF_HUB_OFFLINE": "1", "PATH": f"{FAKE_VLLM.parent}{os.pathsep}{os.environ['PATH']}", "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_LOGGING_LEVEL": "DEBUG",
                      "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}  # fmt: skip
    assert set(la.unset) == set(VLLM_HARNESS_VARS) and "VLLM_LOGGING_LEVEL" not in la.unset
    assert la.count == "usage" and la.request_extra == {"stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    assert (la.ready_path, la.models_path, la.metrics_path, la.tokenize, la.served_name) == ("/health", "/v1/models", "/metrics", "prompt", "small-served")


def test_harness_knob_in_vllm_env_is_refused(tmp_path):
    ctx = make_ctx(tmp_path)
    ctx.profile.engines["vllm"].env["VLLM_MAX_NUM_SEQS"] = "8"
    with pytest.raises(ConfigError, match="engines.vllm.env.VLLM_MAX_NUM_SEQS: a parity setting.*engines.vllm.max_num_seqs"):
        launch(ctx, "vllm", "/m", 1, ctx.profile.serving)


def test_llama_launch_exact_argv_and_path_env(tmp_path):
    ctx = make_ctx(tmp_path)
    s = ctx.profile.serving
    la = launch(ctx, "prebuilt", "/models/m.gguf", 8124, s)
    assert la.argv == [
        f"{tmp_path}/bin/llama-server", "-m", "/models/m.gguf", "-c", str(s.ctx), "--parallel", str(s.parallel), "-b", str(s.batch), "-ub", str(s.ubatch),
        "--log-prefix", "--log-timestamps", "--log-verbosity", "4", *s.server_args, "--host", "127.0.0.1", "--port", "8124", "--no-webui", "--metrics",
    ]  # fmt: skip
    assert la.env == {"A": "1", "B": "2"} and la.unset == [] and la.served_name == "m.gguf" and la.models_path is None
    assert (la.metrics_path, la.count, la.request_extra) == ("/metrics", "timings", {"timings_per_token": True})


def test_vllm_lifecycle_scrubs_harness_env_and_stops_the_group(tmp_path, monkeypatch):
    ctx = make_ctx(tmp_path)
    port = free_port()
    monkeypatch.setenv("VLLM_MODEL", "leaked-from-an-old-harness")
    monkeypatch.setenv("VLLM_EXTRA_ARGS", "--bogus")
    monkeypatch.setenv("FAKE_VLLM_RECORD", str(tmp_path / "record.json"))
    monkeypatch.setenv("FAKE_VLLM_STARTUP_S", "1")  # not listening for a second, like a model load
    la = launch(ctx, "vllm", model_for(ctx, "vllm", "small"), port, ctx.profile.serving)
    log = tmp_path / "vllm.log"
    with serving(Run(None, ctx.out, ctx.runner), la, port, str(log), 20, 2, 5) as (proc, ready_s):
        assert ready_s >= 0.9
        with pytest.raises(InfraError, match=f"port {port} on 127.0.0.1 is already in use by pid {proc.pid} "):
            check_port(port)
    assert proc.poll() is not None
    check_port(port)  # free again
    rec = json.loads((tmp_path / "record.json").read_text())
    assert rec["env"] == {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_LOGGING_LEVEL": "DEBUG", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}  # harness knobs gone, the profiles' runtime variables kept
    text = log.read_text()
    assert "Unknown vLLM environment variable" not in text and "Application startup complete" in text


def test_early_exit_during_readiness_is_infra_error_with_log_tail(tmp_path, monkeypatch):
    ctx = make_ctx(tmp_path)
    monkeypatch.setenv("FAKE_VLLM_CRASH", "1")
    port = free_port()
    la = launch(ctx, "vllm", model_for(ctx, "vllm", "small"), port, ctx.profile.serving)
    with pytest.raises(InfraError, match=r"(?s)vllm exited with code 1 before becoming ready; log tail:.*no kernel image is available"):
        with serving(Run(None, ctx.out, ctx.runner), la, port, str(tmp_path / "crash.log"), 20, 2, 5):
            pass


def test_not_ready_within_budget_is_a_clean_error_and_the_server_is_stopped(tmp_path, monkeypatch):
    ctx = make_ctx(tmp_path)
    monkeypatch.setenv("FAKE_VLLM_STARTUP_S", "60")
    port = free_port()
    la = launch(ctx, "vllm", model_for(ctx, "vllm", "small"), port, ctx.profile.serving)
    spawned = []
    real_spawn = ctx.runner.spawn
    ctx.runner.spawn = lambda *a, **k: spawned.append(real_spawn(*a, **k)) or spawned[-1]
    with pytest.raises(InfraError, match=r"(?s)vllm not ready within 1.5 s on port \d+ \(\d+ probes, last: ConnectionRefusedError\); raise engines.vllm.ready_timeout_s.*log tail:.*non-default args"):
        with serving(Run(None, ctx.out, ctx.runner), la, port, str(tmp_path / "slow.log"), 1.5, 0.5, 2):
            pass
    assert spawned[0].poll() is not None  # stopped, not left loading


def test_wrong_served_name_is_caught_at_readiness(tmp_path):
    ctx = make_ctx(tmp_path)
    port = free_port()
    la = launch(ctx, "vllm", model_for(ctx, "vllm", "small"), port, ctx.profile.serving)
    la = Launch(la.argv, la.env, la.unset, la.ready_path, "some-other-name", la.tokenize, la.models_path, engine="vllm")
    with pytest.raises(InfraError, match=r"does not serve 'some-other-name' .*models \['small-served'\]"):
        with serving(Run(None, ctx.out, ctx.runner), la, port, str(tmp_path / "n.log"), 20, 2, 5):
            pass


def test_parse_proc_net_tcp_finds_listeners_only():
    table = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 0100007F:46A2 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 123456 1 0000000000000000 100 0 0 10 0\n"
        "   1: 0100007F:46A2 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 777 1 0000000000000000 20 4 30 10 -1\n"
    )
    assert parse_proc_net_tcp(table, 0x46A2) == [123456]
    assert parse_proc_net_tcp(table, 80) == []


def test_vllm_model_path_missing_makes_fake_exit_like_vllm(tmp_path):
    ctx = make_ctx(tmp_path)
    port = free_port()
    la = launch(ctx, "vllm", str(tmp_path / "nope"), port, ctx.profile.serving)
    with pytest.raises(InfraError, match="exited with code 1"):
        with serving(Run(None, ctx.out, ctx.runner), la, port, str(tmp_path / "m.log"), 20, 2, 5):
            pass
    assert os.path.exists(tmp_path / "m.log")


@pytest.mark.parametrize("options,message", [
    ({"repeat": -1}, "--repeat must be a positive integer"),
    ({"repeat": 0}, "--repeat must be a positive integer"),
    ({"ptok": 0}, "--ptok must be a positive integer"),
    ({"ctx": -5}, "--ctx must be a positive integer"),
    ({"npl": [4, 0]}, "--npl: expected positive integers"),
])
def test_snapshot_step_checks_numbers_like_the_cli(tmp_path, options, message):
    """A campaign's snapshot step goes through the same checks as `parity snapshot` (before any server)."""
    from parity.errors import UsageError
    from parity.serving.snapshot import campaign_step

    with pytest.raises(UsageError, match=message):
        campaign_step(make_ctx(tmp_path), dict(options))


@pytest.mark.parametrize("options,message", [({"npl": [0]}, "--npl: expected positive integers"), ({"npp": [32, -1]}, "--npp: expected positive integers")])
def test_bench_step_checks_numbers_like_the_cli(tmp_path, options, message):
    from parity.errors import UsageError
    from parity.bench.run import campaign_step

    with pytest.raises(UsageError, match=message):
        campaign_step(make_ctx(tmp_path), dict(options))


def test_server_closing_mid_answer_is_a_failed_probe(tmp_path):
    """A half-written /health answer (a server crashing mid-response) is one more failed probe,
    ending in the not-ready InfraError, never an escaping protocol error."""
    import threading

    from parity.engines.server import wait_ready

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    port = srv.getsockname()[1]

    def serve():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            c.recv(4096)
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"sta")
            c.close()

    threading.Thread(target=serve, daemon=True).start()

    class Alive:
        log_path = None

        def poll(self):
            return None

    try:
        with pytest.raises(InfraError, match="not ready within 1 s .*HttpError"):
            wait_ready(Alive(), port, Launch(["x"], {}, [], "/health", "m", "content"), budget_s=1, probe_timeout_s=0.5, poll_s=0.1)
    finally:
        srv.close()


def test_profile_serve_capture_keeps_the_launch_and_the_model_name(tmp_path, monkeypatch):
    """--workload serve wraps the engine's own Launch in nsys: the served-model check (/v1/models),
    metrics path and engine name survive, and --model names the served model as in snapshot."""
    import contextlib

    from parity.context import Run
    from parity.profiles import capture as cap

    ctx = make_ctx(tmp_path, "models:\n  other: {path: x.gguf, vllm_path: /w/other, served_name: other-served}\n")
    plan = cap.make_plan(ctx.profile, ctx.runner, ctx.out, engine="vllm", workload="serve", ntgs=[8], npl=2, model="other", graph_node=True, dry=True, tracer="nsys", blocks=1, out_dir=str(tmp_path / "profile"))
    (c,) = plan.captures
    assert c.server.served_name == "other-served" and "other-served" in c.argv
    seen = {}

    @contextlib.contextmanager
    def fake_serving(run, la, *a, **k):
        seen["la"] = la
        raise RuntimeError("stop here")
        yield

    monkeypatch.setattr(cap, "serving", fake_serving)
    with pytest.raises(RuntimeError, match="stop here"):
        cap._capture_serve(Run(None, ctx.out, ctx.runner), c, plan)
    la = seen["la"]
    assert la.argv == c.argv and la.argv[:2] == [plan.nsys, "profile"]
    assert (la.models_path, la.metrics_path, la.engine, la.kind) == ("/v1/models", "/metrics", "vllm", "vllm")
