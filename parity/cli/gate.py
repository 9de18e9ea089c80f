"""parity gate -> parity.gating.gate; parity gate summarize -> parity.gates.summary.summarize"""

from typing import List, Optional

import typer

from parity.cli.common import JsonOpt, ProfileOpt


def register(app: typer.Typer) -> None:
    group = typer.Typer(name="gate", help="Correctness gates: greedy md5 per path, op-oracle, KL band.", invoke_without_command=True, no_args_is_help=False, rich_markup_mode=None)

    @group.callback(invoke_without_command=True)
    def gate(
        tctx: typer.Context,
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
        if tctx.invoked_subcommand is not None:
            return
        from parity.cli.common import make_context, parse_str_list
        from parity.errors import EXIT_GATE

        ctx = make_context(profile, json)  # the profile and the lists are checked before the gate code loads
        op_list = parse_str_list(ops)
        from parity.gating import GateRequest
        from parity.gating import gate as run

        req = GateRequest(model=model, path=path, ops=op_list, backend=backend, kl=kl, engine=engine, expect=expect, form=form, record=record, registry=registry)
        doc = run(ctx, req)

        def human():
            ctx.out.info(f"gates {'GREEN' if doc['green'] else 'RED'} ({doc['status']}) -> {doc['run_dir']}")
            for r in doc["recorded"]:
                ctx.out.info(f"recorded canonical md5 in {r}")
            if doc["record_error"]:
                ctx.out.info(f"not recorded: {doc['record_error']}")

        ctx.out.emit(doc, human)
        raise typer.Exit(0 if doc["green"] else EXIT_GATE)

    @group.command("summarize")
    def summarize(
        art: str = typer.Argument(..., metavar="ART", help="An artifact dir of the users' harness (gate_pre/, gate_post/) or a parity run dir."),
        expect: Optional[List[str]] = typer.Option(None, "--expect", metavar="NAME=MD5", help="Expected md5 of NAME.md5 (repeatable; default: the profile's canonical md5s of gates.models)."),
        backend: Optional[str] = typer.Option(None, "--backend", metavar="NAME", help="Op-oracle backend in the op_*.txt files (default: gates.op_backend)."),
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """Write ART/gate_summary.tsv in the users' layout (their --summarize-gates); exit 3 when a check is bad."""
        from parity.cli.common import make_context
        from parity.errors import GateFailed, UsageError
        from parity.gates.summary import SummarizeRequest
        from parity.gates.summary import summarize as run

        pairs = {}
        for e in expect or []:
            name, sep, md5 = e.partition("=")
            if not sep or not name or not md5:
                raise UsageError(f"--expect {e!r}: expected NAME=MD5")
            pairs[name] = md5
        ctx = make_context(profile, json, default_profile="gb10-qwen36")  # the users' artifacts: their models and md5s
        doc = run(ctx, SummarizeRequest(art=art, expect=pairs or None, backend=backend))
        ctx.out.emit(doc, lambda: (ctx.out.table(doc["file"], doc["columns"], doc["rows"]), ctx.out.info("gates " + ("BAD: " + ", ".join(doc["bad"]) if doc["bad"] else "OK"))))
        if doc["bad"]:
            raise GateFailed(f"{doc['file']}: bad gate rows: {', '.join(doc['bad'])}")

    app.add_typer(group, name="gate")
