"""Glue between `parity campaign run` and parity.campaign (kept out of cli.py)."""

from __future__ import annotations

import os

from parity.errors import ParityError, UsageError


def _parse_vars(pairs: list[str]) -> dict[str, str]:
    out = {}
    for p in pairs:
        k, sep, v = p.partition("=")
        if not sep or not k.strip().isidentifier():
            raise UsageError(f"--var {p!r}: expected NAME=VALUE")
        out[k.strip()] = v
    return out


def run_command(file, only, resume, dry_run, var_pairs, profile, json_mode, argv: list[str] | None = None) -> int:
    from parity.artifacts import RunDir
    from parity.campaign import check_resumable, load_campaign, plan, run_campaign, run_fanout, step_function, will_skip
    from parity.cli import command_argv, state
    from parity.commands.common import make_context
    from parity.context import run_session, run_session_existing
    from parity.remote import DELEGATED_ENV

    c = load_campaign(file, _parse_vars(var_pairs))
    steps = plan(c, only)
    fanout = bool(c.hosts) and not state.host and not os.environ.get(DELEGATED_ENV)
    if not fanout:
        for s in steps:
            step_function(s.kind, c.source)  # fail early on unavailable kinds
    if fanout and resume:
        raise UsageError(f"--resume with hosts: fan-out: resume one host's run with `parity --host NAME campaign run {file} --resume DIR`")
    ctx = make_context(profile or c.profile, json_mode)  # with --host this runs the command remotely and exits
    rd = RunDir.open(resume) if resume else None
    if rd is not None:
        check_resumable(c, rd)
    if dry_run:
        data = {
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
        }

        def human():
            where = f" on {', '.join(c.hosts)}{' (parallel)' if c.parallel_hosts else ''}" if fanout else ""
            ctx.out.info(f"campaign {c.name} (profile {ctx.profile.name}){where}: {len(steps)} steps")
            for i, s in enumerate(data["steps"], 1):
                flags = (" [always-run]" if s["always_run"] else "") + (" [continue]" if s["on_failure"] == "continue" else "")
                flags += " [skip: complete]" if s["skip"] else ""
                ctx.out.info(f"  {i}. {s['name']} ({s['kind']}){flags} {s['with'] or ''}")

        ctx.out.emit(data, human)
        return 0
    try:
        if fanout:
            with run_session(ctx, "campaign-hosts", f"{c.name}-hosts"):
                summary = run_fanout(ctx, c, argv if argv is not None else command_argv())
            ctx.out.emit(summary, lambda: ctx.out.info(f"campaign {c.name}: complete on {', '.join(c.hosts)} -> {summary['run_dir']}"))
            return 0
        if rd is not None:
            ctx.run, ctx.run_id = rd, rd.run_id
            rd.update(status="running", resumed=True, ended=None)
            with run_session_existing(ctx, rd):
                summary = run_campaign(ctx, c, steps, resume=True)
        else:
            with run_session(ctx, "campaign", c.name):
                summary = run_campaign(ctx, c, steps)
    except ParityError as e:
        if json_mode and getattr(e, "campaign_summary", None):
            ctx.out.emit(e.campaign_summary)  # CI reads the summary; the error line follows on stderr
        raise
    ctx.out.emit(summary, lambda: ctx.out.info(f"campaign {c.name}: complete -> {summary['run_dir']}"))
    return 0
