"""Two GPUs at once (parity.serving.crossover): --gpus / serving.gpus checked once before anything
starts, which GPU each engine gets per block (swapped every block), the server's env, the host
check, both arms run at once and an arm's failure stops its block with the real cause, the lock
record naming the GPUs, each arm's energy and telemetry reading its own GPU, each GPU's arm on its
own cores, the second server's port checked before the run dir and the lock, and the trace workload
admitted (its arms meet before every point), every other workload refused."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
import types
from pathlib import Path

import pytest

import parity.gpu.lock as L
from parity.config import LockConfig, TelemetryConfig, load_profile
from parity.context import Run
from parity.engines.bound import bind_all
from parity.errors import ConfigError, InfraError, UsageError
from parity.runners.local import LocalRunner
from parity.serving import crossover
from parity.serving.plan import SnapshotRequest
from parity.serving.snapshot import make_plan
from parity.telemetry import affinity, energy
from parity.telemetry.affinity import usable_cpus
from ports import free_port


@pytest.fixture(scope="module")
def smoke():
    return load_profile("smoke")


def write_profile(tmp_path: Path, text: str):
    p = tmp_path / "profile.yaml"
    p.write_text("extends: smoke\n" + text)
    return load_profile(str(p))


@pytest.mark.parametrize("given, gpus", [("0,1", [0, 1]), (" 1 , 0 ", [1, 0]), ([2, 3], [2, 3]), ("0,1,2", [0, 1, 2]), (None, None)])
def test_gpus_parse_from_the_flag_or_a_step_list(given, gpus):
    assert crossover.parse_gpus(given) == gpus


@pytest.mark.parametrize("given, says", [
    ("a,1", "--gpus: expected GPU indices like 0,1, got 'a,1'"),
    ("-1,0", "--gpus: expected GPU indices like 0,1, got '-1,0'"),
    ("", "--gpus: expected GPU indices like 0,1, got ''"),
    ([True, 1], "--gpus: expected GPU indices like 0,1, got [True, 1]"),
    ("0,0", "--gpus: a GPU is listed twice (0,0)"),
])  # fmt: skip
def test_bad_gpus_are_one_usage_error(given, says):
    with pytest.raises(UsageError) as e:
        crossover.parse_gpus(given)
    assert str(e.value) == says


@pytest.mark.parametrize("over, says", [
    ({"gpus": "0"}, "--gpus 0: crossover runs a block's two arms at once on two GPUs; list two (e.g. 0,1)"),
    ({"gpus": "0,1", "engines": ["paged", "stock", "vllm"]},
     "--gpus 0,1: crossover needs exactly two engines (a block's two arms), got 3: paged, stock, vllm"),
    ({"gpus": "0,1", "engines": ["stock"]}, "--gpus 0,1: crossover needs exactly two engines (a block's two arms), got 1: stock"),
    ({"gpus": "0,1", "order": "aabb"}, "--gpus 0,1: crossover runs a block's two arms at once; --order aabb has no blocks (use abba or abab)"),
    *[({"gpus": "0,1", "workload": w}, (f"--gpus 0,1: crossover runs the N sweep and the trace workload (--trace); "
                                         f"run the {w} workload without --gpus (one GPU, arms in turn)"))
      for w in ("shared-prefix", "prefill-under-decode", "open-loop", "multi-turn", "prefill-curve")],
])  # fmt: skip
def test_what_crossover_cannot_run_is_refused_in_the_plan(smoke, over, says):
    req = SnapshotRequest(**{"engines": ["stock", "paged"], **over})
    with pytest.raises(UsageError) as e:
        make_plan(smoke, req)
    assert str(e.value) == says


REPLAY = Path(__file__).resolve().parents[1] / "data" / "replay"


@pytest.mark.parametrize("over", [{"trace": str(REPLAY / "azure-conv-2023.csv")}, {"workload": "trace"}])
def test_crossover_admits_the_trace_workload_and_bounds_its_wait_by_the_trace(smoke, over):
    """A replay from a file (--trace) or the built-in's mixture: its arms meet before every point; the
    barrier's limit is a server start and the slowest speedup's span, its last request within the timeout."""
    from parity.workloads.trace import selection

    plan = make_plan(smoke, SnapshotRequest(engines=["stock", "paged"], gpus="0,1", **over))
    assert plan.gpus == [0, 1] and plan.workload.kind == "trace"
    s, c = plan.shape, plan.workload.cfg
    start = max(e.section.ready_timeout_s for e in plan.bound.values())
    span = selection(c).requests[-1].at_s / min(c.speedups)
    assert span > 0 and crossover.sync_timeout_s(plan) == start + span + 4 * s.request_timeout_s


def test_an_engine_that_sets_its_own_visible_devices_is_refused(tmp_path):
    prof = write_profile(tmp_path, "engines: {stock: {env: {CUDA_VISIBLE_DEVICES: '3'}}}\n")
    with pytest.raises(UsageError, match=r"^--gpus 0,1: engine stock sets CUDA_VISIBLE_DEVICES in its env; crossover sets it"):
        make_plan(prof, SnapshotRequest(engines=["stock", "paged"], gpus="0,1"))


def test_an_endpoint_engine_is_refused_it_cannot_be_put_on_a_gpu(tmp_path):
    prof = write_profile(tmp_path, 'engines: {ep: {kind: endpoint, base_url: "http://127.0.0.1:9", max_model_len: 2048}}\n')
    with pytest.raises(UsageError, match=r"^--gpus 0,1: crossover puts each engine's server on a GPU; engine ep is an endpoint engine"):
        make_plan(prof, SnapshotRequest(engines=["ep", "stock"], gpus="0,1"))


def test_serving_gpus_is_the_default_and_the_flag_replaces_it(tmp_path):
    prof = write_profile(tmp_path, "serving: {gpus: [1, 0], engines: [stock, paged]}\n")
    assert make_plan(prof, SnapshotRequest()).gpus == [1, 0]
    assert make_plan(prof, SnapshotRequest(gpus="2,3")).gpus == [2, 3]
    assert make_plan(load_profile("smoke"), SnapshotRequest(engines=["stock", "paged"])).gpus == []  # today's behaviour


@pytest.mark.parametrize("gpus", ["[0]", "[0, 0]", "[-1, 1]"])
def test_a_bad_serving_gpus_is_a_config_error(tmp_path, gpus):
    with pytest.raises(ConfigError, match=r"serving\.gpus.*two or more distinct GPU indices"):
        write_profile(tmp_path, f"serving: {{gpus: {gpus}}}\n")


def test_placement_swaps_the_gpus_every_block():
    engines = ["stock_b", "stock"]
    assert [crossover.placement(engines, [0, 1], k) for k in range(4)] == [
        {"stock_b": 0, "stock": 1}, {"stock_b": 1, "stock": 0}, {"stock_b": 0, "stock": 1}, {"stock_b": 1, "stock": 0}]
    assert crossover.used([2, 5, 7]) == [2, 5]
    assert crossover.placement(engines, crossover.used([2, 5, 7]), 1) == {"stock_b": 5, "stock": 2}
    assert crossover.ports(engines, 8090) == {"stock_b": 8090, "stock": 8091}
    assert crossover.plan_line(engines, [0, 1]).startswith(
        "crossover: block 0: stock_b on GPU0, stock on GPU1 (at once); block 1: swapped (stock_b on GPU1, stock on GPU0)")


def test_the_server_env_names_its_gpu_and_pci_order(smoke):
    eng = bind_all(smoke, ["stock"])["stock"]
    s = make_plan(smoke, SnapshotRequest(engines=["stock", "paged"])).shape
    la = eng.launch("/m.gguf", 8091, s, dry=True, model="tiny")
    from parity.decode import replace

    la = replace(la, unset=[*la.unset, "CUDA_VISIBLE_DEVICES"])  # an inherited value is overridden, not unset
    got = crossover.pinned(la, 1)
    assert got.env == {**la.env, "CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert "CUDA_VISIBLE_DEVICES" not in got.unset and got.argv == la.argv


def test_the_host_check_counts_gpus_only_for_gpu_builds(smoke):
    runner = LocalRunner()
    cpu = bind_all(smoke, ["stock", "paged"])
    assert crossover.host_problem(runner, [0, 1], cpu) is None  # CPU builds: the index is a label
    b200 = load_profile("b200-qwen36")
    gpu = bind_all(b200, ["paged", "stock"])
    assert all(e.on_gpu for e in gpu.values())
    if runner.which("nvidia-smi"):
        pytest.skip("this host has nvidia-smi: the GPU-less answer is not observable here")
    assert crossover.host_problem(runner, [0, 1], gpu) == "--gpus 0,1: crossover needs GPUs 0 and 1, but no GPU visible (nvidia-smi not found)"
    assert crossover.host_problem(runner, [], gpu) is None


def plan_for(smoke, **over):
    return make_plan(smoke, SnapshotRequest(engines=["stock", "paged"], gpus="0,1", npl=[2], **over))


def test_both_arms_of_a_block_run_at_once_on_their_gpus(smoke):
    plan = plan_for(smoke)
    plan.shape = type(plan.shape)(**{**{f: getattr(plan.shape, f) for f in plan.shape.__struct_fields__}, "settle_s": 0})
    seen, lock = [], threading.Lock()

    def arm(run, plan, engine, block, prog, task, port, gpu, sync, pin):
        t0 = time.monotonic()
        sync(f"{engine} N=2")  # the barrier: returns only when the other arm is here too
        time.sleep(0.2)
        with lock:
            seen.append((engine, gpu, port, threading.current_thread().name, t0, time.monotonic()))
        return {"engine": engine, "repeat": block, "gpu": gpu, "pin": pin, "rows": []}

    h200x2 = list(range(32))  # the lent 2-GPU H200 host's 32 cores
    plan.cores = crossover.cpu_shares(plan.shape.telemetry, LocalRunner(), [0, 1], h200x2)
    arms = crossover.run_block(Run(None, None, LocalRunner()), plan, 1, arm, None, None)
    assert [(a["engine"], a["gpu"]) for a in arms] == [("stock", 1), ("paged", 0)]  # block 1: swapped
    assert all(a["settle"]["crossover"] for a in arms)
    (e1, g1, p1, t1, s1, f1), (e2, g2, p2, t2, s2, f2) = sorted(seen)
    assert {p1, p2} == {plan.shape.port, plan.shape.port + 1} and t1 != t2
    assert max(s1, s2) < min(f1, f2)  # their spans overlap
    assert plan.placement == [{"block": 1, "stock": 1, "paged": 0}]
    if LocalRunner().which("taskset"):  # the cores go with the GPU: block 1's first engine on GPU 1's half
        got = [(a["pin"]["server_cpus"], a["pin"]["client_cpus"]) for a in arms]
        assert got == [("16-29", "30-31"), ("0-13", "14-15")]


def test_the_thread_an_arms_client_runs_in_swaps_every_block(smoke):
    """Which arm runs in the main thread and which in the worker is a fixed asymmetry of the client
    process unless it swaps, as the GPUs do (block 0: the second engine in the worker)."""
    plan = plan_for(smoke)
    plan.shape = type(plan.shape)(**{**{f: getattr(plan.shape, f) for f in plan.shape.__struct_fields__}, "settle_s": 0})
    plan.cores = crossover.cpu_shares(plan.shape.telemetry, LocalRunner(), [0, 1], list(range(32)))
    where = {}

    def arm(run, plan, engine, block, prog, task, port, gpu, sync, pin):
        sync(f"{engine} N=2")
        where[(block, engine)] = threading.current_thread() is threading.main_thread()
        return {"engine": engine, "repeat": block, "rows": []}

    for block in (0, 1, 2):
        arms = crossover.run_block(Run(None, None, LocalRunner()), plan, block, arm, None, None)
        assert [a["engine"] for a in arms] == ["stock", "paged"]  # returned in engine order either way
    assert where == {(0, "stock"): True, (0, "paged"): False, (1, "stock"): False, (1, "paged"): True,
                     (2, "stock"): True, (2, "paged"): False}


def test_a_failing_arm_stops_the_block_with_its_own_error(smoke):
    plan = plan_for(smoke)
    waited = []

    def arm(run, plan, engine, block, prog, task, port, gpu, sync, pin):
        if engine == "paged":
            raise InfraError("paged: server died (SIGSEGV)")
        try:
            sync("stock N=2")
        except crossover.OtherArmStopped as e:
            waited.append(str(e))
            raise
        return {"engine": engine, "rows": []}

    with pytest.raises(InfraError) as e:
        crossover.run_block(Run(None, None, LocalRunner()), plan, 0, arm, None, None)
    assert str(e.value) == "paged: server died (SIGSEGV)"  # the cause, not the other arm's wait
    assert waited and waited[0].startswith("crossover block 0: the other arm stopped")


def test_the_lock_record_names_the_gpus_and_status_shows_them(tmp_path):
    lk = L.GpuLock(LockConfig(dir=str(tmp_path / "lock"), poll_s=0.01, preflight=False), run_id="snap", gpus=[0, 1])
    ok, _ = lk.try_acquire()
    assert ok and lk.record.endswith(" run=snap gpus=0,1")
    st = L.GpuLock(LockConfig(dir=str(tmp_path / "lock"))).read()
    assert st.owner.gpus == [0, 1] and "GPUs 0,1" in st.describe()
    assert lk.release()
    plain = L.GpuLock(LockConfig(dir=str(tmp_path / "lock2"), poll_s=0.01, preflight=False), run_id="snap")
    plain.try_acquire()
    assert "gpus=" not in plain.record and L.GpuLock(LockConfig(dir=str(tmp_path / "lock2"))).read().owner.gpus == []


def test_each_arms_energy_reads_its_own_gpu(smoke):
    """The energy window reads the server's CUDA_VISIBLE_DEVICES (/proc/<pid>/environ) and maps it
    to NVML indices: with CUDA_DEVICE_ORDER=PCI_BUS_ID, CUDA's index is NVML's."""
    uuids = ["GPU-8a3f0000-aaaa", "GPU-77c10000-bbbb"]
    eng = bind_all(smoke, ["stock"])["stock"]
    s = make_plan(smoke, SnapshotRequest(engines=["stock", "paged"])).shape
    for gpu in (0, 1):
        la = crossover.pinned(eng.launch("/m.gguf", 8091, s, dry=True, model="tiny"), gpu)
        p = subprocess.Popen(["sh", "-c", "echo up; sleep 30"], env={**os.environ, **la.env}, stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
        try:
            assert p.stdout.readline() == "up\n"
            visible, _ = energy.visible_devices(p.pid, own={"CUDA_VISIBLE_DEVICES": "0,1"})
            assert energy.select_gpus(visible, uuids) == ([gpu], None)
        finally:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def test_the_dry_run_prints_the_placement_and_each_arms_env(parity_cli, tmp_path):
    r = parity_cli("--artifacts", str(tmp_path / "runs"), "snapshot", "--profile", "smoke", "--engines", "stock,paged",
                   "--gpus", "0,1", "--repeat", "2", "--dry-run", "--json", timeout=120)
    doc = json.loads(r.stdout)
    assert doc["crossover"]["placement"] == [{"block": 0, "stock": 0, "paged": 1}, {"block": 1, "stock": 1, "paged": 0}]
    env = {c["engine"]: c["env"]["CUDA_VISIBLE_DEVICES"] for c in doc["commands"]}
    assert env == {"stock": "0", "paged": "1"}
    port = doc["shape"]["port"]
    assert doc["ports"] == [port, port + 1] and [c["argv"][c["argv"].index("--port") + 1] for c in doc["commands"]] == [str(port), str(port + 1)]
    shares = crossover.cpu_shares(load_profile("smoke").serving.telemetry, LocalRunner(), [0, 1])  # this box's cores
    assert doc["crossover"]["cpus"] == [{"gpu": g, **crossover.cores(p), "affinity": p} for g, p in shares.items()]
    assert doc["crossover"]["line"] == crossover.plan_line(["stock", "paged"], [0, 1], shares)
    human = parity_cli("--artifacts", str(tmp_path / "runs"), "snapshot", "--profile", "smoke", "--engines", "stock,paged",
                       "--gpus", "0,1", "--dry-run", timeout=120)
    text = human.stdout + human.stderr
    assert "crossover: block 0: stock on GPU0, paged on GPU1 (at once); block 1: swapped" in text
    assert "CUDA_VISIBLE_DEVICES=0" in text and "CUDA_VISIBLE_DEVICES=1" in text
    assert crossover.cores_line(shares) in " ".join(text.split())  # each GPU's arm's cores, or why none are pinned


def test_bad_gpus_on_the_command_line_exit_2_before_anything(parity_cli, tmp_path):
    r = parity_cli("--artifacts", str(tmp_path / "runs"), "snapshot", "--profile", "smoke", "--engines", "stock,paged", "--gpus", "0,x")
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1] == "parity: error: --gpus: expected GPU indices like 0,1, got '0,x'"
    assert not (tmp_path / "runs").exists()


def test_a_real_run_on_a_host_without_the_gpus_stops_before_the_run_dir_and_lock(parity_cli, tmp_path):
    if LocalRunner().which("nvidia-smi"):
        pytest.skip("this host has nvidia-smi: the GPU-less answer is not observable here")
    prof = tmp_path / "profile.yaml"  # a CUDA build of stock: the crossover's GPUs are checked (nothing is built before)
    prof.write_text(f"extends: smoke\nlock: {{dir: {tmp_path}/lock}}\nengines: {{stock: {{cuda_archs: '90'}}}}\n")
    r = parity_cli("--artifacts", str(tmp_path / "runs"), "snapshot", "--profile", str(prof), "--engines", "stock,paged", "--gpus", "0,1")
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines()[-1] == (
        "parity: error: --gpus 0,1: crossover needs GPUs 0 and 1, but no GPU visible (nvidia-smi not found)")
    assert not (tmp_path / "runs").exists() and not (tmp_path / "lock").exists()
    dry = parity_cli("--artifacts", str(tmp_path / "runs"), "snapshot", "--profile", str(prof), "--engines", "stock,paged", "--gpus", "0,1",
                     "--dry-run", "--json")
    doc = json.loads(dry.stdout)  # the plan is printed, with its NO GO
    assert dry.returncode == 2 and doc["crossover"]["placement"][0] == {"block": 0, "stock": 0, "paged": 1}
    assert {"kind": "gpus", "what": "--gpus 0,1: crossover needs GPUs 0 and 1, but no GPU visible (nvidia-smi not found)"} in doc["go_no_go"]["reasons"]


def test_a_lever_ab_on_a_crossover_profile_is_refused_before_anything(parity_cli, tmp_path):
    """parity ab runs its two arms in turn on one GPU; a profile's serving.gpus would have run them at
    once without the host check or the GPUs in the lock record."""
    prof = tmp_path / "profile.yaml"
    prof.write_text(f"extends: smoke\nlock: {{dir: {tmp_path}/lock}}\nserving: {{gpus: [0, 1]}}\n")
    r = parity_cli("--artifacts", str(tmp_path / "runs"), "ab", "--profile", str(prof), "-e", "stock",
                   "--server-arg", "--cache-ram 0", "--serving", "--dry-run")
    assert r.returncode == 2, r.stderr
    assert "parity ab --serving runs its arms one after another on one GPU" in r.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "lock").exists()


# ------------------------------------------------------------------ each GPU's arm on its own cores


@pytest.mark.parametrize("cpus, parts", [
    (list(range(32)), [("0-13", "14-15"), ("16-29", "30-31")]),  # the lent 2-GPU H200 host
    (list(range(16)), [("0-5", "6-7"), ("8-13", "14-15")]),  # a 16-core host: 8 cores an arm, pin_min_cpus' 8
    (list(range(33)), [("0-13", "14-15"), ("16-29", "30-31")]),  # the core the halves leave over goes to none
    ([*range(8), *range(16, 24)], [("0-5", "6-7"), ("16-21", "22-23")]),  # a process allowed two ranges
])  # fmt: skip
def test_each_gpus_arm_gets_its_own_half_of_the_cores(cpus, parts):
    if not LocalRunner().which("taskset"):
        pytest.skip("no taskset here: nothing is pinned")
    shares = crossover.cpu_shares(TelemetryConfig(), LocalRunner(), [1, 0], cpus)
    assert [(p["server_cpus"], p["client_cpus"]) for p in shares.values()] == parts and list(shares) == [1, 0]
    sets = [affinity.parse_cpu_list(p[k]) for p in shares.values() for k in ("server_cpus", "client_cpus")]
    assert sum(map(len, sets)) == len(set().union(*sets)) and set().union(*sets) <= set(cpus)  # disjoint, all usable
    assert shares[1]["share"] == f"part 1 of 2: {len(cpus) // 2} of {len(cpus)} cores"
    line = crossover.plan_line(["stock", "paged"], [1, 0], shares)
    assert line.endswith(f"; cores (they go with the GPU): GPU1's arm server {parts[0][0]} client {parts[0][1]}, "
                         f"GPU0's arm server {parts[1][0]} client {parts[1][1]}")
    assert crossover.cores(shares[0]) == {"server": parts[1][0], "client": parts[1][1]}


def test_too_few_cores_to_split_pin_no_arm_and_say_why():
    """This box's own cores (a 2-core CI box: one an arm), and 15 (7 an arm, under pin_min_cpus' 8):
    nothing is pinned rather than both arms on the same cores."""
    for cpus in (sorted(usable_cpus()), list(range(15))):
        if len(cpus) // 2 >= TelemetryConfig().pin_min_cpus:
            continue  # a host big enough to split: the test above holds it
        shares = crossover.cpu_shares(TelemetryConfig(), LocalRunner(), [0, 1], cpus)
        why = (f"not applied: {len(cpus)} cores split between 2 arms at once leave each {len(cpus) // 2}, under "
               "serving.telemetry.pin_min_cpus (8): no arm is pinned, rather than arms on the same cores")
        off = {"applied": False, "why": why, "cpus": len(cpus)}
        assert shares == {0: off, 1: off}
        assert crossover.cores(shares[1]) == {"server": None, "client": None, "why": why}
        assert crossover.plan_line(["stock", "paged"], [0, 1], shares).endswith(f"; CPU pinning: {why}")
    off = crossover.cpu_shares(TelemetryConfig(pin_cpus=False), LocalRunner(), [0, 1], list(range(32)))
    assert off[0]["why"] == "off (serving.telemetry.pin_cpus: false)"


def test_two_arms_clients_are_pinned_each_to_its_own_core_at_once():
    """sched_setaffinity(0) pins the calling thread: the two arms' load generators (the main thread and
    the block's worker) hold their own client cores at the same time, and each gets its mask back."""
    cpus = sorted(usable_cpus())
    if len(cpus) < 2:
        pytest.skip("one usable core")
    before, barrier, got = os.sched_getaffinity(0), threading.Barrier(2), {}

    def client(core: int) -> None:
        with affinity.client_pinned({"applied": True, "client_cpus": str(core)}) as pinned:
            barrier.wait(10)  # both pinned now
            got[core] = (pinned, os.sched_getaffinity(0))
            barrier.wait(10)
        got[core] += (os.sched_getaffinity(0),)

    other = threading.Thread(target=client, args=(cpus[-1],))
    other.start()
    client(cpus[0])
    other.join()
    assert got == {cpus[0]: (str(cpus[0]), {cpus[0]}, before), cpus[-1]: (str(cpus[-1]), {cpus[-1]}, before)}


