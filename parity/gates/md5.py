"""The greedy-md5 gate: llama-completion greedy on one path, md5 of stdout,
compared with the canonical md5 for (model, path, form, n_predict) -- from the
registry, from --expect, or from the reference engine's build in this session.
Two arms (a lever A/B): per model x path, both md5s must be equal.

Empty output, a crash, a timeout or a nonzero exit is an ERROR, never a pass."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from parity.context import Run
from parity.engines.bound import Engine
from parity.errors import ParityError, UsageError
from parity.gates import completion, kltext, known_md5
from parity.gates.kl import kl_gate, settles_md5
from parity.gates.base import LIST, STR, GateInputs, GateKind, Target, engine_paths, set_paths
from parity.gates.checks import ERROR, FAIL, PASS, Check
from parity.gates.common import dry_model, dry_tool, gate_engine, resolve_model, save


def greedy(g, r: Run, eng: Engine, model_file: str, path: str | None, form: str, n_predict: int):
    """A greedy run (g: the gates section), repeated (up to gates.completion_retries more times,
    each recorded) while its stdout is incomplete -- see completion.is_complete.
    A crash or a timeout is not retried."""
    binary = eng.tool_path("llama-completion", r.runner, r.out)
    argv = completion.greedy_argv(binary, model_file, g.prompt, n_predict, g.seed, form, g.completion_args, g.ctx)
    env = eng.path_env(path)
    earlier: list[dict] = []
    tries = 1 + max(0, g.completion_retries)
    for attempt in range(1, tries + 1):
        run = completion.run_greedy(r.runner, argv, env, g.timeout_s)
        if not run.ok or completion.is_complete(run.stdout) or attempt == tries:
            break
        earlier.append({"md5": run.md5, "bytes": len(run.stdout), "why": "incomplete stdout (no final blank line)"})
    run.attempts = earlier
    return run


def run_problem(run, timeout_s: float) -> str | None:
    """Why a run cannot be gated at all (None when it produced a usable transcript)."""
    if run.timed_out:
        return f"llama-completion timed out after {timeout_s:g} s"
    if run.rc != 0:
        last = run.stderr.strip().splitlines()[-1] if run.stderr.strip() else "no stderr"
        return f"llama-completion exited {run.rc}: {last}"
    tries = 1 + len(run.attempts or [])
    if not run.stdout:
        return f"empty stdout after {tries} attempt(s) (md5 {completion.EMPTY_MD5} is never accepted)"
    if not completion.is_complete(run.stdout):
        return f"stdout incomplete after {tries} attempt(s): no final blank line, {len(run.stdout)} bytes (truncated?)"
    return None


def _reference(inputs: GateInputs, r: Run, model_file: str, form: str, tag: str):
    """The reference engine's greedy run, once per gate phase and model."""
    g = inputs.gates
    key = (tag, g.reference_engine, g.reference_path, model_file, form, g.n_predict)
    memo = inputs.references
    if key not in memo:
        memo[key] = greedy(g, r, inputs.engine(g.reference_engine), model_file, g.reference_path, form, g.n_predict)
    return memo[key]


