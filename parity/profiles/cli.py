"""Logic behind `parity profile` and `parity profile analyze` (parse, call, render)."""

from __future__ import annotations

import re
from pathlib import Path


def capture(graph_node, allow_collapsed, engine, workload, ntg, npl, npp, model, allow_env, dry_run, profile, json_mode) -> int:
    from parity.commands.common import make_context, parse_int_list
    from parity.context import run_session
    from parity.errors import UsageError
    from parity.profiles.capture import check_graph_node, dry_run as do_dry_run, make_plan, run_profile

    check_graph_node(graph_node, allow_collapsed)  # the refusal comes before anything is loaded
    for name, v in (("--npl", npl), ("--npp", npp)):
        if v is not None and v <= 0:
            raise UsageError(f"{name} must be positive")
    ntgs = parse_int_list(ntg, "--ntg")
    ctx = make_context(profile, json_mode)
    if dry_run:
        plan = make_plan(ctx, engine=engine, workload=workload, ntgs=ntgs, npl=npl, npp=npp, model=model, graph_node=graph_node, allow_collapsed=allow_collapsed, dry=True)
        doc = do_dry_run(ctx, plan)

        def human():
            if plan.collapsed:
                ctx.out.info("COLLAPSED capture (--allow-collapsed): comparison only, decode attribution will be wrong")
            for c in doc["commands"]:
                env = " ".join(f"{k}={v}" for k, v in c["env"].items())
                ctx.out.info(f"# {c['label']}\n{('env ' + env + ' ') if env else ''}{c['shell']}")
            ctx.out.info(f"# then, per capture: {doc['export']}")

        ctx.out.emit(doc, human)
        return 0
    with run_session(ctx, "profile", f"profile-{engine or 'default'}-{workload}"):
        plan = make_plan(ctx, engine=engine, workload=workload, ntgs=ntgs, npl=npl, npp=npp, model=model, graph_node=graph_node, allow_collapsed=allow_collapsed, out_dir=str(ctx.run.path / "profile"))
        doc = run_profile(ctx, plan, allow_env)
        ctx.out.emit({"run_dir": str(ctx.run.path), **doc}, lambda: render(ctx, doc))
    return 0


_NTG = re.compile(r"ntg[-_]?(\d+)", re.I)


def ntg_from_name(path: str) -> int | None:
    m = _NTG.search(Path(path).name)
    return int(m.group(1)) if m else None


def analyze(files, compare_file, diff, ntg_long, ntg_short, npl, window, after_nvtx, buckets, collapsed, profile, json_mode) -> int:
    from parity.commands.common import make_context
    from parity.context import run_session
    from parity.errors import UsageError
    from parity.profiles.analysis import analyze_file, build_doc, compare, difference, write_outputs
    from parity.profiles.buckets import load_table_file, table_for
    from parity.profiles.nsys import parse_window_spec

    ctx = make_context(profile, json_mode)
    p = ctx.profile.profiling
    table = load_table_file(buckets) if buckets else table_for(p)
    win = parse_window_spec(window)
    after_nvtx = after_nvtx or p.decode_after_nvtx
    paths = list(files)
    if compare_file:
        paths.append(compare_file)
    if diff:
        paths += [d for d in diff if d not in paths]
    for f in paths:
        if not Path(f).exists():
            raise UsageError(f"{f}: no such file")
    with run_session(ctx, "profile-analyze", "profile-analyze"):
        if collapsed:
            ctx.run.update(collapsed=True)
        caps: dict[str, dict] = {}
        for f in paths:
            n = ntg_long if diff and f == diff[0] and ntg_long else ntg_short if diff and f == diff[1] and ntg_short else ntg_from_name(f)
            caps[f] = analyze_file(f, table, label=Path(f).stem, ntg=n, npl=npl or p.npl, top_unmatched=p.top_unmatched, window_ms=win,
                                   after_nvtx=after_nvtx, runner=ctx.runner, nsys=p.nsys, collapsed=collapsed)  # fmt: skip
        d = [difference(caps[diff[0]], caps[diff[1]], npl or p.npl)] if diff else []
        c = compare(caps[files[0]], caps[compare_file]) if compare_file else None
        doc = build_doc(list(caps.values()), diff=d, comparison=c, bucket_table=table.source)
        doc["files"] = write_outputs(ctx.run.path / "profile", doc)
        ctx.out.emit({"run_dir": str(ctx.run.path), **doc}, lambda: render(ctx, doc))
    return 0


def render(ctx, doc: dict) -> None:
    out = ctx.out
    if doc.get("collapsed"):
        out.info(doc.get("note", "COLLAPSED capture"))
    for c in doc["captures"]:
        title = f"{c['label']}: {c['total_ms']:.3f} ms in {c['kernels']} kernels ({c['graph_node_kernels']} graph-node){' [COLLAPSED]' if c.get('collapsed') else ''}"
        if c.get("window"):
            title += f"; window: {c['window']['why']}"
        out.table(title, ["bucket", "total ms", "share %", "launches", "ms/launch"], [[r["bucket"], f"{r['total_ms']:.3f}", f"{100 * r['share']:.2f}", r["instances"], _f(r["ms_per_launch"])] for r in c["buckets"]])
        if c.get("warning"):
            out.warn(c["warning"])
        if c["unmatched_top"]:
            out.info("unmatched (other) top kernels, to improve the bucket table:")
            for u in c["unmatched_top"]:
                out.info(f"  {u['total_ms']:.3f} ms  x{u['instances']}  {u['name'][:160]}")
    for d in doc["difference"]:
        t = d["total"]
        out.table(
            f"difference {d['long']} - {d['short']} (steps {d['steps']}, npl {d['npl']}): {t['us_per_token']:.3f} us/token, {t['ms_per_step']:.3f} ms/step{' [COLLAPSED]' if d['collapsed'] else ''}",
            ["bucket", "delta ms", "delta launches", "ms/step", "us/token", "launches/step", "ms/launch"],
            [[r["bucket"], f"{r['delta_ms']:.3f}", r["delta_launches"], f"{r['ms_per_step']:.4f}", f"{r['us_per_token']:.4f}", f"{r['launches_per_step']:.2f}", _f(r["ms_per_launch_delta"])] for r in d["buckets"]],
        )
        out.info(f"formula: {d['formula']}")
    c = doc.get("comparison")
    if c:
        out.table(f"{c['b']} vs {c['a']}", ["bucket", "a ms", "b ms", "b/a", "a ms/launch", "b ms/launch"], [[r["bucket"], f"{r['a_ms']:.3f}", f"{r['b_ms']:.3f}", _f(r["ratio"]), _f(r["a_ms_per_launch"]), _f(r["b_ms_per_launch"])] for r in c["buckets"]])
    for name, path in (doc.get("files") or {}).items():
        out.info(f"-> {path}")


def _f(v) -> str:
    return "-" if v is None else f"{v:.4f}"
