"""parity profile -> parity.profiles.capture.profile; parity profile analyze -> parity.profiles.analysis.analyze"""

from typing import List, Optional, Tuple

import typer

from parity.cli.common import JsonOpt, ProfileOpt


def register(app: typer.Typer) -> None:
    group = typer.Typer(
        name="profile",
        help="Graph-node kernel profiles of decode (nsys --cuda-graph-trace=node, or parity's CUPTI tracer), kernel buckets, difference method, paired buckets.",
        invoke_without_command=True,
        no_args_is_help=False,
        rich_markup_mode=None,
    )

    @group.callback(invoke_without_command=True)
    def capture(
        tctx: typer.Context,
        graph_node: Optional[bool] = typer.Option(None, "--graph-node/--no-graph-node", help="Trace every CUDA-graph node (required for decode profiles)."),
        allow_collapsed: bool = typer.Option(False, "--allow-collapsed", help="Capture WITHOUT graph-node tracing, for comparison only; marked collapsed=true."),
        engine: Optional[str] = typer.Option(None, "--engine", "-e", help="Engine to profile (paged, stock, vllm...)."),
        workload: str = typer.Option("bench", "--workload", help="bench (llama-batched-bench) or serve (server + load generator)."),
        ntg: Optional[str] = typer.Option(None, "--ntg", metavar="N,...", help="Generated tokens per capture (default: profiling.ntg, e.g. 64,16)."),
        npl: Optional[int] = typer.Option(None, "--npl", help="Parallel sequences / concurrent requests (default: profiling.npl)."),
        npp: Optional[int] = typer.Option(None, "--npp", help="Prompt tokens (default: profiling.npp)."),
        model: Optional[str] = typer.Option(None, "--model", "-m", help="Model (default: serving.model)."),
        allow_env: Optional[List[str]] = typer.Option(None, "--allow-env", metavar="NAME", help="Allow a forbidden bench env knob."),
        tracer: Optional[str] = typer.Option(None, "--tracer", metavar="cupti|nsys|auto", help="Who traces: nsys, parity's CUPTI injection library, or auto (nsys where it runs, else CUPTI). Default: profiling.tracer."),
        engines: Optional[str] = typer.Option(None, "--engines", metavar="A,B", help="Two arms (engines, or a lever's arms): paired buckets, B/A per bucket with its interval."),
        blocks: Optional[int] = typer.Option(None, "--blocks", help="Blocks (each: every arm traced at each ntg and untraced once). Default: profiling.blocks."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Print the exact commands; start nothing."),
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """Capture one nsys profile per ntg under the GPU lock, then bucket and difference them."""
        if tctx.invoked_subcommand is not None:
            return
        from parity.cli.common import make_context, parse_int_list
        from parity.profiles.capture import ProfileRequest, check_graph_node
        from parity.profiles.capture import profile as run

        check_graph_node(graph_node, allow_collapsed)  # the refusal comes before anything is loaded
        arms = [a.strip() for a in engines.split(",") if a.strip()] if engines is not None else None
        req = ProfileRequest(graph_node=graph_node, allow_collapsed=allow_collapsed, engine=engine, workload=workload, ntgs=parse_int_list(ntg, "--ntg"),
                             npl=npl, npp=npp, model=model, allow_env=allow_env or [], dry_run=dry_run, tracer=tracer, engines=arms, blocks=blocks)  # fmt: skip
        ctx = make_context(profile, json)
        doc = run(ctx, req)
        ctx.out.emit(doc, lambda: (render_plan if dry_run else render)(ctx.out, doc))
        if dry_run:
            from parity.gonogo import raise_if_no_go

            raise_if_no_go(doc["go_no_go"], doc["run_dir"])  # after the plan: the user sees what would run

    @group.command("analyze")
    def analyze(
        files: List[str] = typer.Argument(..., metavar="FILE...", help=".sqlite export, .nsys-rep (exported with nsys first) or cuda_gpu_kern_sum .csv"),
        compare: Optional[str] = typer.Option(None, "--compare", metavar="FILE2", help="Side by side with a second capture (e.g. the other engine)."),
        diff: Optional[Tuple[str, str]] = typer.Option(None, "--diff", metavar="LONG SHORT", help="Difference method: LONG (ntg_long) minus SHORT (ntg_short) capture."),
        ntg_long: Optional[int] = typer.Option(None, "--ntg-long", help="ntg of LONG (default: read from a 'ntgNN' in the file name)."),
        ntg_short: Optional[int] = typer.Option(None, "--ntg-short", help="ntg of SHORT (default: from the file name)."),
        npl: Optional[int] = typer.Option(None, "--npl", help="Parallel sequences, for the per-token cost (default: profiling.npl)."),
        window: Optional[str] = typer.Option(None, "--window", metavar="A:B", help="Decode-only window: kernels starting A..B ms after the first kernel."),
        after_nvtx: Optional[str] = typer.Option(None, "--after-nvtx", metavar="REGEX", help="Decode-only window: kernels after the last NVTX range matching REGEX."),
        buckets: Optional[str] = typer.Option(None, "--buckets", metavar="YAML", help="Bucket table file (default: profiling.buckets or the shipped table)."),
        collapsed: bool = typer.Option(False, "--collapsed", help="Mark these captures as taken without graph-node tracing."),
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """Bucket existing captures (old .nsys-rep files too) into profile/analysis.json."""
        from parity.cli.common import make_context
        from parity.profiles.analysis import AnalyzeRequest
        from parity.profiles.analysis import analyze as run

        ctx = make_context(profile, json)
        req = AnalyzeRequest(files=list(files), compare=compare, diff=diff, ntg_long=ntg_long, ntg_short=ntg_short, npl=npl, window=window, after_nvtx=after_nvtx, buckets=buckets, collapsed=collapsed)
        doc = run(ctx, req)
        ctx.out.emit(doc, lambda: render(ctx.out, doc))

    app.add_typer(group, name="profile")


def render_plan(out, doc: dict) -> None:
    from parity.cli.common import render_go

    if doc["collapsed"]:
        out.info("COLLAPSED capture (--allow-collapsed): comparison only, decode attribution will be wrong")
    out.info(f"# tracer: {doc.get('tracer')} ({doc.get('tracer_choice')}); {doc.get('blocks')} block(s), arms {', '.join(doc.get('engines') or [])}")
    for c in doc["commands"]:
        env = " ".join(f"{k}={v}" for k, v in c["env"].items())
        out.info(f"# {c['label']}\n{('env ' + env + ' ') if env else ''}{c['shell']}")
    out.info(f"# then, per capture: {doc['export']}")
    render_go(out, doc)


def render(out, doc: dict) -> None:
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
    render_tracer(out, doc)
    for name, path in (doc.get("files") or {}).items():
        out.info(f"-> {path}")


def render_tracer(out, doc: dict) -> None:
    """The tracer, its cost per arm, and the paired bucket table (two arms)."""
    from parity.tracer.overhead import line
    from parity.tracer.pairs import table_lines

    t = doc.get("tracer")
    if t:
        out.info(f"tracer: {t['name']} ({t['choice']}), {t['blocks']} block(s)")
    for d in doc.get("tracer_cost") or []:
        out.info(line(d))
    for c in doc.get("captures") or []:
        nc = (c.get("trace") or {}).get("node_check")
        if nc:
            out.info(node_check_line(c["label"], nc, (c.get("trace") or {}).get("graphs") or []))
    pb = doc.get("paired_buckets")
    if pb:
        out.info(f"paired buckets {pb['candidate']} (B) vs {pb['reference']} (A), blocks {pb['blocks']}, ms per decoded token:")
        for ln in table_lines(pb):
            out.info("  " + ln)
        if pb["engine_time_missing"]:
            out.warn(f"engine decode time unknown (table row lost) for {', '.join(pb['engine_time_missing'])}: no remainder there")


def node_check_line(label: str, nc: dict, graphs: list[dict]) -> str:
    """One line: how many graph launches ran exactly their executable graph's kernel nodes."""
    if not nc["launches"]:
        return f"{label}: no CUDA-graph launch (every kernel launched on its own)"
    per = ", ".join(f"graph {g['graph_id']}: {'/'.join(g['kernels_per_launch'])} kernels x {sum(g['kernels_per_launch'].values())} launches"
                    f" ({'-' if g.get('kernel_nodes') is None else g['kernel_nodes']} kernel nodes)" for g in graphs)  # fmt: skip
    head = f"{label}: {nc['launches']} graph launches; kernels per launch = the graph's kernel-node count in {nc['matched']}, not in {nc['mismatched']}"
    return head + (f", not checked in {nc['unknown']} (no instantiation record)" if nc["unknown"] else "") + (f" [{per}]" if per else "")


def _f(v) -> str:
    return "-" if v is None else f"{v:.4f}"
