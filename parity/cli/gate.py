"""parity gate -> parity.gates.gate.gate"""

from __future__ import annotations

from typing import Optional

import typer

from parity.cli.common import JsonOpt, ProfileOpt


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
        from parity.cli.common import make_context, parse_str_list
        from parity.errors import EXIT_GATE
        from parity.gates.gate import GateRequest
        from parity.gates.gate import gate as run

        ctx = make_context(profile, json)
        req = GateRequest(model=model, path=path, ops=parse_str_list(ops), backend=backend, kl=kl, engine=engine, expect=expect, form=form, record=record, registry=registry)
        doc = run(ctx, req)

        def human():
            ctx.out.info(f"gates {'GREEN' if doc['green'] else 'RED'} ({doc['status']}) -> {doc['run_dir']}")
            for r in doc["recorded"]:
                ctx.out.info(f"recorded canonical md5 in {r}")
            if doc["record_error"]:
                ctx.out.info(f"not recorded: {doc['record_error']}")

        ctx.out.emit(doc, human)
        raise typer.Exit(0 if doc["green"] else EXIT_GATE)
