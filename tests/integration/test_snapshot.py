"""Same-session serving sweeps for real: two llama-server builds (paged demo
series vs stock) on the tiny model, pre/post gates, summary files; an
interrupted sweep; paged vs the fake `vllm` executable."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from ports import free_port

FAKE_BIN = REPO / "tests" / "fakes" / "bin"




def servers_on(port: int) -> list[int]:
    """pids whose command line serves on this port (llama-server or the fake vllm)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--port" in cmd and str(port).encode() in cmd and any(b"llama-server" in c or c.endswith(b"/vllm") for c in cmd):
            out.append(int(pid))
    return out


def interrupt(p: subprocess.Popen) -> bytes:
    """Ctrl-C a running parity a beat after its servers are up; its output once it ended."""
    time.sleep(0.3)
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=60)
    return out


@pytest.fixture
def profile_file(tmp_path, engine_bins, tiny_model):
    def make(**serving) -> tuple[Path, int]:
        port = free_port()
        (tmp_path / "hf").mkdir(exist_ok=True)
        # the tiny model streams 16 tokens in milliseconds: no minimum window here (validity has its own tests);
        # one round a point, so a point is N requests (rounds: tests/integration/test_ttft_real.py)
        shape = {"port": port, "npl": [1, 4], "ptok": 32, "gen": 16, "parallel": 4, "ctx": 1024, "model": "tiny", "min_window_s": 0, "min_requests": 1,
                 "warmup": {"requests": 2, "gen": 4}, "settle_s": 0, "repeat": 1, "output_parity": {"enabled": False}, **serving}
        p = tmp_path / "profile.yaml"
        p.write_text(
            "extends: smoke\n"
            f"lock: {{dir: {tmp_path}/lock, poll_s: 0.5, timeout_s: 60}}\n"
            f"serving: {json.dumps(shape)}\n"
            f"models: {{tiny: {{vllm_path: {tmp_path}/hf, served_name: tiny-hf}}}}\n"
            f"engines: {{vllm: {{kind: vllm, vllm_bin: {FAKE_BIN}/vllm, ready_timeout_s: 30, max_model_len: 1024, env: {{VLLM_LOGGING_LEVEL: INFO}}}}}}\n"
        )
        return p, port

    return make


def lock_free(lock_dir: Path) -> bool:
    owner = lock_dir / "owner"
    return not owner.exists() or owner.read_text().startswith("FREE")


def read_tsv(path: Path) -> list[dict]:
    return list(csv.DictReader(path.open(), delimiter="\t"))


GEN = 384  # ~0.7 s a stream: at 32 (~0.14 s), and at 96 (~0.18 s) beside two CPU hogs, a starved client (four workers on two cores) read one whole stream at once
CTX = 2048  # 4 slots of 512: room for 32 + GEN


