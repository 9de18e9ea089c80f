"""parity build"""

from __future__ import annotations

from typing import List, Optional

import typer

from parity.commands.common import JsonOpt, ProfileOpt


def register(app: typer.Typer) -> None:
    @app.command("build")
    def build(
        engine: Optional[List[str]] = typer.Option(None, "--engine", "-e", metavar="NAME", help="Engine to build (repeatable); default: all llama engines."),
        define: Optional[List[str]] = typer.Option(None, "-D", metavar="VAR=VALUE", help="Extra CMake -D flag (repeatable)."),
        check_series: bool = typer.Option(False, "--check-series", help="Only apply the series on the pin and check the tree hash."),
        print_cmake: bool = typer.Option(False, "--print-cmake", "--dry-run", help="Print the configure/build commands and cache key; build nothing."),
        force: bool = typer.Option(False, "--force", help="Rebuild even when the cache has this key."),
        jobs: Optional[int] = typer.Option(None, "-j", "--jobs", help="Parallel compile jobs (default: CPU count)."),
        detach: bool = typer.Option(False, "--detach", help="Build in the background; poll with --status."),
        status: bool = typer.Option(False, "--status", help="Show detached builds."),
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """Build the profile's llama.cpp engines (pin + patch series, CMake, cached)."""
        from parity.commands.build_impl import run

        raise typer.Exit(run(engine, define or [], check_series, print_cmake, force, jobs, detach, status, profile, json))
