"""The KL gate: reference logits from the reference model (cached by model sha + text sha + ctx +
chunks under <cache>/kl/), then `llama-perplexity --kl-divergence` for the candidate (on the
gated path) and the baseline (on gates.kl.baseline_path).  The text: gates.kl.text, else
parity's generated text (parity/gates/kltext.py), long enough for chunks x ctx by a rule checked
before anything is built; a run that evaluated fewer chunks than asked is an error.

Pass when KLD(candidate) <= KLD(baseline) + kld_slack and the PPL ratio is in the band, and/or
KLD <= max_kld; and same top p >= min_same_top_p (the users' 99.5 %) and, with same_top_p_slack,
>= the baseline's less the slack.  A missing or non-finite number is a failure, never a pass.
`--kl-sweep` runs the gate at each context of the users' drift sweep, one check per context;
gates.kl.on_md5_change runs it for a changed md5 (parity.gates.md5).  Two arms (a lossy lever):
KLD(B || reference) must stay in A's band."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

from parity.paths import cache_dir
from parity.context import Run
from parity.engines.bound import Engine
from parity.errors import ParityError, UsageError
from parity.gates import kltext, perplexity
from parity.gates.base import BOOL, LIST, GateInputs, GateKind, Target, set_paths
from parity.gates.checks import ERROR, FAIL, NOT_RUN, PASS, Check
from parity.gates.common import dry_model, dry_tool, gate_engine, resolve_model, save, sha256_file


def text_file(kl, n_ctx: int) -> str:
    """gates.kl.text, else the generated text for chunks x n_ctx (written into the cache)."""
    if kl.text:
        return str(Path(kl.text).expanduser())
    return str(kltext.generated(cache_dir() / "kl", kl.chunks, n_ctx, kl.text_seed))


def sweep_contexts(values, where: str = "the KL sweep") -> list[int]:
    """The drift sweep's contexts from ["256", "1024"] or [256, 1024] (UsageError naming a bad one)."""
    out = []
    for v in values or []:
        try:
            n = int(str(v).strip())
        except ValueError:
            n = 0
        if n < 2:
            raise UsageError(f"{where}: {v!r} is not a context size (a whole number of tokens, 2 or more)")
        if n not in out:
            out.append(n)
    return out


def settles_md5(kl, model: str | None, path: str | None) -> bool:
    """Whether a changed md5 of model on path runs this gate (gates.kl.on_md5_change: the candidate's paths)."""
    on = kl.on_md5_change
    return bool(kl.reference and model and model == kl.candidate and (path in on or "all" in on))


def sweep_rows(checks: list[dict], contexts: list[int]) -> list[dict]:
    """The drift sweep as rows, one per context and path: mean KLD, p99 KLD, same top p, the verdict."""
    rows = []
    for c in checks:
        d = c.get("data") or {}
        if c.get("kind") != "kl" or d.get("ctx") not in contexts:
            continue
        s = (d.get("candidate") or {}).get("stats") or {}
        row = {"ctx": d["ctx"], "model": c.get("model"), "path": c.get("path")}
        row.update({k: (s[k][0] if k in s else None) for k in ("kld", "kld_p99", "same_top_p", "ppl_ratio")})
        row.update(kld_err=s["kld"][1] if "kld" in s else None, status=c["status"], detail=c.get("detail", ""))
        rows.append(row)
    return sorted(rows, key=lambda r: (str(r["path"]), r["ctx"]))


def _device_args(eng: Engine) -> list[str]:
    return ["-ngl", "99"] if eng.section.cuda_archs else ["-t", "1"]


