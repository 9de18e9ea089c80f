"""Two GPUs at once (issue 57's crossover): with serving.gpus (or --gpus) listing two GPUs and
exactly two engines, the two arms of block k run at the same time, engine A (the first engine) on
gpus[k % 2] and B on the other, swapped every block, so a GPU's own speed cancels in the block's
pair.  Each arm's server gets CUDA_VISIBLE_DEVICES=<its GPU> (with CUDA_DEVICE_ORDER=PCI_BUS_ID,
so the index means what nvidia-smi and NVML call it) and its own port (serving.port + the
engine's position).  With serving.telemetry.pin_cpus each GPU's arm has its own half of the
cores (its server's and its client's, parity.telemetry.affinity), which go with the GPU, and each
arm's GPU telemetry samples its GPU alone.  The two arms meet before every point (a barrier), so
their points overlap; each arm's percentiles come from its own request records, and each block
is one pair of the paired statistics, as on one GPU.  It runs the N sweep or a workload kind whose
points are one measured run each (`one_run_points`: the trace replay, whose arms send the same
requests on the same schedule, each from the barrier's release, and pair request by request)."""

from __future__ import annotations

import threading

from parity.decode import replace
from parity.errors import InfraError, UsageError
from parity.gpu import nvidia_smi
from parity.gpu.memory import used_mib, wait_back
from parity.ports import port_problem
from parity.serving import rounds
from parity.telemetry import affinity
from parity.workloads import trace

MAX_PORT = 65535

VISIBLE, DEVICE_ORDER = "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"


class OtherArmStopped(InfraError):
    """This arm gave up waiting because the other arm of the block failed (the other's error is the cause)."""


def parse_gpus(value) -> list[int] | None:
    """--gpus "0,1" (or a campaign step's [0, 1]) as GPU indices; None: not given.  Bad input: UsageError."""
    if value is None:
        return None
    items = [v.strip() for v in value.split(",")] if isinstance(value, str) else value
    items = items if isinstance(items, list) else []
    if not items or not all(_index(v) for v in items):
        raise UsageError(f"--gpus: expected GPU indices like 0,1, got {value!r}")
    gpus = [int(v) for v in items]
    if len(set(gpus)) != len(gpus):
        raise UsageError(f"--gpus: a GPU is listed twice ({','.join(map(str, gpus))})")
    return gpus


def _index(v) -> bool:
    if isinstance(v, str):
        return v.isascii() and v.isdigit()
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def check(gpus: list[int], engines: list[str], order: str, workload, bound: dict, port: int) -> None:
    """Crossover's conditions, one UsageError each (gpus empty: one GPU per arm, nothing to check);
    port: serving.port."""
    if not gpus:
        return
    at = f"--gpus {','.join(map(str, gpus))}: crossover"
    if len(gpus) < 2:
        raise UsageError(f"{at} runs a block's two arms at once on two GPUs; list two (e.g. 0,1)")
    if len(engines) != 2:
        got = f"{len(engines)}: {', '.join(engines)}"
        raise UsageError(f"{at} needs exactly two engines (a block's two arms), got {got}")
    if order == "aabb":
        raise UsageError(f"{at} runs a block's two arms at once; --order aabb has no blocks (use abba or abab)")
    if workload is not None and not workload.kind_obj.one_run_points:
        raise UsageError(f"{at} runs the N sweep and the trace workload (--trace); run the {workload.kind} workload "
                         "without --gpus (one GPU, arms in turn)")
    for e, eng in bound.items():
        if not eng.kind.profiled_serving:
            raise UsageError(f"{at} puts each engine's server on a GPU; engine {e} is an {eng.kind_name} engine "
                             "(a server parity does not start, so it cannot place it)")
        if VISIBLE in eng.env():
            raise UsageError(f"--gpus {','.join(map(str, gpus))}: engine {e} sets {VISIBLE} in its env; "
                             "crossover sets it per block (remove it there)")
    if port + 1 > MAX_PORT:
        raise UsageError(f"{at}: the second engine's server would listen on serving.port + 1 = {port + 1}, "
                         f"not a TCP port (1..{MAX_PORT}); set serving.port to {MAX_PORT - 1} or lower")


