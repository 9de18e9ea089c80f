"""Campaigns: an ordered list of named steps of registered kinds, run in one
run directory.  Step kinds register by name in STEP_KINDS ("module:function",
imported only when used).  A step function takes (ctx, options) and returns a
JSON-able result; it raises a ParityError to fail.

YAML:
  name: smoke
  profile: smoke                  # default profile (overridden by --profile)
  vars: {model: tiny}             # ${model} in step options
  steps:
    - {name: build, kind: build, with: {engines: [paged, stock]}}
    - {name: post-gates, kind: gate, with: {phase: post}, always_run: true}
  on_failure per step: stop (default) | continue | always-run (= always_run + stop)
"""

from __future__ import annotations

import importlib
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from parity.errors import ConfigError, ParityError, UsageError

STEP_KINDS: dict[str, str] = {
    "synth": "parity.models.synth:campaign_step",
    "build": "parity.engine.build:campaign_step",
    "lock": "parity.lock:campaign_step",
    "gate": "parity.gates.prepost:campaign_step",
    "snapshot": "parity.runners.snapshot:campaign_step",
    "bench": "parity.runners.batched_bench:campaign_step",
    "profile": "parity.profiles.capture:campaign_step",
    "report": "parity.report.render:campaign_step",
    "shell": "parity.campaign:shell_step",
}


def register_step(kind: str, target: str) -> None:
    STEP_KINDS[kind] = target


def step_function(kind: str, label: str = "") -> Callable:
    if kind not in STEP_KINDS:
        raise ConfigError(label, "kind", f"unknown step kind {kind!r} (known: {', '.join(sorted(STEP_KINDS))})")
    mod_name, fn_name = STEP_KINDS[kind].split(":")
    try:
        mod = importlib.import_module(mod_name)
        return getattr(mod, fn_name)
    except (ImportError, AttributeError) as e:
        raise ConfigError(label, "kind", f"step kind {kind!r} is not available ({e})") from None


@dataclass
class Step:
    name: str
    kind: str
    options: dict[str, Any] = field(default_factory=dict)
    on_failure: str = "stop"
    always_run: bool = False


@dataclass
class Campaign:
    name: str
    steps: list[Step]
    profile: str | None = None
    vars: dict[str, Any] = field(default_factory=dict)
    source: str = ""


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


def load_campaign(path: str, extra_vars: dict[str, str] | None = None) -> Campaign:
    import yaml

    p = Path(path).expanduser()
    label = str(path)
    try:
        data = yaml.safe_load(p.read_text())
    except FileNotFoundError:
        raise ConfigError(label, "", "campaign file not found") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise ConfigError(label, f"line {mark.line + 1}" if mark else "", f"YAML syntax error: {getattr(e, 'problem', e)}") from None
    if not isinstance(data, dict):
        raise ConfigError(label, "", "a campaign must be a mapping with steps:")
    unknown = set(data) - {"name", "profile", "vars", "steps", "description", "hosts"}
    if unknown:
        raise ConfigError(label, sorted(unknown)[0], "unknown key")
    variables = dict(data.get("vars") or {})
    if not isinstance(variables, dict):
        raise ConfigError(label, "vars", "must be a mapping")
    variables.update(extra_vars or {})
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
        if name in seen:
            raise ConfigError(label, f"{key}.name", f"duplicate step name {name!r}")
        seen.add(name)
        on_failure = s.get("on_failure", "stop")
        if on_failure not in ("stop", "continue", "always-run"):
            raise ConfigError(label, f"{key}.on_failure", f"must be stop, continue or always-run, got {on_failure!r}")
        always = bool(s.get("always_run", False)) or on_failure == "always-run"
        opts = s.get("with") or {}
        if not isinstance(opts, dict):
            raise ConfigError(label, f"{key}.with", "must be a mapping of step options")
        opts = substitute(opts, variables, label, f"{key}.with")
        steps.append(Step(name, kind, opts, "stop" if on_failure == "always-run" else on_failure, always))
    return Campaign(str(data.get("name") or p.stem), steps, data.get("profile"), variables, label)


def plan(c: Campaign, only: list[str] | None = None) -> list[Step]:
    if not only:
        return list(c.steps)
    names = {s.name for s in c.steps}
    for o in only:
        if o not in names:
            raise UsageError(f"--only {o}: no such step in {c.source} (steps: {', '.join(s.name for s in c.steps)})")
    return [s for s in c.steps if s.name in only]


def run_campaign(ctx, c: Campaign, steps: list[Step], *, resume: bool = False) -> dict:
    """Run steps in ctx.run (already created or reopened).  Returns a summary;
    raises the first failure's error after always-run steps have run."""
    rd = ctx.require_run()
    results: dict[str, Any] = {}
    first_error: ParityError | None = None
    failed: list[str] = []
    for step in steps:
        if resume and rd.step_status(step.name) == "complete":
            ctx.out.info(f"[skip] {step.name} ({step.kind}): complete in {rd.path.name}")
            results[step.name] = {"status": "skipped-complete"}
            continue
        if first_error is not None and not step.always_run:
            rd.record_step(step.name, "skipped", kind=step.kind, reason="an earlier step failed")
            results[step.name] = {"status": "skipped"}
            continue
        fn = step_function(step.kind, c.source)
        ctx.out.info(f"[step] {step.name} ({step.kind})")
        rd.record_step(step.name, "running", kind=step.kind, options=step.options)
        t0 = time.monotonic()
        try:
            result = fn(ctx, dict(step.options)) or {}
        except KeyboardInterrupt:
            rd.record_step(step.name, "interrupted", seconds=round(time.monotonic() - t0, 3))
            raise
        except ParityError as e:
            rd.record_step(step.name, "failed", error=str(e), exit_code=e.exit_code, seconds=round(time.monotonic() - t0, 3))
            ctx.out.info(f"[fail] {step.name}: {e}")
            results[step.name] = {"status": "failed", "error": str(e)}
            failed.append(step.name)
            if step.on_failure == "continue":
                continue
            if first_error is None:
                first_error = e
            continue
        rd.write_json(f"steps/{step.name}.json", result)
        rd.record_step(step.name, "complete", seconds=round(time.monotonic() - t0, 3))
        results[step.name] = {"status": "complete", **({"result": result} if isinstance(result, dict) and len(str(result)) < 2000 else {})}
    summary = {"campaign": c.name, "run_dir": str(rd.path), "steps": results, "failed": failed}
    rd.write_json("campaign.json", summary)
    if first_error is not None:
        raise first_error
    return summary


def shell_step(ctx, options: dict) -> dict:
    """kind: shell - run a command (argv list) through the context's runner."""
    argv = options.get("argv")
    if not isinstance(argv, list) or not argv:
        raise ConfigError("campaign", "with.argv", "shell steps need argv: [cmd, arg, ...]")
    res = ctx.runner.run([str(a) for a in argv], timeout=options.get("timeout_s"), env=options.get("env"))
    if ctx.run:
        ctx.run.write_text(f"steps/{options.get('log', 'shell')}.log", res.stdout + res.stderr)
    if not res.ok:
        from parity.errors import ParityError as _PE

        raise _PE(f"{argv[0]} exited {res.rc}{' (timeout)' if res.timed_out else ''}: {res.tail(3)}")
    return {"rc": res.rc, "seconds": round(res.duration_s, 3)}
