"""Campaigns: an ordered list of named steps of registered kinds, run in one
run directory.  Step kinds register by name in STEP_KINDS (a StepKind of "module:function"
references, imported only when used).  A step function takes (ctx, options) and returns a
JSON-able result; it raises a ParityError to fail (its exit code is the
campaign's: gate 3, infra 4, regression 5, other 1).

YAML:
  name: smoke
  profile: smoke                  # default profile (overridden by --profile)
  vars: {model: tiny}             # ${model} in step options; --var K=V overrides;
                                  # ${PARITY_ROOT} and ${PARITY_CACHE} are built in
  hosts: [gb10-a, gb10-b]         # optional fan-out: the whole campaign runs on each host
  parallel_hosts: false           # true: hosts run at the same time (one thread each)
  steps:
    - {name: build, kind: build, with: {engines: [paged, stock]}}
    - {name: post-gates, kind: gate, with: {phase: post}, on_failure: always-run}

on_failure per step:
  stop (default)  a failure skips the later steps (except always-run ones)
  continue        a failure is recorded and the later steps still run
  always-run      this step runs even after an earlier failure (post-gates, reports)
Whatever the policy, a campaign with a failed step exits non-zero with the
first failure's exit code.  On --resume, steps already complete in the run dir
are skipped, except kinds whose StepKind says rerun_on_resume (the lock lives in the process).
"""

from __future__ import annotations

import contextlib
import importlib
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from parity.errors import ConfigError, ParityError, UsageError
from parity.filelock import locked
from parity.options import OPTIONS, check_step_options
from parity import gating, session
from parity.bench import run as bench_run
from parity.profiles import capture
from parity.serving import snapshot as snapshot_plan
from parity.artifacts import RunDir, now_iso, slurm_job
from parity.context import run_session, run_session_existing
from parity.decode import read_utf8
from parity.engines import with_binaries
from parity.gates.base import gate_inputs
from parity.gates.prepost import GateSpec, gate_engines, gate_models, spec_from_options
from parity.context import dry_run_session
from parity.gonogo import go_no_go
from parity.runners.lifetime import pid_alive
from parity.hosts.delegation import DELEGATED_ENV
from parity.hosts.registry import delegate
from parity.options import positive_seconds
from parity.paths import PARITY_ROOT, cache_dir
from parity.runners import ssh
from parity.yamlload import TooBig, safe_load
from parity.results import BadResultFile, load_json, read_manifest

@dataclass(frozen=True)
class StepKind:
    """Everything the campaign knows about a step kind, in one entry.  Each function is a
    "module:function" imported on first use."""

    run: str  # (ctx, options) -> JSON-able result; a ParityError fails the step
    check: str | None = None  # (ctx, options): the options checked as the real run will, touching nothing
    engines: str | None = None  # (ctx, options) -> engine names it runs (built before a lock step)
    models: str | None = None  # (ctx, options) -> profile models it reads (made before a lock step)
    gpu: bool = False  # it runs on (or locks) the GPU: the dry run's go/no-go checks the GPU
    serves: str | None = None  # "module:function" (options) -> bool: it starts a server on serving.port
    rerun_on_resume: bool = False  # its effect dies with the process (a held lock): run again on --resume


STEP_KINDS: dict[str, StepKind] = {
    "synth": StepKind("parity.models.synth:campaign_step"),
    "build": StepKind("parity.llamacpp.build:campaign_step"),
    "lock": StepKind("parity.session:lock_step", check="parity.session:check_lock_step", gpu=True, rerun_on_resume=True),
    "gate": StepKind("parity.gating:campaign_step", check="parity.campaign:check_gate_step", engines="parity.campaign:gate_step_engines",
                     models="parity.campaign:gate_step_models", gpu=True),
    "snapshot": StepKind("parity.serving.snapshot:campaign_step", check="parity.campaign:check_snapshot_step",
                         engines="parity.campaign:snapshot_engines", models="parity.campaign:snapshot_models", gpu=True,
                         serves="parity.campaign:always"),
    "bench": StepKind("parity.bench.run:campaign_step", check="parity.campaign:check_bench_step", engines="parity.campaign:bench_engines",
                      models="parity.campaign:model_option", gpu=True),
    "profile": StepKind("parity.profiles.capture:campaign_step", check="parity.campaign:check_profile_step",
                        engines="parity.campaign:profile_engines", models="parity.campaign:model_option", gpu=True,
                        serves="parity.campaign:serves_a_workload"),
    "report": StepKind("parity.report.render:campaign_step"),
    "shell": StepKind("parity.campaign:shell_step", check="parity.campaign:check_shell_step"),
    "history": StepKind("parity.history.nightly:campaign_step"),
}