def reference_logits(kl, run: Run, eng: Engine, ref_file: str, text: str, n_ctx: int) -> Path:
    """The cached --kl-divergence-base file for (reference model, text, ctx, chunks); kl: gates.kl."""
    key = hashlib.sha256(f"{sha256_file(ref_file)}:{sha256_file(text)}:{n_ctx}:{kl.chunks}".encode()).hexdigest()[:24]
    logits = cache_dir() / "kl" / f"{key}.kld"
    if logits.is_file() and logits.stat().st_size > 0:
        return logits
    logits.parent.mkdir(parents=True, exist_ok=True)
    tmp = logits.with_suffix(".partial")
    binary = eng.tool_path("llama-perplexity", run.runner, run.out)
    argv = perplexity.base_argv(binary, ref_file, text, n_ctx, kl.chunks, str(tmp), _device_args(eng))
    res = run.runner.run(argv, env=eng.section.env, timeout=kl.timeout_s)
    save(run, f"gates/kl-base-{key}.txt", res.stdout + res.stderr)
    if not res.ok or not tmp.is_file() or tmp.stat().st_size == 0:
        why = "timed out" if res.timed_out else f"exit {res.rc}"
        raise _KLRunError(f"saving reference logits failed ({why}): {res.tail(2)}")
    tmp.replace(logits)
    return logits


def _runs(run: dict) -> str:
    return f", {1 + len(run['retried'])} runs" if run.get("retried") else ""


class _KLRunError(ParityError):
    pass


def kl_run(kl, run: Run, eng: Engine, model_file: str, logits: str, path: str | None, n_ctx: int) -> dict:
    """One --kl-divergence run of model_file on eng's path against the logits; kl: gates.kl."""
    binary = eng.tool_path("llama-perplexity", run.runner, run.out)
    argv = perplexity.kl_argv(binary, model_file, logits, n_ctx, kl.chunks, _device_args(eng))
    env = eng.path_env(path)
    retried = []
    tries = 1 + max(0, kl.retries)
    for attempt in range(1, tries + 1):
        res = run.runner.run(argv, env=env, timeout=kl.timeout_s)
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
        "chunks": perplexity.chunks(res.stdout + "\n" + res.stderr),
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
    _same_top_p(cand, base, kl, baseline, bounds, problems)
    return bounds, problems


def _same_top_p(cand: dict, base: dict | None, kl, baseline: str | None, bounds: list, problems: list) -> None:
    """same top p >= min_same_top_p, and >= the baseline's - same_top_p_slack (a missing or NaN value fails)."""
    floors = []
    if kl.min_same_top_p is not None:
        floors.append((kl.min_same_top_p, f"min_same_top_p {kl.min_same_top_p:g}%"))
    if base is not None and kl.same_top_p_slack is not None:
        bp = base.get("same_top_p", [math.nan])[0]
        if not math.isfinite(bp):
            problems.append(f"baseline {baseline}: no finite same top p in llama-perplexity's output")
        floors.append((bp - kl.same_top_p_slack, f"baseline {baseline} {bp:.3f}% - slack {kl.same_top_p_slack:g}"))
    got = cand.get("same_top_p", [math.nan])[0]
    if floors and not math.isfinite(got):
        problems.append("no finite same top p in llama-perplexity's output")
    for floor, what in floors:
        bounds.append(f"same top p >= {floor:.3f}% ({what})")
        if math.isfinite(got) and math.isfinite(floor) and not got >= floor:
            problems.append(f"same top p {got:.3f}% < {floor:.3f}% ({what})")


def _finite_kld(run: dict | None) -> bool:
    return bool(run and run["ok"] and "kld" in run["stats"] and math.isfinite(run["stats"]["kld"][0]))


