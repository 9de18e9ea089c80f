"""Logic behind `parity build` (kept out of the import path of --help)."""

from __future__ import annotations

import os

from parity.errors import UsageError


def detached_args(engines, defines, force, jobs, profile) -> list[str]:
    """The same build, as `parity` arguments for the background process."""
    args = ["build"]
    if profile:
        args += ["--profile", os.path.abspath(profile) if os.path.exists(profile) else profile]
    for n in engines or []:
        args += ["--engine", n]
    for d in defines:
        args += ["-D", d]
    if force:
        args.append("--force")
    if jobs:
        args += ["-j", str(jobs)]
    return args


def run(engines, defines, check_series, print_cmake, force, jobs, detach, status, profile, json_mode) -> int:
    from parity.commands.common import make_context
    from parity.engine import build as b

    ctx = make_context(profile, json_mode)
    out = ctx.out
    if status:
        from parity.engine import detach as bg

        rows = bg.detached_status()
        out.emit(rows, lambda: out.table("detached builds", ["id", "pid", "state", "progress", "last line", "log"], [[r.get("id", r["started"]), r["pid"], r["state"], r["progress"], r["last_line"], r["log"]] for r in rows]) if rows else out.info("no detached builds"))
        return 0
    names = engines or b.llama_engines(ctx.profile)
    if not names:
        raise UsageError(f"profile {ctx.profile.name} has no llama engine to build")
    for n in names:
        ctx.profile.engine(n)
    flags = []
    for d in defines:
        if "=" not in d:
            raise UsageError(f"-D {d}: expected VAR=VALUE")
        flags.append(f"-D{d}")
    if detach:
        from parity.engine import detach as bg

        doc = bg.start_detached(detached_args(engines, defines, force, jobs, profile), ctx.runner)
        out.emit(doc, lambda: out.info(f"build running in the background (pid {doc['pid']}); log: {doc['log']}; `parity build --status` to poll"))
        return 0
    if print_cmake:
        plans = []
        for n in names:
            p = b.plan(ctx.profile, n, flags, jobs)
            plans.append({"engine": n, "key": p.key, "dir": str(p.dir), "series_dir": p.series_dir, "patches": p.series, "configure": p.configure, "build": p.build, "cached": (p.dir / b.OK_MARKER).exists()})

        def human():
            import shlex

            for pl in plans:
                out.info(f"# {pl['engine']} (key {pl['key']}, {'cached' if pl['cached'] else 'not built'})")
                out.info(" ".join(shlex.quote(a) for a in pl["configure"]))
                out.info(" ".join(shlex.quote(a) for a in pl["build"]))

        out.emit(plans, human)
        return 0
    if check_series:
        results = [b.check_series(ctx.profile, n, ctx.runner, out) for n in names]

        def human():
            for r in results:
                mirror = {None: "no expected tree", True: "matches expected tree", False: "MISMATCH"}[r["mirror_ok"]]
                out.info(f"{r['engine']}: {len(r['patches'])} patches applied; tree {r['tree_before'][:12]} -> {r['tree_after'][:12]} ({mirror})")

        out.emit(results, human)
        return 0
    results = []
    for n in names:
        r = b.ensure_built(ctx.profile, n, ctx.runner, out, force=force, extra_flags=flags, jobs=jobs)
        results.append({"engine": n, "key": r.key, "bin_dir": str(r.bin_dir), "cached": r.cached, "wall_s": r.provenance.get("wall_s"), "tree_after": r.provenance.get("tree_after")})
    out.emit(results, lambda: [out.info(f"{r['engine']}: {'cached' if r['cached'] else 'built'} -> {r['bin_dir']}") for r in results])
    return 0