def md5_gate(inputs: GateInputs, r: Run, model: str, path: str | None, engine: str | None = None, expect: str | None = None,
             form: str | None = None, tag: str = "") -> Check:  # fmt: skip
    g = inputs.gates
    form = form or g.form
    try:
        eng = gate_engine(inputs, engine)
    except ParityError as e:
        return Check(f"md5 {model}/{path}", "md5", expect or "-", "-", ERROR, str(e), model, path)
    engine = eng.name
    path = path or eng.section.default_path
    name = f"md5 {model}/{path}" + (f" [{engine}]" if engine != g.engine else "")
    label = model
    try:
        if form not in ("chat", "no-cnv"):
            raise UsageError(f"prompt form {form!r}: expected chat or no-cnv")
        label, model_file = resolve_model(inputs, model)
        expected, provenance, ref_bytes = expect, "--expect", None
        canonical = None if expect else known_md5.lookup(inputs.models, label, path, form, g.n_predict, inputs.registry)
        if canonical:
            expected, provenance = canonical.md5, canonical.validated or "registry (no provenance given)"
            if canonical.transcript and Path(canonical.transcript).is_file():
                ref_bytes = Path(canonical.transcript).read_bytes()
        elif not expected and g.reference_engine:
            ref = _reference(inputs, r, model_file, form, tag)
            problem = run_problem(ref, g.timeout_s)
            if problem:
                return Check(name, "md5", "-", "-", ERROR, f"reference build {g.reference_engine} failed: {problem}", label, path)
            expected, ref_bytes = ref.md5, ref.stdout
            provenance = f"reference: {g.reference_engine} build, path {g.reference_path or 'default'}, same session"
            save(r, f"gates/{tag}md5-{label}-reference.out", ref.stdout)
        run = greedy(g, r, eng, model_file, path, form, g.n_predict)
    except ParityError as e:
        return Check(name, "md5", expect or "-", "-", ERROR, str(e), label, path)
    transcript = save(r, f"gates/{tag}md5-{label}-{path}" + (f"-{engine}" if engine != g.engine else "") + ".out", run.stdout)
    data = {
        "engine": engine,
        "form": form,
        "n_predict": g.n_predict,
        "argv": run.argv,
        "env": run.env,
        "rc": run.rc,
        "seconds": round(run.seconds, 2),
        "transcript": transcript,
        "expected_provenance": provenance,
    }
    if run.attempts:
        data["incomplete_attempts"] = run.attempts
    if counters := completion.series_counters(run.stderr):
        data["series_counters"] = counters  # the paged series' exit-time counters: did the paged path run
    problem = run_problem(run, g.timeout_s)
    if problem:
        return Check(name, "md5", expected, run.md5 if run.stdout else "-", ERROR, problem, label, path, data=data)
    if not expected:  # still run: the observed md5 is what `parity gate --record` proposes
        data["no_expectation"] = True
        why = f"no canonical md5 for {label}/{path}/{form}/n={g.n_predict} (registry, --expect or gates.reference_engine); observed {run.md5}"
        return Check(name, "md5", "-", run.md5, ERROR, why, label, path, data=data)
    if run.md5 == completion.EMPTY_MD5:  # unreachable after run_problem; kept as the last line of defence
        return Check(name, "md5", expected, run.md5, ERROR, "md5 of empty output", label, path, data=data)
    if run.md5 != expected:
        detail = "md5 mismatch"
        if ref_bytes is not None:
            detail += "; " + completion.first_divergence(run.stdout, ref_bytes)
        return Check(name, "md5", expected, run.md5, FAIL, detail, label, path, data=data)
    return Check(name, "md5", expected, run.md5, PASS, provenance, label, path, data=data)


