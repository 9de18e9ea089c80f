"""Two GPUs at once (parity.serving.crossover): --gpus / serving.gpus checked once before anything
starts, which GPU each engine gets per block (swapped every block), the server's env, the host
check, both arms run at once and an arm's failure stops its block with the real cause, the lock
record naming the GPUs, and each arm's energy reading its own GPU."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

import parity.gpu.lock as L
from parity.config import LockConfig, load_profile
from parity.engines.bound import bind_all
from parity.errors import ConfigError, InfraError, UsageError
from parity.runners.local import LocalRunner
from parity.serving import crossover
from parity.serving.plan import SnapshotRequest
from parity.serving.snapshot import make_plan
from parity.telemetry import energy


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
    ({"gpus": "0,1", "workload": "shared-prefix"},
     "--gpus 0,1: crossover runs the N sweep; run a workload without --gpus (one GPU, arms in turn)"),
])  # fmt: skip
def test_what_crossover_cannot_run_is_refused_in_the_plan(smoke, over, says):
    req = SnapshotRequest(**{"engines": ["stock", "paged"], **over})
    with pytest.raises(UsageError) as e:
        make_plan(smoke, req)
    assert str(e.value) == says


def test_an_engine_that_sets_its_own_visible_devices_is_refused(tmp_path):
    prof = write_profile(tmp_path, "engines: {stock: {env: {CUDA_VISIBLE_DEVICES: '3'}}}\n")
    with pytest.raises(UsageError, match=r"^--gpus 0,1: engine stock sets CUDA_VISIBLE_DEVICES in its env; crossover sets it"):
        make_plan(prof, SnapshotRequest(engines=["stock", "paged"], gpus="0,1"))


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

    def arm(run, plan, engine, block, prog, task, port, gpu, sync):
        t0 = time.monotonic()
        sync(f"{engine} N=2")  # the barrier: returns only when the other arm is here too
        time.sleep(0.2)
        with lock:
            seen.append((engine, gpu, port, threading.current_thread().name, t0, time.monotonic()))
        return {"engine": engine, "repeat": block, "gpu": gpu, "rows": []}

    arms = crossover.run_block(None, plan, 1, arm, None, None)
    assert [(a["engine"], a["gpu"]) for a in arms] == [("stock", 1), ("paged", 0)]  # block 1: swapped
    assert all(a["settle"]["crossover"] for a in arms)
    (e1, g1, p1, t1, s1, f1), (e2, g2, p2, t2, s2, f2) = sorted(seen)
    assert {p1, p2} == {plan.shape.port, plan.shape.port + 1} and t1 != t2
    assert max(s1, s2) < min(f1, f2)  # their spans overlap
    assert plan.placement == [{"block": 1, "stock": 1, "paged": 0}]


def test_a_failing_arm_stops_the_block_with_its_own_error(smoke):
    plan = plan_for(smoke)
    waited = []

    def arm(run, plan, engine, block, prog, task, port, gpu, sync):
        if engine == "paged":
            raise InfraError("paged: server died (SIGSEGV)")
        try:
            sync("stock N=2")
        except crossover.OtherArmStopped as e:
            waited.append(str(e))
            raise
        return {"engine": engine, "rows": []}

    with pytest.raises(InfraError) as e:
        crossover.run_block(None, plan, 0, arm, None, None)
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
    human = parity_cli("--artifacts", str(tmp_path / "runs"), "snapshot", "--profile", "smoke", "--engines", "stock,paged",
                       "--gpus", "0,1", "--dry-run", timeout=120)
    text = human.stdout + human.stderr
    assert "crossover: block 0: stock on GPU0, paged on GPU1 (at once); block 1: swapped" in text
    assert "CUDA_VISIBLE_DEVICES=0" in text and "CUDA_VISIBLE_DEVICES=1" in text


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