# ------------------------------------------------------------------ the second server's port


def test_a_second_port_past_65535_is_refused_in_the_plan(tmp_path):
    prof = write_profile(tmp_path, "serving: {port: 65535}\n")
    with pytest.raises(UsageError) as e:
        make_plan(prof, SnapshotRequest(engines=["stock", "paged"], gpus="0,1"))
    assert str(e.value) == ("--gpus 0,1: crossover: the second engine's server would listen on serving.port + 1 = "
                            "65536, not a TCP port (1..65535); set serving.port to 65534 or lower")
    assert make_plan(prof, SnapshotRequest(engines=["stock", "paged"])).shape.port == 65535  # one GPU: one port


def test_a_taken_second_port_is_named_with_who_holds_it(smoke):
    port = free_port(pair=True)
    assert crossover.busy_port(["stock", "paged"], port) is None
    with socket.socket() as s:
        s.bind(("127.0.0.1", port + 1))
        s.listen()
        said = crossover.busy_port(["stock", "paged"], port)
    assert said.startswith(f"crossover: engine paged's server port (serving.port + 1): port {port + 1} on 127.0.0.1 "
                           f"is already in use by pid {os.getpid()} (")
    assert said.endswith("): stop it or set serving.port")


def test_a_taken_second_port_stops_the_run_before_the_run_dir_and_lock(parity_cli, tmp_path):
    port = free_port(pair=True)
    prof = tmp_path / "profile.yaml"
    prof.write_text(f"extends: smoke\nlock: {{dir: {tmp_path}/lock}}\nserving: {{port: {port}}}\n")
    args = ("--artifacts", str(tmp_path / "runs"), "snapshot", "--profile", str(prof), "--engines", "stock,paged",
            "--gpus", "0,1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", port + 1))
        s.listen()
        r = parity_cli(*args)
        nothing = not (tmp_path / "runs").exists() and not (tmp_path / "lock").exists()
        dry = parity_cli(*args, "--dry-run", "--json", timeout=120)
    assert r.returncode == 4, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"parity: error: crossover: engine paged's server port (serving.port + 1): port {port + 1} "
                           "on 127.0.0.1 is already in use by pid ")
    assert nothing
    doc = json.loads(dry.stdout)  # the dry run's NO GO names it too
    assert dry.returncode == 4
    assert {"kind": "port", "what": f"port {port + 1} is in use (another server?)"} in doc["go_no_go"]["reasons"]


