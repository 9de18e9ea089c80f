"""parity profile: graph-node nsys captures and kernel-bucket analysis (see register)."""

from __future__ import annotations

from typing import List, Optional, Tuple

import typer

from parity.commands.common import JsonOpt, ProfileOpt


def register(app: typer.Typer) -> None:
    group = typer.Typer(
        name="profile",
        help="nsys profiles of decode with --cuda-graph-trace=node, kernel buckets, difference method.",
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
        dry_run: bool = typer.Option(False, "--dry-run", help="Print the exact nsys commands; start nothing."),
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """Capture one nsys profile per ntg under the GPU lock, then bucket and difference them."""
        if tctx.invoked_subcommand is not None:
            return
        from parity.profiles.cli import capture as impl

        raise typer.Exit(impl(graph_node, allow_collapsed, engine, workload, ntg, npl, npp, model, allow_env or [], dry_run, profile, json))

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
        from parity.profiles.cli import analyze as impl

        raise typer.Exit(impl(files, compare, diff, ntg_long, ntg_short, npl, window, after_nvtx, buckets, collapsed, profile, json))

    app.add_typer(group, name="profile")
