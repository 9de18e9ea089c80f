"""parity gate"""

from __future__ import annotations

from typing import Optional

import typer

from parity.commands.common import JsonOpt, ProfileOpt


def register(app: typer.Typer) -> None:
    @app.command("gate")
    def gate(
        model: Optional[str] = typer.Option(None, "--model", "-m", metavar="NAME|PATH", help="Model name from the profile or a GGUF path (default: the profile's gate models)."),
        path: Optional[str] = typer.Option(None, "--path", metavar="PATH", help="paged | nonpaged | all (default: the engine's default path)."),
        ops: Optional[str] = typer.Option(None, "--ops", metavar="OP,...", help="test-backend-ops ops (default: the profile's; 'none' to skip)."),
        backend: Optional[str] = typer.Option(None, "--backend", metavar="NAME", help="Op-oracle backend, e.g. CUDA0 or CPU."),
        kl: bool = typer.Option(False, "--kl", help="Also run the KL-divergence gate."),
        engine: Optional[str] = typer.Option(None, "--engine", "-e", metavar="NAME", help="Engine whose build runs the gates."),
        expect: Optional[str] = typer.Option(None, "--expect", metavar="MD5", help="Expected md5 (instead of the registry)."),
        form: Optional[str] = typer.Option(None, "--form", metavar="chat|no-cnv", help="Prompt form for the md5 gate."),
        record: bool = typer.Option(False, "--record", help="Record the observed md5 as canonical (needs a green --kl for that model and path)."),
        registry: Optional[str] = typer.Option(None, "--registry", metavar="FILE", help="User registry of canonical md5s, merged over the profile's (env PARITY_REGISTRY; default ~/.config/parity/registry.yaml)."),
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """Correctness gates: greedy md5 per path, op-oracle, KL band."""
        from parity.gates.cli_impl import run

        raise typer.Exit(run(model, path, ops, backend, kl, engine, expect, form, record, registry, profile, json))