def test_a_campaigns_dry_run_checks_a_crossover_steps_second_port(parity_cli, tmp_path):
    port = free_port(pair=True)
    prof = tmp_path / "profile.yaml"
    prof.write_text(f"extends: smoke\nlock: {{dir: {tmp_path}/lock}}\nserving: {{port: {port}}}\n")
    camp = tmp_path / "c.yaml"
    camp.write_text(f"name: xc\nprofile: {prof}\nsteps:\n"
                    "  - {name: snap, kind: snapshot, with: {engines: [stock, paged], gpus: [0, 1], npl: [1], repeat: 1}}\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", port + 1))
        s.listen()
        dry = parity_cli("--artifacts", str(tmp_path / "runs"), "campaign", "run", str(camp), "--dry-run", "--json", timeout=120)
    doc = json.loads(dry.stdout)
    assert {"kind": "port", "what": f"port {port + 1} is in use (another server?)"} in doc["go_no_go"]["reasons"], dry.stderr


# ------------------------------------------------------------------ each arm's telemetry: its own GPU


def test_each_arms_telemetry_samples_its_own_gpu(monkeypatch, tmp_path):
    """The real sampler and watch.point around a short window, pynvml stubbed with two GPUs (GPU 0 at
    100 W running the other arm's server, GPU 1 at 400 W running this arm's: two real processes).
    Sampling the arm's GPU alone, its summary is GPU 1's and the other server is no foreign process;
    sampling every GPU (an arm in turn on one GPU), the other server makes the point invalid."""
    import sys

    from parity.artifacts import RunDir
    from parity.telemetry import watch
    from tests.unit.test_energy import rec, stub_pynvml

    procs = {g: subprocess.Popen(["sleep", "30"], env={**os.environ, "CUDA_VISIBLE_DEVICES": str(g)},
                                 start_new_session=True) for g in (0, 1)}
    counter = [9_000_000 + k for k in range(0, 10**9, 10**6)]  # mJ, one read each
    nv = stub_pynvml({0: list(counter), 1: list(counter)})
    nv.nvmlInit = lambda: None
    nv.nvmlDeviceGetPowerUsage = lambda h: {0: 100_000, 1: 400_000}[h[1]]
    nv.nvmlDeviceGetCurrentClocksEventReasons = lambda h: 0
    nv.nvmlDeviceGetComputeRunningProcesses = lambda h: [types.SimpleNamespace(pid=procs[h[1]].pid,
                                                                               usedGpuMemory=1 << 30)]
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    monkeypatch.delenv("PARITY_NO_NVML", raising=False)
    cfg = TelemetryConfig(interval_s=0.02, pin_cpus=False)
    try:
        rows = {}
        for gpus in ([1], None):
            with watch.point(LocalRunner(), cfg, procs[1].pid, None, gpus) as w:
                time.sleep(0.15)
            rows[str(gpus)] = row = {"why": {}, "flags": []}
            problems = w.finish(RunDir(tmp_path), row, [rec(10, 5)], "llama", None, None, f"telemetry/x-{gpus}.json")
            rows[str(gpus)]["problems"] = problems
            if gpus:
                doc = json.loads((tmp_path / "telemetry/x-[1].json").read_text())
                assert {g["index"] for s in doc["samples"] for g in s["gpus"]} == {1}
    finally:
        for p in procs.values():
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    mine = rows["[1]"]
    assert mine["telemetry"]["gpu_index"] == 1 and mine["telemetry"]["power_w_median"] == 400.0
    assert mine["telemetry"]["foreign_pids"] == [] and mine["problems"] == []
    assert mine["energy"]["gpus"] == [1]  # the energy window reads the server's own GPU (its CUDA_VISIBLE_DEVICES)
    every = rows["None"]
    assert every["telemetry"]["gpu_index"] == 0 and every["telemetry"]["foreign_pids"] == [procs[0].pid]
    assert every["problems"] == [f"another compute process ran on the GPU during the point: pid {procs[0].pid} (sleep)"]


