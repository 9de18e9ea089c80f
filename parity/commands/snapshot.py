"""parity snapshot / parity bench"""

from __future__ import annotations

from typing import List, Optional

import typer

from parity.commands.common import JsonOpt, ProfileOpt


def register(app: typer.Typer) -> None:
    @app.command("snapshot")
    def snapshot(
        npl: Optional[str] = typer.Option(None, "--npl", metavar="N,...", help="Concurrency levels (default: serving.npl)."),
        ptok: Optional[int] = typer.Option(None, "--ptok", help="Prompt tokens per request."),
        gen: Optional[int] = typer.Option(None, "--gen", help="Generated tokens per request."),
        parallel: Optional[int] = typer.Option(None, "--parallel", help="llama-server --parallel."),
        ctx_len: Optional[int] = typer.Option(None, "--ctx", help="llama-server -c."),
        engines: Optional[str] = typer.Option(None, "--engines", metavar="A,B", help="Engines in session order (default: serving.engines)."),
        model: Optional[str] = typer.Option(None, "--model", "-m", help="Model name (default: serving.model)."),
        repeat: Optional[int] = typer.Option(None, "--repeat", help="Repeats; >1 gives the noise floor (medians, ratios of medians)."),
        order: Optional[str] = typer.Option(None, "--order", help="Engine order across repeats: abab, abba or aabb (default: serving.order)."),
        no_gates: bool = typer.Option(False, "--no-gates", help="Skip pre/post gates (the run is marked ungated)."),
        allow_env: Optional[List[str]] = typer.Option(None, "--allow-env", metavar="NAME", help="Allow a forbidden bench env knob."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Print every resolved command, env and the preflight; start nothing."),
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """Same-session serving sweep: every engine over every N, gated, locked."""
        from parity.runners.snapshot_cli import snapshot as impl

        raise typer.Exit(impl(npl, ptok, gen, parallel, ctx_len, engines, model, repeat, no_gates, allow_env or [], dry_run, profile, json, order))

    @app.command("bench")
    def bench(
        npp: Optional[str] = typer.Option(None, "--npp", metavar="N,...", help="Prompt lengths (default: serving.bench.npp)."),
        ntg: Optional[str] = typer.Option(None, "--ntg", metavar="N,...", help="Generated tokens."),
        npl: Optional[str] = typer.Option(None, "--npl", metavar="N,...", help="Parallel sequences."),
        engine: Optional[str] = typer.Option(None, "--engine", "-e", help="Engine (default: the first serving engine)."),
        model: Optional[str] = typer.Option(None, "--model", "-m", help="Model (default: serving.model)."),
        allow_env: Optional[List[str]] = typer.Option(None, "--allow-env", metavar="NAME"),
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """llama-batched-bench (PP/TG/B table) into bench.json."""
        from parity.runners.snapshot_cli import bench as impl

        raise typer.Exit(impl(npp, ntg, npl, engine, model, allow_env or [], profile, json))