def test_gated_sweep_paged_vs_stock(parity_cli, profile_file, tmp_path):
    # the small model: the tiny one streams 16 tokens in ~2 ms, often in one read, which leaves no decode interval to time
    prof, port = profile_file(model="small", gen=GEN, ctx=CTX)
    r = parity_cli("--artifacts", str(tmp_path / "runs"), "snapshot", "--profile", str(prof), "--engines", "paged,stock", "--json", timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    run = Path(doc["run_dir"])
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["valid"] is True
    gates = json.loads((run / "gates.json").read_text())
    assert gates["pre"]["status"] == "pass" and gates["post"]["status"] == "pass"
    assert (run / "hardware.txt").is_file() and (run / "gate_summary.tsv").is_file()

    rows = read_tsv(run / "parity_summary.tsv")
    data = [x for x in rows if x["kind"] == "row"]
    assert [(x["engine"], x["n"]) for x in data] == [("paged", "1"), ("paged", "4"), ("stock", "1"), ("stock", "4")]
    by_cell = {(r["engine"], str(r["n"])): r for r in doc["rows"]}
    timed = set()
    for x in data:
        assert x["requests"] == x["valid_requests"] == x["n"] and x["invalid_requests"] == "0" and x["valid"] == "True"
        wall, agg, pre = (float(x[k]) for k in ("wall_s", "agg_tps", "prefill_tps"))
        assert 0 < wall < 60 and 0 < agg < 1e6 and 0 < pre < 1e7
        if x["decode_agg_tps"] == "":  # a client starved for a whole stream (2 cores, 4 suite workers; once in CI) read it at once: no decode window, and the row says so
            row = by_cell[(x["engine"], x["n"])]
            assert row["decode_window_s"] == 0 and row["decode_window_reads"] == 0 and "one read" in row["why"]["decode_agg_tps"], row
        else:
            assert 0 < float(x["decode_agg_tps"]) < 1e6
            timed.add(x["engine"])
        assert int(x["gen_total"]) == int(x["n"]) * GEN and int(x["prompt_tok_total"]) == int(x["n"]) * 32
        assert agg == pytest.approx(int(x["n"]) * GEN / wall, rel=0.01 + 1e-4 / wall)  # every token counted (wall_s is rounded to 0.1 ms)
        assert 0 < float(x["ttft_p50_ms"]) <= float(x["ttft_p99_ms"]) <= wall * 1000 + 0.05  # a stream read at once: its TTFT is its wall (rounded to 0.1 ms)
    users = (run / "summary.tsv").read_text().splitlines()  # the users' own layout, for their tools
    assert users[0] == "arm\tn\tagg_tps\tdecode_agg_tps\tdecode_perseq_tps\tprefill_tps\tttft_mean_ms\twall_s"
    assert "ratio\tn\tpaged_decode_over_stock\tpaged_perseq_over_stock\tpaged_agg_over_stock\tpaged_ttft_over_stock" in users
    ratios = [x for x in rows if x["kind"] == "ratio"]
    assert [(x["engine"], x["reference"], x["n"]) for x in ratios] == [("paged", "stock", "1"), ("paged", "stock", "4")]
    assert timed == {"paged", "stock"}  # a starved row is the exception: each engine timed a decode window
    for x in ratios:
        med = {m["engine"]: m for m in doc["medians"] if str(m["n"]) == x["n"]}
        a, b = med["paged"]["decode_agg_tps"], med["stock"]["decode_agg_tps"]
        assert float(x["decode_agg_tps"]) == pytest.approx(a / b, rel=1e-3) if a and b else x["decode_agg_tps"] == ""

    # every request's tokens were counted from the stream, checked against GEN and the server's usage, and recorded
    for eng in ("paged", "stock"):
        for n in (1, 4):
            reqs = json.loads((run / f"requests/{eng}-r0-n{n}.json").read_text())
            assert len(reqs) == n and all(q["tokens"] == q["usage_tokens"] == GEN == q["expected_tokens"] and q["error"] is None and q["valid"] for q in reqs)
            assert all(q["prompt_tokens"] == 32 for q in reqs)
        warm = json.loads((run / f"requests/{eng}-r0-warmup.json").read_text())
        assert len(warm) == 2 and all(q["tokens"] == 4 for q in warm)  # the warmup ran, and is not in any metric
    rec = {r["engine"]: r for r in doc["rows"] if r["n"] == 4}
    for eng in ("paged", "stock"):  # llama-server --metrics agrees with the client on every token
        recon = {q["quantity"]: q for q in rec[eng]["reconciliation"]}
        assert recon["generation_tokens"]["status"] == "ok" and recon["generation_tokens"]["server"] == 4 * GEN
        assert recon["requests"]["status"] == "not exposed"
    assert "LLAMA_KV_PAGED" in json.loads((run / "servers/paged-r0.json").read_text())["env"]
    assert "main: server is listening" in (run / "servers/stock-r0.log").read_text() or (run / "servers/stock-r0.log").stat().st_size > 0
    assert servers_on(port) == []
    assert lock_free(tmp_path / "lock")


def test_sigint_mid_sweep_stops_every_server(profile_file, tmp_path):
    # long enough generation that the interrupt lands while requests stream
    prof, port = profile_file(npl=[4], gen=1900, ctx=8192, parallel=4, model="small")  # the small model's slots hold 2048 tokens
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    p = subprocess.Popen([sys.executable, "-m", "parity", "--artifacts", str(tmp_path / "runs"), "snapshot", "--profile", str(prof), "--engines", "paged,stock", "--no-gates"],
                         cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not list((tmp_path / "runs").glob("*/servers/paged-r0.log")):
            time.sleep(0.2)
        log = next((tmp_path / "runs").glob("*/servers/paged-r0.log"))
        while time.monotonic() < deadline and "launch_slot_" not in log.read_text(errors="replace"):
            time.sleep(0.1)  # the N=4 batch is being served
        assert servers_on(port), "the paged server should be up"
        out = interrupt(p)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, out[-2000:]
    assert servers_on(port) == []
    run = next((tmp_path / "runs").glob("*snapshot*"))
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    assert not (run / "requests/paged-r0-n4.json").exists()  # interrupted mid-batch, not after it
    assert lock_free(tmp_path / "lock")


def test_paged_vs_fake_vllm_full_snapshot(parity_cli, profile_file, tmp_path):
    # 128 tokens: 16 once arrived in one read on a box with three suite workers (a decode window
    # of 0 s, so no decode rate: rightly None, but not what this test is about)
    prof, port = profile_file(npl=[2], gen=128)
    env = {"VLLM_MODEL": "old-harness-value", "FAKE_VLLM_RECORD": str(tmp_path / "vllm-record.json")}
    r = parity_cli("--artifacts", str(tmp_path / "runs"), "snapshot", "--profile", str(prof), "--engines", "paged,vllm", "--no-gates", "--repeat", "2", "--order", "abba", "--json", env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    run = Path(doc["run_dir"])
    assert doc["reference_engine"] == "vllm" and doc["order"] == ["r0:paged", "r0:vllm", "r1:vllm", "r1:paged"]
    assert [(m["engine"], m["n"], m["repeats"]) for m in doc["medians"]] == [("paged", 2, 2), ("vllm", 2, 2)]
    (ratio,) = doc["ratios"]
    assert ratio["engine"] == "paged" and ratio["reference"] == "vllm" and ratio["decode_agg_tps"] > 0
    assert all(row["valid_requests"] == 2 for row in doc["rows"])
    launched = json.loads((run / "servers/vllm-r0.json").read_text())
    argv = launched["argv"][3:] if launched["affinity"]["applied"] else launched["argv"]  # a box with >= 8 cores: under taskset -c
    assert launched["argv"][:2] == ["taskset", "-c"] if launched["affinity"]["applied"] else "not applied" in launched["affinity"]["why"]
    assert argv[1:3] == ["serve", str(tmp_path / "hf")] and "--served-model-name" in argv
    assert json.loads((tmp_path / "vllm-record.json").read_text())["env"] == {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_LOGGING_LEVEL": "INFO"}  # the smoke profile's and this one's
    assert "vllm:generation_tokens_total" in (run / "servers/vllm-r0-n2.metrics.txt").read_text()
    assert json.loads((run / "manifest.json").read_text())["valid"] is False  # --no-gates: ungated numbers are marked
    assert servers_on(port) == []
    # telemetry around every point: host samples, the client's and the server tree's CPU time, the short summary on the row
    for row in doc["rows"]:
        tel = json.loads((run / f"telemetry/{row['engine']}-r{row['repeat']}-n2.json").read_text())
        assert tel["samples"] and all(isinstance(s["load1"], float) for s in tel["samples"]), tel["summary"]
        assert all(s["server_pids"] for s in tel["samples"])  # the server's process tree, seen in every sample
        cpu = tel["summary"]["cpu"]
        assert cpu["client_cpu_s"] > 0 and cpu["server_cpu_s"] > 0, cpu
        assert tel["summary"]["gpu"]["source"] is None and "no GPU telemetry" in tel["summary"]["gpu"]["note"]  # this box: no NVML, no nvidia-smi
        assert row["telemetry"]["file"] == f"telemetry/{row['engine']}-r{row['repeat']}-n2.json" and row["telemetry"]["server_cpu_s"] == cpu["server_cpu_s"]
        assert row["flags"] == [] and row["telemetry"]["foreign_pids"] is None  # no GPU samples: nothing to judge
        assert row["engine_timing"]["client_e2e_ms_mean"] > 0
        # energy per token: no energy counter on this box, so not applicable with the reason, never a 0 (parity/telemetry/energy.py)
        why = row["why"]["j_per_output_tok"]
        assert why.startswith("not applicable: no energy counter here (") and row["why"]["j_per_total_tok"] == why
        assert row["j_per_output_tok"] is None and row["j_per_total_tok"] is None and tel["energy"]["why"] == why
        assert row["energy"]["applicable"] is False and row["energy"]["output_tokens"] == 2 * 128
    assert not [p for p in doc["paired"] if p["metric"].startswith("j_per_")]  # nothing measured: nothing paired
    assert {"j_per_output_tok", "j_per_total_tok"} <= {m["name"] for m in doc["metrics"]}
    paged = [row for row in doc["rows"] if row["engine"] == "paged"]
    assert all(row["engine_timing"]["engine_decode_ms_mean"] > 0 and row["engine_timing"]["engine_decode_tps_mean"] > 0 for row in paged)  # llama-server's own timings
    arms = doc.get("arms") or json.loads((run / "summary.json").read_text())["arms"]
    assert all("applied" in a["affinity"] for a in arms)


def test_dry_run_starts_nothing_and_shows_every_command(parity_cli, profile_file, tmp_path):
    prof, port = profile_file()
    r = parity_cli("--artifacts", str(tmp_path / "runs"), "snapshot", "--profile", str(prof), "--engines", "paged,vllm", "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    paged, vllm = doc["commands"]
    assert paged["argv"][0].endswith("llama-server") and paged["env"]["LLAMA_KV_PAGED"] == "1"
    assert vllm["argv"][:2] == [f"{FAKE_BIN}/vllm", "serve"] and "VLLM_MODEL" in vllm["unset"]
    assert doc["port_free"] is True and "gpu" in doc["preflight"] and doc["metrics"]
    (only,) = (tmp_path / "runs").iterdir()  # the go/no-go's evidence, and no other run
    assert json.loads((only / "manifest.json").read_text())["status"] == "dry-run" and (only / "hardware.txt").is_file()
    assert servers_on(port) == []
    assert paged["model_error"] is None and paged["served_name"] == Path(paged["argv"][2]).name and vllm["served_name"] == "tiny-hf"


def test_dry_run_names_a_missing_model_file(parity_cli, profile_file, tmp_path):
    base, _ = profile_file()
    prof = tmp_path / "gone.yaml"
    prof.write_text(f"extends: {base}\nmodels: {{gone: {{path: {tmp_path}/gone.gguf}}}}\n")
    arts = ["--artifacts", str(tmp_path / "runs")]
    r = parity_cli(*arts, "snapshot", "--profile", str(prof), "--engines", "paged", "--model", "gone", "--dry-run")
    assert r.returncode == 2, r.stderr  # the users' DRY_RUN=1 is a go/no-go: this run could never start
    assert f"model gone: file not found: {tmp_path}/gone.gguf (a real run stops here)" in r.stderr
    assert "NO GO" in r.stderr + r.stdout and "gone.gguf" in r.stderr.strip().splitlines()[-1]
    assert "# paged (served as ?;" in r.stdout
    doc = json.loads(parity_cli(*arts, "snapshot", "--profile", str(prof), "--engines", "paged", "--model", "gone", "--dry-run", "--json").stdout)
    (paged,) = doc["commands"]
    assert paged["served_name"] is None and "gone.gguf" in paged["model_error"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--engines", "paged,paged"], "listed twice"),
        (["--engines", "nope"], "no such engine"),
        (["--npl", "8", "--parallel", "4"], "N=8 exceeds --parallel 4: engine paged would queue requests; raise --parallel to 8"),
        (["--order", "zig"], "--order must be"),
    ],
)
def test_bad_input_is_a_one_line_usage_error(parity_cli, profile_file, args, message):
    prof, _ = profile_file()
    r = parity_cli("snapshot", "--profile", str(prof), "--dry-run", *args)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr


def test_one_short_request_of_four_makes_the_point_invalid_not_a_median(parity_cli, profile_file, tmp_path):
    """The fake vLLM cuts every 4th completion short (2 warmups, then 4 measured: one short)."""
    prof, port = profile_file(npl=[4], repeat=2)
    r = parity_cli("--artifacts", str(tmp_path / "runs"), "snapshot", "--profile", str(prof), "--engines", "vllm", "--no-gates", "--json",
                   env={"FAKE_VLLM_SHORT": "3", "FAKE_VLLM_SHORT_EVERY": "4"}, timeout=600)  # fmt: skip
    assert r.returncode == 6, r.stderr[-2000:]  # an invalid measurement: the numbers are written, marked
    assert "point(s) broke a validity rule" in r.stderr.strip().splitlines()[-1]
    doc = json.loads(r.stdout)
    bad = [row for row in doc["rows"] if not row["valid"]]
    assert bad and all("requests invalid" in row["invalid_reasons"][0] and "13 of 16 tokens" in row["invalid_reasons"][0] for row in bad)
    (med,) = doc["medians"]
    assert med["repeats"] == len(doc["rows"]) - len(bad) and med["invalid_repeats"] == len(bad)  # not averaged in
    assert json.loads((Path(doc["run_dir"]) / "manifest.json").read_text())["valid"] is False and not doc["valid"]


@pytest.mark.parametrize("workload", [None, "sp"])
def test_a_server_that_dies_mid_run_is_named_with_its_signal_and_log(parity_cli, profile_file, tmp_path, workload):
    """The fake vLLM dies on SIGSEGV at its 3rd completion (2 warmups, then the point or the
    workload): the error names the engine, the signal and the log, not the client's refused
    connection (which a workload's next /tokenize call saw as an internal error before)."""
    wl = {"sp": {"kind": "shared-prefix", "groups": 2, "group_size": 2, "prefix_tokens": 64, "suffix_tokens": 8, "gen": 4}}
    prof, port = profile_file(npl=[4], repeat=2, workloads=wl)
    r = parity_cli("--artifacts", str(tmp_path / "runs"), "snapshot", "--profile", str(prof), "--engines", "vllm", "--no-gates", "--json",
                   *(["--workload", workload] if workload else []), env={"FAKE_VLLM_SEGV_AFTER": "2"}, timeout=600)  # fmt: skip
    assert r.returncode == 4, r.stderr[-2000:]
    last = r.stderr.strip().splitlines()[-1]
    assert "vllm server exited on signal 11 (SIGSEGV) during" in last and "servers/vllm-r0.log" in last and "Traceback" not in r.stderr
    (run,) = (tmp_path / "runs").glob("*")
    assert json.loads((run / "manifest.json").read_text())["status"] == "failed"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--ctx", "16"], "do not fit engine paged: it gives a request 4 tokens, set by -c 16 / --parallel 4"),
        (["--ptok", "600", "--ctx", "4096"], "600 prompt + 16 generated tokens do not fit engine paged: it gives a request 512 tokens, set by the model's training context"),
    ],
)
def test_a_shape_that_does_not_fit_a_slot_is_refused_before_the_lock(parity_cli, profile_file, tmp_path, args, message):
    prof, port = profile_file()
    (tmp_path / "lock").mkdir()
    (tmp_path / "lock" / "owner").write_text(f"someone-else {int(time.time())} pid=1 host=elsewhere\n")  # a held lock: a real run would wait
    r = parity_cli("--artifacts", str(tmp_path / "runs"), "snapshot", "--profile", str(prof), "--engines", "paged,stock", *args)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "runs").exists() and servers_on(port) == []  # before the lock, before any server


def test_forbidden_bench_env_is_refused_before_anything_starts(parity_cli, profile_file, tmp_path):
    prof, port = profile_file()
    r = parity_cli("--artifacts", str(tmp_path / "runs"), "snapshot", "--profile", str(prof), "--engines", "paged,stock", env={"GDN_TC": "3"})
    assert r.returncode == 2 and "GDN_TC" in r.stderr and servers_on(port) == []
