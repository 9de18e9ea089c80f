"""The KL gate: reference logits from the reference model (cached by model sha +
text sha under <cache>/kl/), then `llama-perplexity --kl-divergence` for the
candidate (on the gated path) and the baseline (on gates.kl.baseline_path).

Pass when KLD(candidate) <= KLD(baseline) + kld_slack and the PPL ratio is in
the band, and/or KLD <= max_kld.  A NaN KLD is a failure, never a pass."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

from parity.paths import cache_dir
from parity.errors import ParityError, UsageError
from parity.gates import perplexity
from parity.gates.checks import ERROR, FAIL, NOT_RUN, PASS, Check
from parity.gates.common import gate_engine, path_env, resolve_model, save, sha256_file, tool

DEFAULT_TEXT = Path(__file__).resolve().parent.parent / "defaults" / "kl-text.txt"


def _device_args(ctx, engine: str) -> list[str]:
    return ["-ngl", "99"] if ctx.profile.engine(engine).cuda_archs else ["-t", "1"]


def reference_logits(ctx, engine: str, ref_file: str, text: str) -> Path:
    """The cached --kl-divergence-base file for (reference model, text, ctx, chunks)."""
    kl = ctx.profile.gates.kl
    key = hashlib.sha256(f"{sha256_file(ref_file)}:{sha256_file(text)}:{kl.ctx}:{kl.chunks}".encode()).hexdigest()[:24]
    logits = cache_dir() / "kl" / f"{key}.kld"
    if logits.is_file() and logits.stat().st_size > 0:
        return logits
    logits.parent.mkdir(parents=True, exist_ok=True)
    tmp = logits.with_suffix(".partial")
    argv = perplexity.base_argv(tool(ctx, engine, "llama-perplexity"), ref_file, text, kl.ctx, kl.chunks, str(tmp), _device_args(ctx, engine))
    res = ctx.runner.run(argv, env=ctx.profile.engine(engine).env, timeout=kl.timeout_s)
    save(ctx, f"gates/kl-base-{key}.txt", res.stdout + res.stderr)
    if not res.ok or not tmp.is_file() or tmp.stat().st_size == 0:
        why = "timed out" if res.timed_out else f"exit {res.rc}"
        raise _KLRunError(f"saving reference logits failed ({why}): {res.tail(2)}")
    tmp.replace(logits)
    return logits


def _runs(run: dict) -> str:
    return f", {1 + len(run['retried'])} runs" if run.get("retried") else ""


class _KLRunError(ParityError):
    pass


def kl_run(ctx, engine: str, model_file: str, logits: str, path: str | None) -> dict:
    kl = ctx.profile.gates.kl
    argv = perplexity.kl_argv(tool(ctx, engine, "llama-perplexity"), model_file, logits, kl.ctx, kl.chunks, _device_args(ctx, engine))
    env = path_env(ctx, engine, path)
    retried = []
    tries = 1 + max(0, kl.retries)
    for attempt in range(1, tries + 1):
        res = ctx.runner.run(argv, env=env, timeout=kl.timeout_s)
        stats = perplexity.parse(res.stdout + "\n" + res.stderr)
        if not (res.ok and "kld" not in stats) or attempt == tries:
            break
        retried.append(f"attempt {attempt}: exit 0 but no KLD statistics (log tail lost)")
    return {
        "ok": res.ok,
        "rc": res.rc,
        "timed_out": res.timed_out,
        "path": path,
        "env": env,
        "argv": argv,
        "stats": {k: [v.value, v.err] for k, v in stats.items()},
        "tail": res.tail(3),
        "text": res.stdout + res.stderr,
        "retried": retried,
    }


def band(cand: dict, base: dict | None, kl, baseline: str | None) -> tuple[list[str], list[str]]:
    """(bounds, problems) for candidate/baseline stats {key: [value, err]}."""
    kld = cand["kld"][0]
    bounds, problems = [], []
    if base is not None:
        bk = base["kld"][0]
        bounds.append(f"KLD <= {bk + kl.kld_slack:.6f} ({baseline} {bk:.6f} + slack {kl.kld_slack:g})")
        if not kld <= bk + kl.kld_slack:
            problems.append(f"KLD {kld:.6f} > baseline {baseline} {bk:.6f} + slack {kl.kld_slack:g}")
        cp, bp = cand.get("ppl_q"), base.get("ppl_q")
        if cp and bp:
            dev = abs(cp[0] / bp[0] - 1) * 100 if bp[0] > 0 else math.inf
            bounds.append(f"|PPL/PPL({baseline}) - 1| <= {kl.ppl_band_pct:g}%")
            if not dev <= kl.ppl_band_pct:
                problems.append(f"PPL {cp[0]:.4f} is {dev:.2f}% from baseline {bp[0]:.4f} (band {kl.ppl_band_pct:g}%)")
    if kl.max_kld is not None:
        bounds.append(f"KLD <= {kl.max_kld:g}")
        if not kld <= kl.max_kld:
            problems.append(f"KLD {kld:.6f} > max_kld {kl.max_kld:g}")
    return bounds, problems


def _finite_kld(run: dict | None) -> bool:
    return bool(run and run["ok"] and "kld" in run["stats"] and math.isfinite(run["stats"]["kld"][0]))


def kl_gate(ctx, candidate: str | None = None, baseline: str | None = None, reference: str | None = None, engine: str | None = None, path: str | None = None, tag: str = "") -> Check:
    kl = ctx.profile.gates.kl
    reference, baseline, candidate = reference or kl.reference, baseline or kl.baseline, candidate or kl.candidate
    name = f"kl {candidate} vs {reference}"
    if not reference or not candidate:
        return Check(name, "kl", "-", "-", NOT_RUN, "gates.kl needs reference and candidate models")
    if not baseline and kl.max_kld is None:
        return Check(name, "kl", "-", "-", ERROR, "no band: set gates.kl.baseline or gates.kl.max_kld", candidate, path)
    try:
        engine = gate_engine(ctx, engine)
        path = path or ctx.profile.engine(engine).default_path
        name = f"kl {candidate}/{path} vs {reference}"
        _, ref_file = resolve_model(ctx, reference)
        _, cand_file = resolve_model(ctx, candidate)
        base_file = resolve_model(ctx, baseline)[1] if baseline else None
        text = str(Path(kl.text).expanduser()) if kl.text else str(DEFAULT_TEXT)
        if not Path(text).is_file():
            raise UsageError(f"gates.kl.text: file not found: {text}")
        logits = reference_logits(ctx, engine, ref_file, text)
        cand = kl_run(ctx, engine, cand_file, str(logits), path)
        base = kl_run(ctx, engine, base_file, str(logits), kl.baseline_path or path) if base_file else None
    except ParityError as e:
        return Check(name, "kl", "-", "-", ERROR, str(e), candidate, path)
    cand_out = save(ctx, f"gates/{tag}kl-{candidate}-{path}.txt", cand.pop("text"))
    base_out = save(ctx, f"gates/{tag}kl-baseline-{baseline}-{base['path']}.txt", base.pop("text")) if base else None
    data = {"candidate": {**cand, "output": cand_out}, "baseline": base and {**base, "output": base_out}, "logits": str(logits), "text": text, "engine": engine, "reference": reference}
    if not _finite_kld(cand):
        got = f"KLD {cand['stats']['kld'][0]}" if "kld" in cand["stats"] else "-"
        why = "KLD is not a finite number" if "kld" in cand["stats"] else f"llama-perplexity --kl-divergence gave no KLD ({'timed out' if cand['timed_out'] else 'exit ' + str(cand['rc'])}{_runs(cand)}): {cand['tail']}"
        return Check(name, "kl", "finite KLD", got, ERROR, why, candidate, path, data=data)
    if base and not _finite_kld(base):
        return Check(name, "kl", "finite baseline KLD", "-", ERROR, f"baseline {baseline} KL run failed or gave no finite KLD (exit {base['rc']}): {base['tail']}", candidate, path, data=data)
    bounds, problems = band(cand["stats"], base["stats"] if base else None, kl, baseline)
    s = cand["stats"]
    got = f"KLD {s['kld'][0]:.6f} ± {s['kld'][1]:.6f}"
    if "ppl_ratio" in s:
        got += f", PPL ratio {s['ppl_ratio'][0]:.4f}"
    if "same_top_p" in s:
        got += f", same top p {s['same_top_p'][0]:.2f}%"
    if problems:
        return Check(name, "kl", " and ".join(bounds), got, FAIL, "; ".join(problems), candidate, path, data=data)
    why = f"KL-validated against {reference}: KLD {s['kld'][0]:.6f}"
    if base:
        why += f" <= {base['stats']['kld'][0]:.6f} ({baseline}/{base['path']})"
    return Check(name, "kl", " and ".join(bounds), got, PASS, why, candidate, path, data=data)
