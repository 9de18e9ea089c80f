"""What the servers' own logs say, read once per arm when the sweep ends: the runtime banner
against the build (parity.gates.banner, a gate: red marks the run invalid), each engine's kernel
path where its kind reads one (vLLM: native FP4 or the Marlin fallback), and the trace envs an
arm's env turns on (parity.traces) -- summary.json's "banner", "kernel_paths" and "traces"."""

from __future__ import annotations

from pathlib import Path

from parity import results
from parity.engines.bound import Engine
from parity.gates import banner
from parity.gates.kinds import GATES
from parity.traces import summary as traces
from parity.traces.formats import trace_envs


def read_log(run_dir: str | Path, name: str) -> str | None:
    try:
        return (Path(run_dir) / name).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def hardware_cc(run_dir: str | Path) -> list[str]:
    """The run's GPUs' compute capabilities by index, from its hardware.json ([] when it has none)."""
    path = Path(run_dir) / "hardware.json"
    try:
        hw = results.check(results.load_json(path), results.model.Hardware, path, "").typed
    except results.BadResultFile:
        return []
    return [str(g.get("compute_cap") or "") for g in hw.gpus]


def facts(engines: dict[str, Engine], run_dir: str | Path, arms: list[dict]) -> dict:
    """{banner, kernel_paths?, traces?} of a sweep's arms (each with engine, repeat and its rows;
    the rows of an arm whose server served one point get its graph_reuse_pct); engines: the
    bound engines by name."""
    texts, banner_arms, paths = {}, [], []
    ccs = hardware_cc(run_dir)
    for a in arms:
        e, r = a["engine"], a["repeat"]
        log = f"servers/{e}-r{r}.log"
        text = texts[(e, r)] = read_log(run_dir, log)
        eng = engines[e]
        kind = eng.kind
        applies = None if kind.binary_gates else f"a {kind.name} engine prints no llama.cpp banner"
        banner_arms.append(
            {
                "engine": e,
                "repeat": r,
                "log": log,
                "text": text,
                "applies": applies,
                "cuda_archs": getattr(eng.section, "cuda_archs", None),
                "hardware_cc": ccs,
            }
        )
        kp = kind.kernel_path(text or "")
        if kp is not None:
            paths.append({"engine": e, "repeat": r, "log": log, **kp})
    out: dict = {"banner": GATES["banner"].measure(banner_arms)}
    if paths:
        out["kernel_paths"] = paths
    found = traces.for_serving(run_dir, arms, texts)
    if found:
        out["traces"] = found
        traces.one_point_reuse(found, [row for a in arms for row in a.get("rows") or []])
    return out


def plan(eng: Engine, env: dict[str, str]) -> str:
    """What the real run will read from this engine's server log, in words (the dry run's plan)."""
    kind = eng.kind
    what = [
        f"banner: {banner.expectation(getattr(eng.section, 'cuda_archs', None))}"
        if kind.binary_gates
        else f"banner: not applicable (a {kind.name} engine)"
    ]
    if kind.kernel_path("") is not None:
        what.append("kernel path: native FP4 or the Marlin fallback, as its log names it")
    on = [f"{n}={env[n]}" + ("" if f.verified else " (by convention)") for n, f in trace_envs(env).items()]
    what.append(f"traces: {', '.join(on) or 'no trace env set'}; [L5INSTR] counters if printed")
    return "; ".join(what)