def imported(ref: str) -> Callable:
    mod_name, fn_name = ref.split(":")
    return getattr(importlib.import_module(mod_name), fn_name)


_BUILTIN_VARS = ("PARITY_ROOT", "PARITY_CACHE")


def step_function(kind: str, label: str = "") -> Callable:
    if kind not in STEP_KINDS:
        raise ConfigError(label, "kind", f"unknown step kind {kind!r} (known: {', '.join(sorted(STEP_KINDS))})")
    try:
        return imported(STEP_KINDS[kind].run)
    except (ImportError, AttributeError) as e:
        raise ConfigError(label, "kind", f"step kind {kind!r} is not available ({e})") from None


@dataclass
class Step:
    name: str
    kind: str
    options: dict[str, Any] = field(default_factory=dict)
    on_failure: str = "stop"  # stop | continue
    always_run: bool = False


@dataclass
class Campaign:
    name: str
    steps: list[Step]
    profile: str | None = None
    vars: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    hosts: list[str] = field(default_factory=list)
    parallel_hosts: bool = False
    sha256: str = ""


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def substitute(value: Any, variables: dict[str, Any], label: str, key: str) -> Any:
    if isinstance(value, str):
        whole = _VAR.fullmatch(value)
        if whole:  # keep the variable's type when the value is just ${name}
            name = whole.group(1)
            if name not in variables:
                raise ConfigError(label, key, f"undefined variable ${{{name}}}")
            return variables[name]

        def repl(m):
            if m.group(1) not in variables:
                raise ConfigError(label, key, f"undefined variable ${{{m.group(1)}}}")
            return str(variables[m.group(1)])

        return _VAR.sub(repl, value)
    if isinstance(value, list):
        return [substitute(v, variables, label, f"{key}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: substitute(v, variables, label, f"{key}.{k}") for k, v in value.items()}
    return value


def builtin_vars() -> dict[str, str]:
    return {"PARITY_ROOT": str(PARITY_ROOT), "PARITY_CACHE": str(cache_dir())}


def load_campaign(path: str, extra_vars: dict[str, str] | None = None) -> Campaign:
    import hashlib

    import yaml

    p = Path(path).expanduser()
    label = str(path)

    text = read_utf8(p, label, missing="campaign file not found")
    try:
        data = safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        said = getattr(e, "problem", e)
        said = said if isinstance(e, TooBig) else f"YAML syntax error: {said}"
        raise ConfigError(label, f"line {mark.line + 1}" if mark else "", said) from None
    if not isinstance(data, dict):
        raise ConfigError(label, "", "a campaign must be a mapping with steps:")
    unknown = set(data) - {"name", "profile", "vars", "steps", "description", "hosts", "parallel_hosts"}
    if unknown:
        raise ConfigError(label, sorted(unknown)[0], "unknown key")
    variables = data.get("vars") or {}
    if not isinstance(variables, dict):
        raise ConfigError(label, "vars", "must be a mapping")
    variables = {**builtin_vars(), **variables, **(extra_vars or {})}
    hosts = data.get("hosts") or []
    if not isinstance(hosts, list) or not all(isinstance(h, str) and h.strip() for h in hosts):
        raise ConfigError(label, "hosts", "must be a list of host names (profile hosts or ~/.ssh/config)")
    if len(set(hosts)) != len(hosts):
        raise ConfigError(label, "hosts", "a host is listed twice")
    if any(h in ("local", "localhost") for h in hosts):
        raise ConfigError(label, "hosts", "list remote host names only (run locally without hosts:)")
    parallel = data.get("parallel_hosts", False)
    if not isinstance(parallel, bool):
        raise ConfigError(label, "parallel_hosts", "expected true or false")
    profile = data.get("profile")
    if profile is not None and not isinstance(profile, str):
        raise ConfigError(label, "profile", "must be a profile name or file")
    if profile is not None:  # ${PARITY_ROOT}/... or a campaign variable
        profile = str(substitute(profile, variables, label, "profile"))
    raw_steps = data.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise ConfigError(label, "steps", "must be a non-empty list")
    steps, seen = [], set()
    for i, s in enumerate(raw_steps):
        key = f"steps[{i}]"
        if not isinstance(s, dict):
            raise ConfigError(label, key, "each step must be a mapping with name and kind")
        bad = set(s) - {"name", "kind", "with", "on_failure", "always_run"}
        if bad:
            raise ConfigError(label, f"{key}.{sorted(bad)[0]}", "unknown key")
        kind = s.get("kind")
        if not isinstance(kind, str):
            raise ConfigError(label, f"{key}.kind", "required (one of: " + ", ".join(sorted(STEP_KINDS)) + ")")
        if kind not in STEP_KINDS:
            raise ConfigError(label, f"{key}.kind", f"unknown step kind {kind!r} (known: {', '.join(sorted(STEP_KINDS))})")
        name = str(s.get("name") or kind)
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
            raise ConfigError(label, f"{key}.name", f"{name!r}: use letters, digits, '-', '_', '.' (it names files in the run dir)")
        if name in seen:
            raise ConfigError(label, f"{key}.name", f"duplicate step name {name!r}")
        seen.add(name)
        on_failure = s.get("on_failure", "stop")
        if on_failure not in ("stop", "continue", "always-run"):
            raise ConfigError(label, f"{key}.on_failure", f"must be stop, continue or always-run, got {on_failure!r}")
        if not isinstance(s.get("always_run", False), bool):
            raise ConfigError(label, f"{key}.always_run", "expected true or false")
        always = bool(s.get("always_run", False)) or on_failure == "always-run"
        opts = s.get("with") or {}
        if not isinstance(opts, dict):
            raise ConfigError(label, f"{key}.with", "must be a mapping of step options")
        opts = substitute(opts, variables, label, f"{key}.with")
        steps.append(Step(name, kind, opts, "stop" if on_failure == "always-run" else on_failure, always))
    user_vars = {k: v for k, v in variables.items() if k not in _BUILTIN_VARS}
    return Campaign(
        str(data.get("name") or p.stem), steps, profile, user_vars, label, list(hosts), parallel,
        hashlib.sha256(text.encode()).hexdigest(),
    )


def plan(c: Campaign, only: list[str] | None = None) -> list[Step]:
    if not only:
        return list(c.steps)
    names = {s.name for s in c.steps}
    for o in only:
        if o not in names:
            raise UsageError(f"--only {o}: no such step in {c.source} (steps: {', '.join(s.name for s in c.steps)})")
    return [s for s in c.steps if s.name in only]


def snapshot_engines(ctx, options: dict) -> list[str]:
    """A snapshot step serves its engines; with gates: true it also runs the profile's gate set."""
    names = list(options.get("engines") or ctx.profile.serving.engines)
    if options.get("gates"):
        names += gate_engines(gate_inputs(ctx.profile))
    return names


def gate_step_engines(ctx, options: dict) -> list[str]:
    return gating.step_engines(ctx.profile, options)


def check_snapshot_step(ctx, options: dict):
    return snapshot_plan.step_plan(ctx.profile, options)


def check_gate_step(ctx, options: dict):
    return gating.check_step(ctx.profile, options)


def profile_engines(ctx, options: dict) -> list[str]:
    return capture.step_engines(ctx.profile, options)


def check_profile_step(ctx, options: dict) -> capture.ProfilePlan:
    return capture.check_step(ctx.profile, ctx.runner, ctx.out, options)


def check_bench_step(ctx, options: dict) -> tuple:
    return bench_run.check_step(ctx.profile, options)


def bench_engines(ctx, options: dict) -> list[str]:
    s = ctx.profile.serving
    engines = options.get("engines")
    if engines:
        return [x.strip() for x in engines.split(",")] if isinstance(engines, str) else list(engines)

    return [options.get("engine") or next(iter(with_binaries(ctx.profile, s.engines)), None)]


def engines_for(ctx, steps: list[Step]) -> list[str]:
    """Every engine the given steps will run (a step whose options are bad adds none: it fails itself)."""
    names: list[str] = []
    for s in steps:
        ref = STEP_KINDS[s.kind].engines if s.kind in STEP_KINDS else None
        if ref is None:
            continue
        try:
            names += imported(ref)(ctx, dict(s.options)) or []
        except ParityError:
            continue
    return [n for n in dict.fromkeys(names) if n]


def build_before_lock(ctx, later: list[Step]) -> dict:
    """Before a lock step: build, install and synthesize what the steps after it need, so the
    lock never covers a compile, an install or a model synthesis."""

    names = engines_for(ctx, later)
    if names:
        ctx.out.info(f"[build] before the GPU lock: {', '.join(names)}")
    return session.prepare(ctx, names, [m for m in step_models(ctx, later) if m in ctx.profile.models])


def step_models(ctx, steps: list[Step]) -> list[str]:
    """The models the steps read (each kind's StepKind.models)."""
    models: list[str] = []
    for s in steps:
        ref = STEP_KINDS[s.kind].models if s.kind in STEP_KINDS else None
        if ref is not None:
            models += imported(ref)(ctx, dict(s.options))
    return [m for m in dict.fromkeys(str(x).strip() for x in models if x and str(x).strip())]


def model_option(ctx, options: dict) -> list[str]:
    """A snapshot's, bench's or profile's model: its `model`, else the profile's serving model."""
    return [options.get("model") or ctx.profile.serving.model]


def snapshot_models(ctx, options: dict) -> list[str]:
    p = ctx.profile
    return model_option(ctx, options) + (gate_models(p.gates, GateSpec.from_profile(p)) if options.get("gates") else [])


def gate_step_models(ctx, options: dict) -> list[str]:
    p = ctx.profile
    try:
        return gate_models(p.gates, GateSpec.from_profile(p, **spec_from_options(dict(options))[1]))
    except ParityError:
        return []  # bad options: the step fails itself


def always(options: dict) -> bool:
    return True


def serves_a_workload(options: dict) -> bool:
    return options.get("workload") == "serve"



def dry_run_needs(ctx, steps: list[Step]) -> tuple[dict[str, str], list[int], bool]:
    """(paths, ports, uses the GPU) the steps' real run would need, for the go/no-go."""

    p = ctx.profile
    paths = session.engine_paths(ctx, engines_for(ctx, steps))
    for m in step_models(ctx, steps):  # snapshot's rule: a synth or hf model is made on the first real run
        path = session.dry_model_path(ctx.profile, m)
        if path is not None:
            paths[f"model {m}"] = path
    kinds = [(STEP_KINDS[s.kind], s.options) for s in steps if s.kind in STEP_KINDS]
    serve = any(k.serves is not None and imported(k.serves)(o) for k, o in kinds)
    # a crossover snapshot step (its gpus, or serving.gpus) starts its second server on serving.port + 1
    two = any(s.kind == "snapshot" and (s.options.get("gpus") or p.serving.gpus) for s in steps)
    ports = [p.serving.port, *([p.serving.port + 1] if two else [])] if serve else []
    return paths, ports, any(k.gpu for k, _ in kinds)


def will_skip(step: Step, rd) -> bool:
    """On resume: a step already complete in rd is skipped (a lock is always retaken)."""
    return not STEP_KINDS[step.kind].rerun_on_resume and rd.step_status(step.name) == "complete"


def check_resumable(c: Campaign, rd) -> None:
    """Refuse to resume another campaign's run dir, or one whose process still runs."""
    import os
    import socket

    m = rd.manifest()
    camp = m.get("campaign") or {}
    if m.get("kind") != "campaign" or camp.get("name") != c.name:
        raise UsageError(f"--resume {rd.path}: not a run of campaign {c.name!r} (it is {camp.get('name') or m.get('kind')!r})")
    if m.get("status") == "running" and m.get("hostname") == socket.gethostname() and str(m.get("pid") or "").isdigit():
        pid = int(m["pid"])
        if pid != os.getpid() and pid_alive(pid):
            raise UsageError(f"--resume {rd.path}: still running (pid {m['pid']}); stop it first")


@contextlib.contextmanager
def resuming(rd):
    """Held while a resumed campaign runs: a second `--resume` of the same run dir stops at
    once (exit 2) instead of running its steps beside this one."""
    import os

    def busy(path):
        try:
            holder = path.read_text().strip()
        except OSError:
            holder = ""
        raise UsageError(f"--resume {rd.path}: another parity is resuming it{f' ({holder})' if holder else ''}; wait for it, or stop it first")

    with locked(rd.path / ".resume.lock", on_wait=busy) as note:
        note.write_text(f"pid {os.getpid()}\n")
        yield


def run_campaign(ctx, c: Campaign, steps: list[Step], *, resume: bool = False) -> dict:
    """Run steps in ctx.run (already created or reopened).  Returns a summary;
    raises the first failure's error after the remaining (always-run or
    continue) steps have run."""
    import os

    rd = ctx.require_run()
    rd.update(campaign={"name": c.name, "file": c.source, "sha256": c.sha256, "vars": c.vars}, pid=os.getpid())
    results: dict[str, Any] = {}
    first_error: ParityError | None = None
    stopped = False
    failed: list[str] = []
    for i, step in enumerate(steps):
        if resume and will_skip(step, rd):
            ctx.out.info(f"[skip] {step.name} ({step.kind}): complete in {rd.path.name}")
            results[step.name] = {"status": "skipped-complete"}
            continue
        if stopped and not step.always_run:
            rd.record_step(step.name, "skipped", kind=step.kind, reason="an earlier step failed")
            results[step.name] = {"status": "skipped"}
            continue
        fn = step_function(step.kind, c.source)
        ctx.out.info(f"[step] {step.name} ({step.kind})")
        rd.record_step(step.name, "running", kind=step.kind, options=step.options)
        ctx.vars["_step"] = step.name
        t0 = time.monotonic()
        try:
            if step.kind == "lock":
                build_before_lock(ctx, [s for s in steps[i + 1:] if not (resume and will_skip(s, rd))])
            result = fn(ctx, dict(step.options)) or {}
        except KeyboardInterrupt:
            rd.record_step(step.name, "interrupted", seconds=round(time.monotonic() - t0, 3))
            raise
        except ParityError as e:
            rd.record_step(step.name, "failed", error=str(e), exit_code=e.exit_code, seconds=round(time.monotonic() - t0, 3))
            ctx.out.info(f"[fail] {step.name}: {e}")
            results[step.name] = {"status": "failed", "error": str(e), "exit_code": e.exit_code}
            failed.append(step.name)
            first_error = first_error or e
            stopped = stopped or step.on_failure == "stop"
            continue
        finally:
            ctx.vars.pop("_step", None)
        rd.write_json(f"steps/{step.name}.json", result)
        rd.record_step(step.name, "complete", seconds=round(time.monotonic() - t0, 3))
        results[step.name] = {"status": "complete", **({"result": result} if isinstance(result, dict) and len(str(result)) < 2000 else {})}
    summary = {"campaign": c.name, "run_dir": str(rd.path), "steps": results, "failed": failed,
               "exit_code": first_error.exit_code if first_error else 0}
    rd.write_json("campaign.json", summary)
    if first_error is not None:
        first_error.campaign_summary = summary  # --json still prints it
        raise first_error
    return summary


def check_shell_step(ctx, options: dict) -> float | None:
    """A shell step's options, checked before any step runs (dry run or not): its timeout."""
    check_step_options("shell", options, {"argv", "timeout_s", "env", "cwd", "log"})
    argv = options.get("argv")
    if not isinstance(argv, list) or not argv:
        raise ConfigError("campaign", "with.argv", "shell steps need argv: [cmd, arg, ...]")
    if not isinstance(options.get("env") or {}, dict):
        raise ConfigError("campaign", "with.env", "must be a mapping NAME: value")
    timeout = options.get("timeout_s")
    return None if timeout is None else positive_seconds(timeout, "shell step with.timeout_s")


def shell_step(ctx, options: dict) -> dict:
    """kind: shell -- options {argv: [cmd, arg, ...], timeout_s, env: {K: V}, cwd, log}.
    Runs through the context's runner; output goes to steps/<log or step name>.log."""
    timeout = check_shell_step(ctx, options)
    argv, env = options["argv"], options.get("env") or {}
    res = ctx.runner.run([str(a) for a in argv], timeout=timeout, env={str(k): str(v) for k, v in env.items()}, cwd=options.get("cwd"))
    log = options.get("log") or ctx.vars.get("_step") or "shell"
    if ctx.run:
        ctx.run.write_text(f"steps/{log}.log", res.stdout + res.stderr)
    if not res.ok:
        raise ParityError(f"{argv[0]} exited {res.rc}{' (timeout)' if res.timed_out else ''}: {res.tail(3)}")
    return {"rc": res.rc, "seconds": round(res.duration_s, 3)}


# --------------------------------------------------------------------------- hosts fan-out


def run_fanout(ctx, c: Campaign, argv: list[str]) -> dict:
    """Run this same command on each of c.hosts (delegated, one remote run dir
    each) and collect them under ctx.run/hosts/<host>/<run_id>/.  hosts.json lists
    {host, exit_code, run_dir (relative), status, hardware_class} per host."""
    import threading

    rd = ctx.require_run()
    rd.update(campaign={"name": c.name, "file": c.source, "sha256": c.sha256, "vars": c.vars, "hosts": c.hosts})
    rows: dict[str, dict] = {}

    def one(host: str) -> None:
        rd.record_step(host, "running", kind="host")
        prefix = f"[{host}] "
        try:
            res = delegate(host, ctx.profile, argv, rd.path / "hosts" / host, echo_stdout=not ctx.out.json_mode, prefix=prefix)
        except ParityError as e:
            ctx.out.info(f"{prefix}error: {e}")
            rows[host] = {"host": host, "exit_code": e.exit_code, "error": str(e), "run_dir": None, "status": "failed"}
            rd.record_step(host, "failed", exit_code=e.exit_code, error=str(e))
            return
        rel = str(Path(res.local_run_dir).relative_to(rd.path)) if res.local_run_dir else None
        m = _manifest(res.local_run_dir)
        rows[host] = {"host": host, "exit_code": res.rc, "run_dir": rel, "status": m.get("status"),
                      "hardware_class": _hardware_class(res.local_run_dir), "hostname": m.get("hostname")}
        rd.record_step(host, "complete" if res.rc == 0 else "failed", exit_code=res.rc, run_dir=rel)

    try:
        if c.parallel_hosts:
            threads = [threading.Thread(target=one, args=(h,), daemon=True) for h in c.hosts]
            for t in threads:
                t.start()
            for t in threads:
                while t.is_alive():
                    t.join(0.2)
        else:
            for h in c.hosts:
                one(h)
    except KeyboardInterrupt:
        ssh.abort_event.set()  # each remote run stops its group, its run dir is still pulled
        for t in threading.enumerate():
            if t is not threading.current_thread() and t.daemon and t.is_alive():
                t.join(60)
        raise
    table = [rows.get(h, {"host": h, "exit_code": None, "status": "not-run"}) for h in c.hosts]
    rd.write_json("hosts.json", table)
    summary = {"campaign": c.name, "run_dir": str(rd.path), "hosts": table}
    rd.write_json("campaign.json", summary)
    bad = [r for r in table if r.get("exit_code") != 0]
    if bad:
        err = ParityError(f"campaign {c.name}: failed on {', '.join(r['host'] for r in bad)} (exit {bad[0]['exit_code']}); see {rd.path}/hosts.json")
        err.exit_code = bad[0]["exit_code"] or 1
        err.campaign_summary = summary
        raise err
    return summary


def _manifest(run_dir: str | None) -> dict:
    try:
        return read_manifest(Path(run_dir) / "manifest.json").data if run_dir else {}
    except BadResultFile:
        return {}


def _hardware_class(run_dir: str | None) -> str | None:
    try:
        hw = load_json(Path(run_dir) / "hardware.json") if run_dir else None
    except BadResultFile:
        return None
    return hw.get("hardware_class") if isinstance(hw, dict) else None


@dataclass
class CampaignRequest:
    """What `parity campaign run` asks for."""

    file: str
    only: list[str] | None = None
    resume: str | None = None  # a run dir whose complete steps are skipped
    dry_run: bool = False
    vars: dict[str, str] = field(default_factory=dict)
    profile: str | None = None  # overrides the campaign's profile:
    host: str | None = None  # --host (the campaign then runs there, no fan-out)
    argv: list[str] = field(default_factory=list)  # this command line, repeated on each fan-out host


def parse_vars(pairs: list[str]) -> dict[str, str]:
    out = {}
    for p in pairs:
        k, sep, v = p.partition("=")
        if not sep or not k.strip().isidentifier():
            raise UsageError(f"--var {p!r}: expected NAME=VALUE")
        out[k.strip()] = v
    return out


def check_steps(ctx, steps: list[Step], label: str) -> None:
    """Each step's own check (StepKind.check): a bad option of any step fails the campaign, dry
    run or not, before anything runs; one line naming the step."""
    for s in steps:
        ref = STEP_KINDS[s.kind].check if s.kind in STEP_KINDS else None
        if ref is None:
            continue
        try:
            imported(ref)(ctx, dict(s.options))
        except ConfigError as e:
            raise ConfigError(label, f"steps.{s.name}", str(e)) from None
        except UsageError as e:
            said = str(e)
            for o in OPTIONS.values():  # a step's keys are the options' field names, not their flags
                said = re.sub(rf"(?<![\w-]){re.escape(o.flag)}(?![\w-])", f"with.{o.name}", said)
            raise UsageError(f"{label}: step {s.name} ({s.kind}): {said}") from None


def run_request(req: CampaignRequest, open_context: Callable[[str | None], Any]) -> dict:
    """`parity campaign run`: the plan (dry run), a fan-out over the campaign's hosts, a resumed
    run or a new one.  open_context(profile) gives the Context (with --host it delegates and exits)."""
    import os

    c = load_campaign(req.file, req.vars)
    steps = plan(c, req.only)
    fanout = bool(c.hosts) and not req.host and not os.environ.get(DELEGATED_ENV)
    if not fanout:
        for s in steps:
            step_function(s.kind, c.source)  # fail early on unavailable kinds
    if fanout and req.resume:
        raise UsageError(f"--resume with hosts: fan-out: resume one host's run with `parity --host NAME campaign run {req.file} --resume DIR`")
    ctx = open_context(req.profile or c.profile)
    rd = RunDir.open(req.resume) if req.resume else None
    if rd is not None:
        rd.settle("campaign run --resume")  # a run whose parity was killed still says running
        check_resumable(c, rd)
    if not fanout:  # every step's options as its real run will read them, before the first step
        check_steps(ctx, [s for s in steps if not (rd and will_skip(s, rd))], c.source)
    if req.dry_run:
        doc = {
            "campaign": c.name,
            "profile": ctx.profile.name,
            "vars": c.vars,
            "hosts": c.hosts if fanout else [],
            "parallel_hosts": c.parallel_hosts if fanout else False,
            "resume": str(rd.path) if rd else None,
            "steps": [
                {"name": s.name, "kind": s.kind, "with": s.options, "on_failure": s.on_failure, "always_run": s.always_run,
                 "skip": bool(rd and will_skip(s, rd))}
                for s in steps
            ],
        }  # fmt: skip
        if fanout:  # each host answers for itself: parity --host NAME campaign run --dry-run
            return doc

        with dry_run_session(ctx, "campaign", c.name) as drd:
            todo = [s for s in steps if not (rd and will_skip(s, rd))]
            paths, ports, gpu = dry_run_needs(ctx, todo)
            doc["go_no_go"] = go_no_go(ctx.as_run(), ctx.profile.lock, ctx.profile.hardware_class,
                                       paths=paths, ports=ports, gpu=gpu)
            doc["run_dir"] = str(drd.path)
            drd.write_json("plan.json", doc)
        return doc
    if fanout:
        with run_session(ctx, "campaign-hosts", f"{c.name}-hosts"):
            return run_fanout(ctx, c, req.argv)
    # what the dry run's go/no-go calls missing of the steps' engines (an endpoint's start
    # command) is refused here, before the run dir
    session.refuse_missing_programs(ctx, engines_for(ctx, [s for s in steps if not (rd and will_skip(s, rd))]))
    if rd is not None:
        ctx.run, ctx.run_id = rd, rd.run_id
        with resuming(rd):
            check_resumable(c, rd)  # again, under the lock: the checks above raced with any other resume
            prior = rd.manifest()
            rd.update(status="running", resumed=True, ended=None, resumed_at=now_iso(), error=None, pid=os.getpid(), **slurm_job(os.environ),
                      previous={"status": prior.get("status"), "error": prior.get("error"), "ended": prior.get("ended")})  # fmt: skip
            with run_session_existing(ctx, rd):
                return run_campaign(ctx, c, steps, resume=True)
    with run_session(ctx, "campaign", c.name):
        return run_campaign(ctx, c, steps)
