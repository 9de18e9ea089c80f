"""Logic behind `parity gate`."""

from __future__ import annotations

from parity.errors import EXIT_GATE, UsageError


def run(model, path, ops, backend, kl, engine, expect, form, record, profile, json_mode) -> int:
    from parity.commands.common import make_context, parse_str_list
    from parity.config import MD5_RE, CanonicalMd5
    from parity.context import run_session
    from parity.gates import registry
    from parity.gates.prepost import GateSpec, run_gate_set, write_summary

    if expect and not MD5_RE.match(expect):
        raise UsageError(f"--expect {expect!r}: not an md5 (32 lowercase hex digits)")
    if form and form not in ("chat", "no-cnv"):
        raise UsageError(f"--form {form!r}: expected chat or no-cnv")
    ctx = make_context(profile, json_mode)
    op_list = parse_str_list(ops)
    if op_list == ["none"]:
        op_list = []
    spec = GateSpec.from_profile(
        ctx.profile,
        models=[model] if model else None,
        paths=[path] if path else None,
        ops=op_list,
        kl=kl or None,
        engine=engine,
        expect=expect,
        form=form,
        backend=backend,
    )
    if spec.engine:
        ctx.profile.engine(spec.engine)
    with run_session(ctx, "gate", f"gate-{model or 'default'}"):
        result = run_gate_set(ctx, spec, "gate")
        write_summary(ctx, {"gate": result})
        recorded = None
        if record:
            md5s = [c for c in result["checks"] if c["kind"] == "md5" and c["got"] not in ("-", None)]
            kl_green = any(c["kind"] == "kl" and c["status"] == "pass" for c in result["checks"])
            if not md5s:
                raise UsageError("--record: no md5 was produced to record")
            c = md5s[0]
            klc = next((x for x in result["checks"] if x["kind"] == "kl"), None)
            entry = CanonicalMd5(c["got"], c["path"] or "default", form or ctx.profile.gates.form, ctx.profile.gates.n_predict, f"{klc['detail'] if klc else 'no KL'} (parity gate --record, run {ctx.run.run_id})")
            recorded = str(registry.record(c["model"], entry, kl_green))
        doc = {"run_dir": str(ctx.run.path), "status": result["status"], "checks": result["checks"], "recorded": recorded}
        ctx.out.emit(doc, lambda: ctx.out.info(f"gates {result['status'].upper()} -> {ctx.run.path}" + (f"; recorded in {recorded}" if recorded else "")))
        if result["status"] == "fail":
            ctx.run.mark_invalid("gate failed")
            return EXIT_GATE
    return 0
