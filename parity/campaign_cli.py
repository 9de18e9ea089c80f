"""Glue between `parity campaign run` and parity.campaign (kept out of cli.py)."""

from __future__ import annotations

from parity.errors import UsageError


def _parse_vars(pairs: list[str]) -> dict[str, str]:
    out = {}
    for p in pairs:
        if "=" not in p:
            raise UsageError(f"--var {p!r}: expected NAME=VALUE")
        k, v = p.split("=", 1)
        out[k.strip()] = v
    return out


def run_command(file, only, resume, dry_run, var_pairs, profile, json_mode) -> int:
    from parity.artifacts import RunDir
    from parity.campaign import load_campaign, plan, run_campaign, step_function
    from parity.commands.common import make_context
    from parity.context import run_session

    c = load_campaign(file, _parse_vars(var_pairs))
    steps = plan(c, only)
    for s in steps:
        step_function(s.kind, c.source)  # fail early on unavailable kinds
    ctx = make_context(profile or c.profile, json_mode)
    if dry_run:
        data = {
            "campaign": c.name,
            "profile": ctx.profile.name,
            "vars": c.vars,
            "steps": [{"name": s.name, "kind": s.kind, "with": s.options, "on_failure": s.on_failure, "always_run": s.always_run} for s in steps],
        }

        def human():
            ctx.out.info(f"campaign {c.name} (profile {ctx.profile.name}): {len(steps)} steps")
            for i, s in enumerate(steps, 1):
                flags = " [always-run]" if s.always_run else ""
                ctx.out.info(f"  {i}. {s.name} ({s.kind}){flags} {s.options or ''}")

        ctx.out.emit(data, human)
        return 0
    if resume:
        rd = RunDir.open(resume)
        ctx.run = rd
        ctx.run_id = rd.run_id
        rd.update(status="running", resumed=True)
        from parity.context import run_session_existing

        with run_session_existing(ctx, rd):
            summary = run_campaign(ctx, c, steps, resume=True)
    else:
        with run_session(ctx, "campaign", c.name):
            summary = run_campaign(ctx, c, steps)
    ctx.out.emit(summary, lambda: ctx.out.info(f"campaign {c.name}: complete -> {summary['run_dir']}"))
    return 0
