"""`parity canary --upstream REF`: the series applied with the strict apply to an upstream
commit (a weekly job points it at llama.cpp's newest master).  Green: every patch applies
(exit 0, the applied tree named); red: the first patch that does not, with its hunk (exit 1),
which starts a pin-sync (docs: PATCH_MAINTENANCE.md)."""

from __future__ import annotations

from dataclasses import dataclass

from parity.bisect import apply, common, upstream
from parity.context import run_session

EXIT_RED = 1  # the series does not apply at REF


@dataclass
class CanaryRequest:
    upstream: str  # a ref or commit of the repo
    repo: str | None = None  # a checkout or clone (path) or a url; default: the engine's source
    engine: str = "paged"
    series: str | None = None  # a series dir instead of the engine's


def canary(ctx, req: CanaryRequest) -> dict:
    common.llama_engine(ctx.profile, req.engine, "canary")
    series = common.series_dir(ctx.profile, req.engine, req.series)
    repo = upstream.repository(common.repo_of(ctx.profile, req.engine, req.repo), ctx.runner, ctx.out)
    commit = upstream.commit_of(repo, req.upstream, ctx.runner)
    with run_session(ctx, "canary", f"canary-{commit[:12]}"):
        ctx.out.info(f"[canary] applying {series} to {req.upstream} ({commit[:12]}) of {repo}")
        r = apply.apply_at(repo, commit, series, ctx.runner, ctx.out)
        doc = {"kind": "canary", "green": r["ok"], "upstream": req.upstream, "commit": commit, "subject": upstream.subject(repo, commit, ctx.runner), "repo": str(repo),
               "series_dir": series, **{k: v for k, v in r.items() if k not in ("ok", "commit")}, "run_dir": str(ctx.run.path)}  # fmt: skip
        doc["line"] = line(doc)
        ctx.run.write_json("canary.json", doc)
        ctx.run.write_text("canary.md", section(doc))
    return doc


def line(doc: dict) -> str:
    at = f"{doc['upstream']} ({doc['commit'][:12]})"
    if doc["green"]:
        return f"canary green: {doc['applied']}/{doc['patches']} patches apply at {at}; applied tree {doc['tree_after']}"
    return f"canary red at {at}: {apply.failure_line(doc['failure'])} ({doc['applied']} of {doc['patches']} applied before it)"


def section(doc: dict) -> str:
    out = ["## Canary: the series on upstream", "", f"- upstream: `{doc['upstream']}` = `{doc['commit']}` ({doc['subject']})", f"- repository: `{doc['repo']}`",
           f"- series: `{doc['series_dir']}` ({doc['patches']} patches)", f"- verdict: **{'green' if doc['green'] else 'red'}**", "", doc["line"], ""]  # fmt: skip
    if not doc["green"]:
        out += ["A pin-sync starts here: fix the patch named above on the new base and re-export the series (PATCH_MAINTENANCE.md).", ""]
    return "\n".join(out)
