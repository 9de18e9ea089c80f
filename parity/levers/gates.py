"""Both arms of a lever gated the users' way.

A lever declared bit-exact (the default): per model x path, each arm's greedy md5
(llama-completion, the gates' prompt and args) must be the same in both arms, and neither
may be a failed or empty run.  A lossy lever (--lossy): the KL band instead,
KLD(B || reference) <= KLD(A || reference) + slack on gates.kl.candidate (the md5s are
still recorded, as evidence, not as the gate)."""

from __future__ import annotations

from parity.errors import UsageError
from parity.gates.common import resolve_model, save
from parity.gates.completion import first_divergence
from parity.gates.kl import DEFAULT_TEXT, band, kl_run, reference_logits
from parity.gates.md5 import greedy, run_problem


def check_lossy(profile) -> None:
    kl = profile.gates.kl
    if not kl.reference:
        raise UsageError(f"--lossy takes the KL band, but profile {profile.name} has no KL reference (gates.kl.reference: the f16/f32 model whose logits are the base)")
    if not (kl.candidate or profile.serving.model):
        raise UsageError(f"--lossy: profile {profile.name} names no model to hold in the KL band (gates.kl.candidate)")


def md5_pairs(ctx, arm_a: str, arm_b: str, models: list[str], paths: list[str | None], tag: str) -> list[dict]:
    """Per model x path: both arms' greedy md5, and whether they are equal."""

    g = ctx.profile.gates
    out = []
    for model in models:
        label, model_file = resolve_model(ctx, model)
        for path in paths:
            runs = {}
            for arm in (arm_a, arm_b):
                r = greedy(ctx, arm, model_file, path, g.form, g.n_predict)
                save(ctx, f"gates/{tag}md5-{label}-{path}-{arm}.out", r.stdout)
                runs[arm] = {"md5": r.md5 if r.stdout else None, "problem": run_problem(r, g.timeout_s), "seconds": round(r.seconds, 2), "env": r.env}
            a, b = runs[arm_a], runs[arm_b]
            if a["problem"] or b["problem"]:
                status, detail = "error", "; ".join(f"{arm}: {runs[arm]['problem']}" for arm in (arm_a, arm_b) if runs[arm]["problem"])
            elif a["md5"] == b["md5"]:
                status, detail = "equal", a["md5"]
            else:
                status = "differ"
                detail = f"{arm_a} {a['md5']} != {arm_b} {b['md5']}; " + first_divergence(_read(ctx, f"gates/{tag}md5-{label}-{path}-{arm_b}.out"), _read(ctx, f"gates/{tag}md5-{label}-{path}-{arm_a}.out"))
            out.append({"phase": tag.rstrip("-") or "pre", "model": label, "path": path, "status": status, "detail": detail, "arms": runs})
            ctx.out.info(f"[gate] {tag}md5 {label}/{path}: {status} ({detail})")
    return out


def _read(ctx, name: str) -> bytes:
    return ctx.run.file(name).read_bytes() if ctx.run else b""


def kl_pair(ctx, arm_a: str, arm_b: str, tag: str) -> dict:
    """KLD of the candidate model on each arm against the reference logits; B must stay in A's band."""
    from pathlib import Path

    kl = ctx.profile.gates.kl
    model = kl.candidate or ctx.profile.serving.model
    _, ref_file = resolve_model(ctx, kl.reference)
    _, cand_file = resolve_model(ctx, model)
    text = str(Path(kl.text).expanduser()) if kl.text else str(DEFAULT_TEXT)
    logits = reference_logits(ctx, arm_a, ref_file, text)
    path = ctx.profile.engine(arm_a).default_path
    runs = {arm: kl_run(ctx, arm, cand_file, str(logits), path) for arm in (arm_a, arm_b)}
    for arm, r in runs.items():
        if ctx.run:
            ctx.run.write_text(f"gates/{tag}kl-{model}-{arm}.txt", r.pop("text", ""))
        else:
            r.pop("text", None)
    a, b = runs[arm_a], runs[arm_b]
    if not (a["ok"] and b["ok"] and "kld" in a["stats"] and "kld" in b["stats"]):
        bad = [arm for arm, r in runs.items() if not (r["ok"] and "kld" in r["stats"])]
        doc = {"status": "error", "detail": f"llama-perplexity gave no KLD on {', '.join(bad)}: {runs[bad[0]]['tail']}"}
    else:
        bounds, problems = band(b["stats"], a["stats"], kl, arm_a)
        doc = {"status": "fail" if problems else "pass", "detail": "; ".join(problems or bounds), "kld": {arm: r["stats"]["kld"][0] for arm, r in runs.items()}}
    doc.update({"phase": tag.rstrip("-") or "pre", "model": model, "reference": kl.reference, "path": path, "arms": runs})
    ctx.out.info(f"[gate] {tag}kl {model}/{path}: {doc['status']} ({doc['detail']})")
    return doc


def run_gates(ctx, arm_a: str, arm_b: str, models: list[str], paths: list[str | None], lossy: bool, tag: str) -> dict:
    """{md5: [...], kl: {...} | None, ok: bool, summary: '...'}."""
    md5 = md5_pairs(ctx, arm_a, arm_b, models, paths, tag)
    kl = kl_pair(ctx, arm_a, arm_b, tag) if lossy else None
    return {"md5": md5, "kl": kl}


def verdict(phases: list[dict], lossy: bool) -> dict:
    """Over every gate phase: ok, the gate kind (BE / KL), a short summary and the first problem."""
    md5 = [p for ph in phases for p in ph["md5"]]
    equal = sum(p["status"] == "equal" for p in md5)
    kls = [ph["kl"] for ph in phases if ph.get("kl")]
    if lossy:
        bad = [k for k in kls if k["status"] != "pass"]
        errors = [p for p in md5 if p["status"] == "error"]
        ok = bool(kls) and not bad and not errors
        first = (f"KL {bad[0]['phase']}: {bad[0]['detail']}" if bad else f"md5 {errors[0]['phase']} {errors[0]['model']}/{errors[0]['path']}: {errors[0]['detail']}" if errors else None)
        summary = f"KL band {sum(k['status'] == 'pass' for k in kls)}/{len(kls)} pass; md5 {equal}/{len(md5)} equal (informative)"
        return {"ok": ok, "kind": "KL", "summary": summary, "problem": first}
    bad = [p for p in md5 if p["status"] != "equal"]
    first = f"md5 {bad[0]['phase']} {bad[0]['model']}/{bad[0]['path']} {bad[0]['status']}: {bad[0]['detail']}" if bad else None
    return {"ok": bool(md5) and not bad, "kind": "BE", "summary": f"md5 {equal}/{len(md5)} equal", "problem": first}
