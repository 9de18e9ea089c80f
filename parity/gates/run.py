"""Run the three gate kinds; every failure mode becomes a non-pass Check."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

from parity.config import cache_dir
from parity.errors import ParityError, UsageError
from parity.gates import completion, perplexity, registry
from parity.gates import test_backend_ops as tbo
from parity.gates.checks import ERROR, FAIL, NOT_RUN, PASS, Check

DEFAULT_TEXT = Path(__file__).resolve().parent.parent / "defaults" / "kl-text.txt"


def path_env(ctx, engine: str, path: str | None) -> dict[str, str]:
    e = ctx.profile.engine(engine)
    path = path or e.default_path
    env = dict(e.env)
    if path is not None:
        if e.paths and path not in e.paths:
            raise UsageError(f"engine {engine} has no path {path!r} (paths: {', '.join(e.paths)})")
        env.update(e.paths.get(path, {}))
    return env


def resolve_model(ctx, model: str) -> tuple[str, str]:
    """(label, file) for a profile model name or a GGUF path."""
    if model in ctx.profile.models:
        from parity.models.synth import ensure_model

        return model, ensure_model(ctx.profile, model)
    p = Path(model).expanduser()
    if p.is_file():
        return p.stem, str(p)
    raise UsageError(f"model {model!r}: neither a model of profile {ctx.profile.name} ({', '.join(ctx.profile.models)}) nor a file")


def _tool(ctx, engine: str, tool: str) -> str:
    from parity.engine.build import tool_path

    return tool_path(ctx.profile, engine, tool, ctx.runner, ctx.out)


def _save(ctx, name: str, data: bytes | str) -> str | None:
    if ctx.run is None:
        return None
    p = ctx.run.file(name)
    p.write_bytes(data if isinstance(data, bytes) else data.encode())
    return str(p.relative_to(ctx.run.path))


def greedy(ctx, engine: str, model_file: str, path: str | None, form: str, n_predict: int, reference: bytes | None = None):
    """One greedy run; retried once (and recorded) when the output is empty or a
    strict prefix of the reference: llama.cpp's async logger can drop the tail
    of stdout at exit (its singleton is leaked on purpose, so never flushed)."""
    g = ctx.profile.gates
    argv = completion.greedy_argv(_tool(ctx, engine, "llama-completion"), model_file, g.prompt, n_predict, g.seed, form, g.completion_args)
    run = completion.run_greedy(ctx.runner, argv, path_env(ctx, engine, path), g.timeout_s)
    truncated = reference is not None and run.stdout != reference and reference.startswith(run.stdout)
    if (run.rc == 0 and not run.timed_out and not run.stdout) or truncated:
        first = {"md5": run.md5, "bytes": len(run.stdout), "why": "truncated" if run.stdout else "empty"}
        run = completion.run_greedy(ctx.runner, argv, path_env(ctx, engine, path), g.timeout_s)
        run.retried = first
    return run


def _run_problem(run) -> str | None:
    if run.timed_out:
        return f"timed out after {ctx_timeout(run)}"
    if run.rc != 0:
        return f"llama-completion exited {run.rc}: {run.stderr.strip().splitlines()[-1] if run.stderr.strip() else 'no stderr'}"
    if not run.stdout:
        return f"empty stdout (md5 {completion.EMPTY_MD5} is never accepted)"
    return None


def ctx_timeout(run) -> str:
    return f"{run.seconds:.0f} s"


def md5_gate(ctx, model: str, path: str | None, engine: str | None = None, expect: str | None = None, form: str | None = None, tag: str = "") -> Check:
    g = ctx.profile.gates
    engine = engine or g.engine or next(iter(ctx.profile.engines))
    form = form or g.form
    path = path or ctx.profile.engine(engine).default_path
    name = f"md5 {model}/{path}"
    try:
        label, model_file = resolve_model(ctx, model)
        canonical = registry.lookup(ctx.profile, label, path, form, g.n_predict) if not expect else None
        expected, provenance, ref_bytes = expect, "--expect", None
        if canonical:
            expected, provenance = canonical.md5, canonical.validated or "profile registry"
            if canonical.transcript and Path(canonical.transcript).expanduser().is_file():
                ref_bytes = Path(canonical.transcript).expanduser().read_bytes()
        elif not expected and g.reference_engine:
            ref = greedy(ctx, g.reference_engine, model_file, g.reference_path, form, g.n_predict)
            problem = _run_problem(ref)
            if problem:
                return Check(name, "md5", "-", "-", ERROR, f"reference build {g.reference_engine} failed: {problem}", label, path)
            expected, ref_bytes = ref.md5, ref.stdout
            provenance = f"reference: {g.reference_engine} build/{g.reference_path or 'default'} in this session"
            _save(ctx, f"gates/{tag}md5-{label}-reference.out", ref.stdout)
        if not expected:
            return Check(name, "md5", "-", "-", ERROR, f"no canonical md5 for {label}/{path}/{form}/n={g.n_predict} and no --expect", label, path)
        run = greedy(ctx, engine, model_file, path, form, g.n_predict, ref_bytes)
    except ParityError as e:
        return Check(name, "md5", expect or "-", "-", ERROR, str(e), model, path)
    transcript = _save(ctx, f"gates/{tag}md5-{label}-{path}.out", run.stdout)
    data = {"engine": engine, "form": form, "argv": run.argv, "env": run.env, "seconds": round(run.seconds, 2), "transcript": transcript, "expected_provenance": provenance}
    if getattr(run, "retried", None):
        data["retried_after"] = run.retried
    problem = _run_problem(run)
    if problem:
        return Check(name, "md5", expected, run.md5 if run.stdout else "-", ERROR, problem, label, path, data=data)
    if run.md5 != expected:
        detail = "md5 mismatch"
        if ref_bytes is not None:
            detail += "; " + completion.first_divergence(run.stdout, ref_bytes)
        return Check(name, "md5", expected, run.md5, FAIL, detail, label, path, data=data)
    return Check(name, "md5", expected, run.md5, PASS, provenance, label, path, data=data)


def op_gate(ctx, op: str, backend: str | None = None, engine: str | None = None, tag: str = "") -> Check:
    g = ctx.profile.gates
    backend = backend or g.op_backend
    engine = engine or g.engine or next(iter(ctx.profile.engines))
    name = f"op {op} [{backend}]"
    try:
        binary = _tool(ctx, engine, "test-backend-ops")
    except ParityError as e:
        return Check(name, "op", "all", "-", ERROR, str(e))
    attempts = []
    for attempt in range(1 + max(0, g.op_retries)):
        res = ctx.runner.run(tbo.argv(binary, op, backend), env=ctx.profile.engine(engine).env, timeout=g.op_timeout_s)
        _save(ctx, f"gates/{tag}op-{op}-{backend}-{attempt + 1}.txt", res.stdout + res.stderr)
        if res.timed_out:
            status, got, detail = ERROR, "-", f"timed out after {g.op_timeout_s:.0f} s"
        else:
            status, got, detail = tbo.verdict(tbo.parse(res.stdout + "\n" + res.stderr), backend, res.rc)
        attempts.append({"attempt": attempt + 1, "status": status, "got": got, "detail": detail})
        if status in (PASS, NOT_RUN):
            break
    final = attempts[-1]
    detail = final["detail"]
    if len(attempts) > 1:
        detail = f"{'passed on retry' if final['status'] == PASS else 'failed twice'} (first attempt {attempts[0]['got']}: {attempts[0]['status']}); {detail}".rstrip("; ")
    expected = f"{final['got'].split('/')[1]}/{final['got'].split('/')[1]}" if "/" in final["got"] else "all"
    return Check(name, "op", expected, final["got"], final["status"], detail, attempts=attempts, data={"engine": engine, "backend": backend})


def _sha_file(p: str) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def _kl_run(ctx, engine, model_file, logits, kl, path) -> dict:
    argv = perplexity.kl_argv(_tool(ctx, engine, "llama-perplexity"), model_file, logits, kl.ctx, kl.chunks, ["-t", "1"] if not ctx.profile.engine(engine).cuda_archs else ["-ngl", "99"])
    retried = None
    for attempt in (1, 2):
        res = ctx.runner.run(argv, env=path_env(ctx, engine, path), timeout=kl.timeout_s)
        stats = perplexity.parse(res.stdout + "\n" + res.stderr)
        # exit 0 without the statistics: the async-logger tail loss; retry once, recorded
        if not (res.ok and "kld" not in stats) or attempt == 2:
            break
        retried = "exit 0 but no KLD statistics (log tail lost); retried once"
    return {"ok": res.ok, "rc": res.rc, "timed_out": res.timed_out, "stats": {k: [v.value, v.err] for k, v in stats.items()}, "tail": res.tail(5), "text": res.stdout + res.stderr, "retried": retried}


def kl_gate(ctx, candidate: str | None = None, baseline: str | None = None, reference: str | None = None, engine: str | None = None, path: str | None = None, tag: str = "") -> Check:
    kl = ctx.profile.gates.kl
    engine = engine or ctx.profile.gates.engine or next(iter(ctx.profile.engines))
    reference, baseline, candidate = reference or kl.reference, baseline or kl.baseline, candidate or kl.candidate
    name = f"kl {candidate} vs {reference}"
    if not reference or not candidate:
        return Check(name, "kl", "-", "-", NOT_RUN, "gates.kl needs reference and candidate models")
    try:
        _, ref_file = resolve_model(ctx, reference)
        _, cand_file = resolve_model(ctx, candidate)
        text = kl.text or str(DEFAULT_TEXT)
        if not Path(text).is_file():
            raise UsageError(f"gates.kl.text: file not found: {text}")
        key = hashlib.sha256(f"{_sha_file(ref_file)}:{_sha_file(text)}:{kl.ctx}:{kl.chunks}:{engine}".encode()).hexdigest()[:24]
        logits = cache_dir() / "kl" / f"{key}.kld"
        logits.parent.mkdir(parents=True, exist_ok=True)
        if not logits.is_file():
            tmp = logits.with_suffix(".partial")
            argv = perplexity.base_argv(_tool(ctx, engine, "llama-perplexity"), ref_file, text, kl.ctx, kl.chunks, str(tmp), ["-t", "1"] if not ctx.profile.engine(engine).cuda_archs else ["-ngl", "99"])
            res = ctx.runner.run(argv, env=ctx.profile.engine(engine).env, timeout=kl.timeout_s)
            if not res.ok or not tmp.is_file():
                return Check(name, "kl", "-", "-", ERROR, f"saving reference logits failed (exit {res.rc}): {res.tail(2)}")
            tmp.rename(logits)
        cand = _kl_run(ctx, engine, cand_file, str(logits), kl, path)
        base = _kl_run(ctx, engine, resolve_model(ctx, baseline)[1], str(logits), kl, path) if baseline else None
    except ParityError as e:
        return Check(name, "kl", "-", "-", ERROR, str(e))
    _save(ctx, f"gates/{tag}kl-{candidate}.txt", cand.pop("text"))
    if base:
        _save(ctx, f"gates/{tag}kl-{baseline}.txt", base.pop("text"))
    data = {"candidate": cand, "baseline": base, "logits": str(logits), "engine": engine}
    ck = cand["stats"].get("kld")
    if not cand["ok"] or ck is None:
        return Check(name, "kl", "-", "-", ERROR, f"llama-perplexity --kl-divergence failed (exit {cand['rc']}): {cand['tail']}", candidate, path, data=data)
    kld = ck[0]
    if not math.isfinite(kld):
        return Check(name, "kl", "finite KLD", str(kld), ERROR, "KLD is not a finite number", candidate, path, data=data)
    bounds, problems = [], []
    if base:
        bk = base["stats"].get("kld")
        if not base["ok"] or bk is None or not math.isfinite(bk[0]):
            return Check(name, "kl", "-", f"{kld:.6f}", ERROR, f"baseline {baseline} KL run failed or gave no finite KLD", candidate, path, data=data)
        bound = bk[0] + kl.kld_slack
        bounds.append(f"KLD <= {bound:.6f} ({baseline})")
        if kld > bound:
            problems.append(f"KLD {kld:.6f} > baseline {bk[0]:.6f} + slack {kl.kld_slack}")
        cp, bp = cand["stats"].get("ppl_q"), base["stats"].get("ppl_q")
        if cp and bp and bp[0] > 0:
            dev = abs(cp[0] / bp[0] - 1) * 100
            bounds.append(f"|PPL ratio - 1| <= {kl.ppl_band_pct}%")
            if not math.isfinite(dev) or dev > kl.ppl_band_pct:
                problems.append(f"PPL {cp[0]:.4f} is {dev:.2f}% from baseline {bp[0]:.4f} (band {kl.ppl_band_pct}%)")
    if kl.max_kld is not None:
        bounds.append(f"KLD <= {kl.max_kld}")
        if kld > kl.max_kld:
            problems.append(f"KLD {kld:.6f} > max_kld {kl.max_kld}")
    if not bounds:
        return Check(name, "kl", "-", f"{kld:.6f}", ERROR, "no band: set gates.kl.baseline or gates.kl.max_kld", candidate, path, data=data)
    expected = " and ".join(bounds)
    got = f"KLD {kld:.6f} ± {ck[1]:.6f}"
    if problems:
        return Check(name, "kl", expected, got, FAIL, "; ".join(problems), candidate, path, data=data)
    return Check(name, "kl", expected, got, PASS, f"KL-validated against {reference}: KLD {kld:.6f}" + (f" <= {base['stats']['kld'][0]:.6f} ({baseline})" if base else ""), candidate, path, data=data)