def kl_gate(inputs: GateInputs, run: Run, candidate: str | None = None, baseline: str | None = None,
            reference: str | None = None, engine: str | None = None, path: str | None = None, tag: str = "",
            n_ctx: int | None = None, sweep: bool = False) -> Check:  # fmt: skip
    """The KL check at n_ctx (None: gates.kl.ctx); sweep: a row of the drift sweep, named by its context."""
    kl = inputs.gates.kl
    reference, baseline, candidate = reference or kl.reference, baseline or kl.baseline, candidate or kl.candidate
    n_ctx = n_ctx or kl.ctx
    at = f" ctx {n_ctx}" if sweep else ""
    name = f"kl {candidate} vs {reference}{at}"
    if not reference or not candidate:
        return Check(name, "kl", "-", "-", NOT_RUN, "gates.kl needs reference and candidate models")
    if not baseline and kl.max_kld is None:
        return Check(name, "kl", "-", "-", ERROR, "no band: set gates.kl.baseline or gates.kl.max_kld", candidate, path)
    try:
        eng = gate_engine(inputs, engine)
        engine = eng.name
        path = path or eng.section.default_path
        name = f"kl {candidate}/{path} vs {reference}{at}"
        _, ref_file = resolve_model(inputs, reference)
        _, cand_file = resolve_model(inputs, candidate)
        base_file = resolve_model(inputs, baseline)[1] if baseline else None
        kltext.check_long_enough(kl.text, kl.chunks, [n_ctx])  # checked before the build too (check_plan)
        text = text_file(kl, n_ctx)
        logits = reference_logits(kl, run, eng, ref_file, text, n_ctx)
        cand = kl_run(kl, run, eng, cand_file, str(logits), path, n_ctx)
        base = kl_run(kl, run, eng, base_file, str(logits), kl.baseline_path or path, n_ctx) if base_file else None
    except ParityError as e:
        return Check(name, "kl", "-", "-", ERROR, str(e), candidate, path, data={"ctx": n_ctx, "sweep": sweep})
    suffix = f"-ctx{n_ctx}" if sweep else ""
    cand_out = save(run, f"gates/{tag}kl-{candidate}-{path}{suffix}.txt", cand.pop("text"))
    base_out = None
    if base:
        base_out = save(run, f"gates/{tag}kl-baseline-{baseline}-{base['path']}{suffix}.txt", base.pop("text"))
    data = {"candidate": {**cand, "output": cand_out}, "baseline": base and {**base, "output": base_out},
            "logits": str(logits), "text": text, "text_words": kltext.count_words(text), "text_sha256": sha256_file(text),
            "ctx": n_ctx, "chunks": kl.chunks, "sweep": sweep, "engine": engine, "reference": reference}  # fmt: skip
    short = [r for r in (cand, base) if r and r["ok"] and r["chunks"] != kl.chunks]
    if short:  # llama-perplexity evaluates fewer chunks, silently, when the text tokenizes short
        got = short[0]["chunks"]
        why = "no chunk count in its output" if got is None else f"llama-perplexity evaluated {got} of {kl.chunks} chunks"
        why += f" at ctx {n_ctx} (does the text {text} tokenize to fewer than chunks x ctx tokens?)"
        return Check(name, "kl", f"{kl.chunks} chunks of {n_ctx} tokens", "-" if got is None else str(got), ERROR, why,
                     candidate, path, data=data)  # fmt: skip
    if not _finite_kld(cand):
        got = f"KLD {cand['stats']['kld'][0]}" if "kld" in cand["stats"] else "-"
        why = "KLD is not a finite number" if "kld" in cand["stats"] else f"llama-perplexity --kl-divergence gave no KLD ({'timed out' if cand['timed_out'] else 'exit ' + str(cand['rc'])}{_runs(cand)}): {cand['tail']}"
        return Check(name, "kl", "finite KLD", got, ERROR, why, candidate, path, data=data)
    if base and not _finite_kld(base):
        return Check(name, "kl", "finite baseline KLD", "-", ERROR, f"baseline {baseline} KL run failed or gave no finite KLD (exit {base['rc']}): {base['tail']}", candidate, path, data=data)
    bounds, problems = band(cand["stats"], base["stats"] if base else None, kl, baseline)
    s = cand["stats"]
    got = f"KLD {s['kld'][0]:.6f} ± {s['kld'][1]:.6f}"
    if "kld_p99" in s:
        got += f", p99 KLD {s['kld_p99'][0]:.6f}"
    if "ppl_ratio" in s:
        got += f", PPL ratio {s['ppl_ratio'][0]:.4f}"
    if "same_top_p" in s:
        got += f", same top p {s['same_top_p'][0]:.3f}%"
    if problems:
        return Check(name, "kl", " and ".join(bounds), got, FAIL, "; ".join(problems), candidate, path, data=data)
    why = f"KL-validated against {reference}: KLD {s['kld'][0]:.6f}"
    if base:
        why += f" <= {base['stats']['kld'][0]:.6f} ({baseline}/{base['path']})"
    if "same_top_p" in s:
        why += f", same top p {s['same_top_p'][0]:.3f}%"
    why += f", {kl.chunks} chunks x {n_ctx}"
    return Check(name, "kl", " and ".join(bounds), got, PASS, why, candidate, path, data=data)