def used(gpus: list[int]) -> list[int]:
    """The GPUs a crossover runs on: the first two listed."""
    return gpus[:2]


def placement(engines: list[str], gpus: list[int], block: int) -> dict[str, int]:
    """{engine: GPU} of block `block`: the first engine on gpus[block % 2], the second on the other."""
    a, b = engines
    return {a: gpus[block % 2], b: gpus[(block + 1) % 2]}


def ports(engines: list[str], port: int) -> dict[str, int]:
    """Each arm's own port: serving.port + the engine's position."""
    return {e: port + i for i, e in enumerate(engines)}


def busy_port(engines: list[str], port: int) -> str | None:
    """Why a crossover server's port is taken now (checked before the run dir and the lock; each
    server's start checks its own again), None: both free."""
    for i, (e, p) in enumerate(ports(engines, port).items()):
        problem = port_problem(p)
        if problem:
            return f"crossover: engine {e}'s server port (serving.port + {i}): {problem}: stop it or set serving.port"
    return None


def cpu_shares(cfg, runner, gpus: list[int], cpus: list[int] | None = None) -> dict[int, dict]:
    """{GPU: the affinity plan of the arm on it} (cfg: serving.telemetry): the first GPU's arm gets
    the first half of the usable cores, the second the second half; the cores go with the GPU, so
    they swap engines with it every block."""
    g = used(gpus)
    return {gpu: affinity.plan(cfg, runner, cpus, share=(i, len(g))) for i, gpu in enumerate(g)}


def cores(pin: dict) -> dict:
    """An arm's cores as summary.json's arms show them: {server, client}, or why none were pinned."""
    if pin.get("applied"):
        return {"server": pin["server_cpus"], "client": pin["client_cpus"]}
    return {"server": None, "client": None, "why": pin.get("why")}


def pinned(la, gpu: int):
    """The launch with its server on one GPU (the recorded env shows it)."""
    env = {**la.env, VISIBLE: str(gpu), DEVICE_ORDER: "PCI_BUS_ID"}
    return replace(la, env=env, unset=[u for u in la.unset if u not in env])


def plan_line(engines: list[str], gpus: list[int], shares: dict[int, dict] | None = None) -> str:
    """The dry run's placement line (shares: cpu_shares', said at its end)."""
    b0 = placement(engines, gpus, 0)
    b1 = ", ".join(f"{e} on GPU{g}" for e, g in placement(engines, gpus, 1).items())
    line = (f"crossover: block 0: {', '.join(f'{e} on GPU{g}' for e, g in b0.items())} (at once); "
            f"block 1: swapped ({b1}); and so on, every block; the two arms meet before every point")
    return line + (f"; {cores_line(shares)}" if shares else "")


def cores_line(shares: dict[int, dict]) -> str:
    """Each GPU's arm's cores, or why none are pinned."""
    if all(p.get("applied") for p in shares.values()):
        each = ", ".join(f"GPU{g}'s arm server {p['server_cpus']} client {p['client_cpus']}" for g, p in shares.items())
        return f"cores (they go with the GPU): {each}"
    return f"CPU pinning: {next(p['why'] for p in shares.values() if not p.get('applied'))}"


def host_problem(runner, gpus: list[int], bound: dict) -> str | None:
    """Why this host cannot run the crossover (a GPU listed that nvidia-smi does not list), None: it can.
    Engines that are all CPU builds use no GPU: the index is a label there and is not checked."""
    if not gpus or not any(eng.on_gpu for eng in bound.values()):
        return None
    found, _, note = nvidia_smi.inventory(runner)
    if max(used(gpus)) >= len(found):
        seen = f"nvidia-smi lists {len(found)} GPU(s)" if found else f"no GPU visible ({note})"
        need = " and ".join(map(str, used(gpus)))
        return f"--gpus {','.join(map(str, gpus))}: crossover needs GPUs {need}, but {seen}"
    return None