class Md5Gate(GateKind):
    name = "md5"
    what = "greedy md5"
    reads = ("models", "paths", "engines")
    switch = "models"
    options = {"models": LIST, "paths": LIST, "engines": LIST, "expect": STR, "form": STR}
    arms = {"BE": "gate", "KL": "evidence"}  # a bit-exact lever is gated by it; a lossy one keeps it as evidence

    def defaults(self, g) -> dict:
        return {"models": list(g.models), "paths": list(g.paths)}

    def engines(self, gates, spec, engine):
        """The gated builds (several with spec.engines) and the reference build that defines the md5."""
        if not spec.models:
            return []
        ref = gates.reference_engine
        return [*(spec.engines or [engine]), *([ref] if ref and not spec.expect else [])]

    def models(self, gates, spec) -> list[str]:
        """The gated models, and the KL gate's when a changed md5 of its candidate runs it."""
        kl = gates.kl
        return list(spec.models) + ([kl.reference, kl.candidate, kl.baseline] if _kl_on_change(kl, spec) else [])

    def check_plan(self, gates, spec) -> None:
        kl = gates.kl
        if _kl_on_change(kl, spec):
            kltext.check_long_enough(kl.text, kl.chunks, [kl.ctx], "gates.kl.text (gates.kl.on_md5_change)")

    def expand(self, inputs, spec, engine) -> list[Target]:
        """Per engine, model x path; an engine other than the gate engine runs the requested paths it has."""
        paths = set_paths(inputs, spec, engine)
        plan = [(eng, paths if eng == engine else engine_paths(inputs.engine(eng), spec.paths)) for eng in spec.engines or [engine]]
        return [Target(eng, m, p) for eng, eng_paths in plan for m in spec.models for p in eng_paths]

    def label(self, t: Target) -> str:
        return f"md5 {t.model}/{t.path} {t.engine or ''}"

    def run(self, inputs, run, spec, t: Target, tag: str) -> Check:
        """The md5 check; a changed md5 on a path of gates.kl.on_md5_change runs the KL gate before
        the run is accepted (the users' rule: a lossy change is KL-validated, or rejected)."""
        c = md5_gate(inputs, run, t.model, t.path, t.engine, spec.expect, spec.form, tag)
        if c.status != FAIL or not settles_md5(inputs.gates.kl, c.model, c.path):
            return c
        run.out.info(f"[gate] md5 {c.model}/{c.path} changed ({c.got}, expected {c.expected}): "
                     "running the KL gate (gates.kl.on_md5_change)")
        return judged_by_kl(c, kl_gate(inputs, run, candidate=c.model, engine=t.engine, path=c.path, tag=f"{tag}md5-"))

    def dry(self, inputs, runner, out, spec, t: Target) -> dict:
        """The greedy command on t's path and the md5 it is held to (and the reference build's
        command, when that build defines it in the same session)."""
        g = inputs.gates
        form = spec.form or g.form
        eng = gate_engine(inputs, t.engine)
        engine = eng.name
        path = t.path or eng.section.default_path
        label, model_file, files = dry_model(inputs, t.model)

        def command(e: Engine, p: str | None) -> dict:
            binary = dry_tool(e, "llama-completion", runner, out)
            files[f"llama-completion of {e.name}"] = binary
            argv = completion.greedy_argv(binary, model_file, g.prompt, g.n_predict, g.seed, form, g.completion_args,
                                          g.ctx)
            return {"argv": argv, "env": e.path_env(p)}

        commands = [command(eng, path)]
        canonical = None if spec.expect else known_md5.lookup(inputs.models, label, path, form, g.n_predict, inputs.registry)
        if spec.expect:
            expected = f"{spec.expect} (--expect)"
        elif canonical:
            expected = f"{canonical.md5} ({canonical.validated or 'registry'})"
        elif g.reference_engine:
            expected = f"the md5 of the reference build {g.reference_engine} (path {g.reference_path or 'default'}), "
            expected += "same session"
            commands.insert(0, command(inputs.engine(g.reference_engine), g.reference_path))
        else:
            expected = (f"none: no canonical md5 for {label}/{path}/{form}/n={g.n_predict} (the run reports the "
                        "observed md5; --record proposes it)")
        if settles_md5(g.kl, label, path):  # the real run prepares the KL gate's models and binary for it
            expected += "; a changed md5 runs the KL gate, accepted within its band (gates.kl.on_md5_change)"
            files[f"llama-perplexity of {engine}"] = dry_tool(eng, "llama-perplexity", runner, out)
            for m in filter(None, (g.kl.reference, g.kl.baseline)):
                files.update(dry_model(inputs, m)[2])
        return {"commands": commands, "expected": expected, "files": files}

    def observe(self, inputs, run, spec, t: Target, tag: str) -> Check:
        """The greedy md5 of t's engine, expecting nothing (pass: a usable transcript)."""
        g = inputs.gates
        eng = gate_engine(inputs, t.engine)
        label, model_file = resolve_model(inputs, t.model)
        res, transcript = _observed(g, run, eng, model_file, t.path, spec.form or g.form, f"gates/{tag}md5-{label}-{t.path}.out")
        problem = run_problem(res, g.timeout_s)
        data = {"engine": eng.name, "transcript": transcript, "seconds": round(res.seconds, 2), "env": res.env}
        return Check(f"md5 {label}/{t.path}", "md5", "-", res.md5 if res.stdout else "-", ERROR if problem else PASS, problem or "", label, t.path, data=data)

    def ran_on(self, gates, spec, engine, e: str) -> list[str]:
        if spec.models and e in (spec.engines or [engine]):
            return [f"md5 of {', '.join(spec.models)}"]
        if spec.models and not spec.expect and e == gates.reference_engine:
            return ["the md5 reference"]
        return []

    def compare_arms(self, inputs, run, a, b, models, paths, tag) -> list[dict]:
        """Per model x path: both arms' greedy md5, and whether they are equal."""
        g = inputs.gates
        arm_a, arm_b = a.name, b.name
        out = []
        for model in models:
            label, model_file = resolve_model(inputs, model)
            for path in paths:
                runs, stdout = {}, {}
                for arm, eng in ((arm_a, a), (arm_b, b)):
                    r, _ = _observed(g, run, eng, model_file, path, g.form, f"gates/{tag}md5-{label}-{path}-{arm}.out")
                    stdout[arm] = r.stdout
                    runs[arm] = {"md5": r.md5 if r.stdout else None, "problem": run_problem(r, g.timeout_s), "seconds": round(r.seconds, 2), "env": r.env}
                ra, rb = runs[arm_a], runs[arm_b]
                if ra["problem"] or rb["problem"]:
                    status, detail = "error", "; ".join(f"{arm}: {runs[arm]['problem']}" for arm in (arm_a, arm_b) if runs[arm]["problem"])
                elif ra["md5"] == rb["md5"]:
                    status, detail = "equal", ra["md5"]
                else:
                    status = "differ"
                    detail = f"{arm_a} {ra['md5']} != {arm_b} {rb['md5']}; " + completion.first_divergence(stdout[arm_b], stdout[arm_a])
                out.append({"phase": tag.rstrip("-") or "pre", "model": label, "path": path, "status": status, "detail": detail, "arms": runs})
                run.out.info(f"[gate] {tag}md5 {label}/{path}: {status} ({detail})")
        return out

    def arm_ok(self, row: dict) -> bool:
        return row["status"] == "equal"

    def arms_summary(self, rows: list[dict]) -> str:
        return f"md5 {sum(map(self.arm_ok, rows))}/{len(rows)} equal"

    def arm_problem(self, row: dict, role: str) -> str:
        return f"md5 {row['phase']} {row['model']}/{row['path']}" + (f" {row['status']}" if role == "gate" else "") + f": {row['detail']}"

    def users_name(self, c: dict, gate_engine, default_paths) -> str:
        model, path = c.get("model") or "model", c.get("path")
        engine = (c.get("data") or {}).get("engine") or gate_engine
        name = model if path in (None, default_paths.get(engine)) else f"{model}_{path}"
        return f"{name}{'' if engine in (None, gate_engine) else '_' + engine}_md5"

    def users_status(self, c: dict) -> str:
        return "ok" if c["status"] == PASS else "mismatch" if c["status"] == FAIL else "missing"

    def users_output(self, c: dict) -> str | None:
        data = c.get("data") or {}
        return None if data.get("kl") else data.get("transcript")  # a KL-judged change: the detail says how


def _kl_on_change(kl, spec) -> bool:
    """Whether a changed md5 of this gate set may run the KL gate (its candidate is gated on some path)."""
    return bool(kl.on_md5_change and kl.reference and kl.candidate in spec.models)


def judged_by_kl(c: Check, k: Check) -> Check:
    """A changed md5 (c failed) and the KL check it ran: a pass reads "md5 changed, KL within band"
    (the KL's numbers beside it); anything else fails, with the KL's reason."""
    data = {**c.data, "md5_changed": True, "kl": k.to_dict()}
    if k.status == PASS:
        detail = f"md5 changed, KL within band: {k.got} ({k.expected}); {c.detail}"
        return replace(c, status=PASS, detail=detail, data=data)
    return replace(c, status=FAIL, detail=f"md5 changed and KL {k.status}: {k.detail}", data=data)


def _observed(g, r: Run, eng: Engine, model_file: str, path: str | None, form: str, name: str):
    """A greedy run of eng, its stdout saved in the run dir as name: (run, saved name)."""
    run = greedy(g, r, eng, model_file, path, form, g.n_predict)
    return run, save(r, name, run.stdout)


KIND = Md5Gate()