class KLGate(GateKind):
    name = "kl"
    what = "KL band"
    reads = ("models", "paths", "engines")  # its models are gates.kl's reference, candidate and baseline
    switch = "kl"
    options = {"kl": BOOL, "kl_sweep": LIST}
    arms = {"KL": "gate"}  # a lossy lever is gated by it

    def defaults(self, g) -> dict:
        return {"kl": g.kl_in_prepost}

    def wanted(self, spec) -> bool:
        return bool(spec.kl or spec.kl_sweep)

    def models(self, gates, spec) -> list[str]:
        kl = gates.kl
        return [kl.reference, kl.candidate, kl.baseline] if self.wanted(spec) else []

    def check_plan(self, gates, spec) -> None:
        """The text holds enough words for the chunks at gates.kl.ctx and at every sweep context."""
        kl = gates.kl
        contexts = ([kl.ctx] if spec.kl else []) + sweep_contexts(spec.kl_sweep)
        if contexts and kl.reference and kl.candidate:
            kltext.check_long_enough(kl.text, kl.chunks, contexts)

    def expand(self, inputs, spec, engine) -> list[Target]:
        """Per path: the gate at gates.kl.ctx (--kl), then one row per sweep context (--kl-sweep)."""
        n = inputs.gates.kl.ctx
        sweep = [c for c in sweep_contexts(spec.kl_sweep) if not (spec.kl and c == n)]  # --kl's row is that context's
        plan = []
        for p in set_paths(inputs, spec, engine) if self.wanted(spec) else []:
            plan += ([Target(engine, path=p)] if spec.kl else []) + [Target(engine, path=p, n_ctx=c) for c in sweep]
        return plan

    def label(self, t: Target) -> str:
        return f"kl {t.path}" + (f" ctx {t.n_ctx}" if t.n_ctx else "")

    def run(self, inputs, run, spec, t: Target, tag: str) -> Check:
        return kl_gate(inputs, run, engine=t.engine, path=t.path, tag=tag, n_ctx=t.n_ctx, sweep=t.n_ctx is not None)

    def dry(self, inputs, runner, out, spec, t: Target) -> dict:
        """The reference logits (cached per model and text), then the candidate and baseline runs."""
        kl = inputs.gates.kl
        if not kl.reference or not kl.candidate:
            return {"commands": [], "expected": "not run: gates.kl needs reference and candidate models", "files": {}}
        eng = gate_engine(inputs, t.engine)
        path = t.path or eng.section.default_path
        binary = dry_tool(eng, "llama-perplexity", runner, out)
        files = {f"llama-perplexity of {eng.name}": binary}
        (_, ref, f1), (_, cand, f2) = dry_model(inputs, kl.reference), dry_model(inputs, kl.candidate)
        files.update({**f1, **f2})
        n_ctx = t.n_ctx or kl.ctx
        planned = kltext.planned(cache_dir() / "kl", kl.chunks, n_ctx, kl.text_seed)
        text = str(Path(kl.text).expanduser()) if kl.text else str(planned)
        if kl.text:  # the generated text is made on the first real run, like a synthesized model
            files["gates.kl.text"] = text
        dev, logits = _device_args(eng), "<cache>/kl/<sha of model, text, ctx, chunks>.kld"

        def kl_command(model_file: str, p: str | None) -> dict:
            argv = perplexity.kl_argv(binary, model_file, logits, n_ctx, kl.chunks, dev)
            return {"argv": argv, "env": eng.path_env(p)}

        base_argv = perplexity.base_argv(binary, ref, text, n_ctx, kl.chunks, logits, dev)
        commands = [{"argv": base_argv, "env": dict(eng.section.env)}, kl_command(cand, path)]
        bounds = [f"KLD <= {kl.max_kld:g}"] if kl.max_kld is not None else []
        if kl.baseline:
            _, base, f3 = dry_model(inputs, kl.baseline)
            files.update(f3)
            base_path = kl.baseline_path or path
            commands.append(kl_command(base, base_path))
            bounds[:0] = [f"KLD <= KLD({kl.baseline}/{base_path}) + {kl.kld_slack:g}",
                          f"PPL within {kl.ppl_band_pct:g} % of it"]
        if kl.min_same_top_p is not None:
            bounds.append(f"same top p >= {kl.min_same_top_p:g} %")
        if kl.baseline and kl.same_top_p_slack is not None:
            bounds.append(f"same top p >= {kl.baseline}/{kl.baseline_path or path}'s - {kl.same_top_p_slack:g}")
        expected = " and ".join(bounds) or "no band: set gates.kl.baseline or gates.kl.max_kld"
        return {"commands": commands, "expected": expected, "files": files}

    def check_arms(self, profile) -> None:
        kl = profile.gates.kl
        if not kl.reference:
            raise UsageError(f"--lossy takes the KL band, but profile {profile.name} has no KL reference (gates.kl.reference: the f16/f32 model whose logits are the base)")
        if not (kl.candidate or profile.serving.model):
            raise UsageError(f"--lossy: profile {profile.name} names no model to hold in the KL band (gates.kl.candidate)")
        kltext.check_long_enough(kl.text, kl.chunks, [kl.ctx])

    def arm_models(self, profile, models: list[str]) -> list[str]:
        kl = profile.gates.kl
        return [kl.reference, kl.candidate or profile.serving.model]

    def compare_arms(self, inputs, run, a, b, models, paths, tag) -> dict:
        """KLD of the candidate model on each arm against the reference logits; B must stay in A's band."""
        kl = inputs.gates.kl
        arm_a, arm_b = a.name, b.name
        model = kl.candidate or inputs.serving_model
        _, ref_file = resolve_model(inputs, kl.reference)
        _, cand_file = resolve_model(inputs, model)
        text = text_file(kl, kl.ctx)
        logits = reference_logits(kl, run, a, ref_file, text, kl.ctx)
        path = a.section.default_path
        runs = {eng.name: kl_run(kl, run, eng, cand_file, str(logits), path, kl.ctx) for eng in (a, b)}
        for arm, r in runs.items():
            if run.dir is not None:
                run.dir.write_text(f"gates/{tag}kl-{model}-{arm}.txt", r.pop("text", ""))
            else:
                r.pop("text", None)
        a, b = runs[arm_a], runs[arm_b]  # the arms' runs from here on
        short = [arm for arm, r in runs.items() if r["ok"] and r["chunks"] != kl.chunks]
        if not (a["ok"] and b["ok"] and "kld" in a["stats"] and "kld" in b["stats"]):
            bad = [arm for arm, r in runs.items() if not (r["ok"] and "kld" in r["stats"])]
            doc = {"status": "error", "detail": f"llama-perplexity gave no KLD on {', '.join(bad)}: {runs[bad[0]]['tail']}"}
        elif short:  # fewer chunks than asked: the text tokenized short
            got = runs[short[0]]["chunks"]
            doc = {"status": "error", "detail": f"llama-perplexity evaluated {got} of {kl.chunks} chunks on {short[0]}"}
        else:
            bounds, problems = band(b["stats"], a["stats"], kl, arm_a)
            doc = {"status": "fail" if problems else "pass", "detail": "; ".join(problems or bounds), "kld": {arm: r["stats"]["kld"][0] for arm, r in runs.items()}}
        doc.update({"phase": tag.rstrip("-") or "pre", "model": model, "reference": kl.reference, "path": path, "arms": runs})
        run.out.info(f"[gate] {tag}kl {model}/{path}: {doc['status']} ({doc['detail']})")
        return doc

    def arms_summary(self, rows: list[dict]) -> str:
        return f"KL band {sum(map(self.arm_ok, rows))}/{len(rows)} pass"

    def arm_problem(self, row: dict, role: str) -> str:
        return f"KL {row['phase']}: {row['detail']}"

    def users_name(self, c: dict, gate_engine, default_paths) -> str:
        d = c.get("data") or {}
        return f"kl_{c.get('model') or 'model'}_{c.get('path')}" + (f"_ctx{d['ctx']}" if d.get("sweep") else "")

    def users_output(self, c: dict) -> str | None:
        return ((c.get("data") or {}).get("candidate") or {}).get("output")


KIND = KLGate()