def refuse(runner, plan) -> None:
    """A real crossover run's host checks, before its run dir and the lock (the dry run says them as
    its NO GO): the GPUs listed on this host (UsageError), both servers' ports free (InfraError)."""
    if not plan.gpus:
        return
    if too_few := host_problem(runner, plan.gpus, plan.bound):
        raise UsageError(too_few)
    if busy := busy_port(plan.engines, plan.shape.port):
        raise InfraError(busy)


def sync_timeout_s(plan) -> float:
    """The longest one arm waits for the other to reach the same point: a server start, its warmup
    and output probe, and the slowest point's rounds, each request within serving.request_timeout_s;
    a trace's point: its span at the slowest speedup, its last request within the timeout."""
    s = plan.shape
    start = max(eng.section.ready_timeout_s for eng in plan.bound.values())
    if plan.workload is not None:
        span = trace.selection(plan.workload.cfg).requests[-1].at_s / min(plan.workload.cfg.speedups)
        return start + span + s.request_timeout_s * 4  # the warmup, its tokenize, the point's last request, slack
    requests = 2 + s.warmup.point_requests + max(rounds.count(n, s.min_requests) for n in plan.npl)
    return start + s.request_timeout_s * requests


def run_block(run, plan, block: int, run_arm, prog, task) -> list[dict]:
    """Both arms of the block at once (one in a thread: the second engine's in even blocks, the first's
    in odd ones), each on its GPU, port and cores; the memory wait once both servers stopped.  The
    arms in engine order; the first error of an arm is raised."""
    where = placement(plan.engines, used(plan.gpus), block)
    at = ports(plan.engines, plan.shape.port)
    if not plan.cores:  # once, here: before any arm's client thread is pinned
        plan.cores = cpu_shares(plan.shape.telemetry, run.runner, plan.gpus)
    plan.placement.append({"block": block, **where})
    barrier, limit = threading.Barrier(2), sync_timeout_s(plan)

    def sync(label: str) -> None:
        try:
            barrier.wait(limit)
        except threading.BrokenBarrierError:
            why = f"the other arm stopped (or took over {limit:g} s) before {label}"
            raise OtherArmStopped(f"crossover block {block}: {why}") from None

    results: dict[str, dict] = {}
    errors: dict[str, BaseException] = {}

    def arm(engine: str) -> None:
        try:
            results[engine] = run_arm(run, plan, engine, block, prog, task,
                                      port=at[engine], gpu=where[engine], sync=sync, pin=plan.cores[where[engine]])
        except BaseException as e:  # the other arm must not wait on this one
            errors[engine] = e
            barrier.abort()

    mem_before, source = used_mib()
    a, b = plan.engines
    main, other = (a, b) if block % 2 == 0 else (b, a)  # the thread an arm's client runs in swaps too, as its GPU does
    worker = threading.Thread(target=arm, args=(other,), name=f"crossover-{other}", daemon=True)
    worker.start()
    arm(main)
    if isinstance(errors.get(main), KeyboardInterrupt):
        raise errors[main]  # the run's interrupt handling stops the servers; the thread ends with them
    worker.join()
    if errors:
        real = [e for e in errors.values() if not isinstance(e, OtherArmStopped)]
        raise (real or list(errors.values()))[0]
    settle = wait_back(mem_before, source, plan.shape.settle_s, plan.shape.settle_timeout_s,
                       plan.shape.settle_tolerance_mib, f"crossover block {block}")
    for e in (a, b):
        results[e]["settle"] = {**settle, "crossover": "one wait per block, after both arms' servers stopped"}
    return [results[a], results[b]]
