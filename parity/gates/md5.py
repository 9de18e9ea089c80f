"""The greedy-md5 gate: llama-completion greedy on one path, md5 of stdout,
compared with the canonical md5 for (model, path, form, n_predict) -- from the
registry, from --expect, or from the reference engine's build in this session.

Empty output, a crash, a timeout or a nonzero exit is an ERROR, never a pass."""

from __future__ import annotations

from pathlib import Path

from parity.errors import ParityError, UsageError
from parity.gates import completion, registry
from parity.gates.checks import ERROR, FAIL, PASS, Check
from parity.gates.common import gate_engine, path_env, resolve_model, save, tool


def greedy(ctx, engine: str, model_file: str, path: str | None, form: str, n_predict: int):
    """A greedy run, repeated (up to gates.completion_retries more times, each
    recorded) while its stdout is incomplete -- see completion.is_complete.
    A crash or a timeout is not retried."""
    g = ctx.profile.gates
    argv = completion.greedy_argv(tool(ctx, engine, "llama-completion"), model_file, g.prompt, n_predict, g.seed, form, g.completion_args, g.ctx)
    env = path_env(ctx, engine, path)
    earlier: list[dict] = []
    tries = 1 + max(0, g.completion_retries)
    for attempt in range(1, tries + 1):
        run = completion.run_greedy(ctx.runner, argv, env, g.timeout_s)
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


def _reference(ctx, model_file: str, form: str, tag: str):
    """The reference engine's greedy run, once per gate phase and model."""
    g = ctx.profile.gates
    key = (tag, g.reference_engine, g.reference_path, model_file, form, g.n_predict)
    memo = ctx.vars.setdefault("_gate_reference_runs", {})
    if key not in memo:
        memo[key] = greedy(ctx, g.reference_engine, model_file, g.reference_path, form, g.n_predict)
    return memo[key]


def md5_gate(ctx, model: str, path: str | None, engine: str | None = None, expect: str | None = None, form: str | None = None, tag: str = "") -> Check:
    g = ctx.profile.gates
    form = form or g.form
    try:
        engine = gate_engine(ctx, engine)
    except ParityError as e:
        return Check(f"md5 {model}/{path}", "md5", expect or "-", "-", ERROR, str(e), model, path)
    path = path or ctx.profile.engine(engine).default_path
    name = f"md5 {model}/{path}" + (f" [{engine}]" if engine != g.engine else "")
    label = model
    try:
        if form not in ("chat", "no-cnv"):
            raise UsageError(f"prompt form {form!r}: expected chat or no-cnv")
        label, model_file = resolve_model(ctx, model)
        expected, provenance, ref_bytes = expect, "--expect", None
        canonical = None if expect else registry.lookup(ctx.profile, label, path, form, g.n_predict, ctx.vars.get("registry"))
        if canonical:
            expected, provenance = canonical.md5, canonical.validated or "registry (no provenance given)"
            if canonical.transcript and Path(canonical.transcript).is_file():
                ref_bytes = Path(canonical.transcript).read_bytes()
        elif not expected and g.reference_engine:
            ref = _reference(ctx, model_file, form, tag)
            problem = run_problem(ref, g.timeout_s)
            if problem:
                return Check(name, "md5", "-", "-", ERROR, f"reference build {g.reference_engine} failed: {problem}", label, path)
            expected, ref_bytes = ref.md5, ref.stdout
            provenance = f"reference: {g.reference_engine} build, path {g.reference_path or 'default'}, same session"
            save(ctx, f"gates/{tag}md5-{label}-reference.out", ref.stdout)
        run = greedy(ctx, engine, model_file, path, form, g.n_predict)
    except ParityError as e:
        return Check(name, "md5", expect or "-", "-", ERROR, str(e), label, path)
    transcript = save(ctx, f"gates/{tag}md5-{label}-{path}" + (f"-{engine}" if engine != g.engine else "") + ".out", run.stdout)
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