def test_a_replay_arm_meets_the_other_before_every_point_inside_its_own_window(smoke, monkeypatch):
    """run_points' per point (parity.serving.workloads.measured): a crossover arm calls sync before each of
    the trace's points, then runs the point inside its telemetry window with its client thread on its
    own cores; an arm in turn on one GPU calls no sync and opens the same window for a replay's points,
    none for a kind whose points hold primers or turns."""
    from parity.serving import workloads
    from parity.workloads.base import Measured

    before = os.sched_getaffinity(0)
    core = max(before)
    req = SnapshotRequest(engines=["stock", "paged"], gpus="0,1", trace=str(REPLAY / "azure-conv-2023.csv"),
                          workload_opts=["speedups=[1, 2, 4]"])
    plan = make_plan(smoke, req)
    wl, events = plan.workload, []

    def run(self, arm, wl):  # the kind's points, each recording the cores its load generator would have
        for key, label in wl.points():
            events.append(("point", label, os.sched_getaffinity(0)))
            yield Measured(key, label, [])

    monkeypatch.setattr(type(wl.kind_obj), "run", run)
    arm = workloads.Arm(Run(None, None, LocalRunner()), plan, None, None, "stock", 1, lambda msg: None)
    pin = {"applied": True, "client_cpus": str(core)}
    def sync(at: str) -> None:
        events.append(("sync", at))

    got = [(m.label, tel is not None) for m, tel in workloads.measured(arm, wl, 1, pin, sync)]
    labels = [label for _, label in wl.points()]
    assert len(labels) == 3 and got == [(label, True) for label in labels]
    assert events == [e for label in labels for e in (("sync", f"stock r1 trace {label}"), ("point", label, {core}))]
    assert os.sched_getaffinity(0) == before  # the mask back after each window

    events.clear()  # one GPU, arms in turn (no barrier to meet): the replay's points watched all the same (its energy per token)
    alone = [(m.label, tel is not None) for m, tel in workloads.measured(arm, wl, None, pin, None)]
    assert alone == [(label, True) for label in labels]
    assert events == [("point", label, {core}) for label in labels]  # the client on its cores, as the N sweep's
    assert os.sched_getaffinity(0) == before

    events.clear()  # a kind whose point holds primers or turns: no window on one GPU
    from parity.workloads import WORKLOADS

    monkeypatch.setattr(type(WORKLOADS["shared-prefix"]), "run", run)
    other = types.SimpleNamespace(kind="shared-prefix", kind_obj=WORKLOADS["shared-prefix"], points=wl.points, name=wl.name)
    assert [(m.label, tel) for m, tel in workloads.measured(arm, other, None, pin, None)] == [(label, None) for label in labels]
    assert events == [("point", label, before) for label in labels]
