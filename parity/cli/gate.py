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
        kl_sweep: Optional[str] = typer.Option(None, "--kl-sweep", metavar="CTX,...",
                                               help="The KL drift sweep: the KL gate at each context (e.g. "
                                               "256,1024,2048,4096), one row each."),
        engine: Optional[str] = typer.Option(None, "--engine", "-e", metavar="NAME", help="Engine whose build runs the gates."),
        expect: Optional[str] = typer.Option(None, "--expect", metavar="MD5", help="Expected md5 (instead of the registry)."),
        form: Optional[str] = typer.Option(None, "--form", metavar="chat|no-cnv", help="Prompt form for the md5 gate."),
        record: bool = typer.Option(False, "--record", help="Record the observed md5 as canonical (needs a green --kl for that model and path)."),
        registry: Optional[str] = typer.Option(None, "--registry", metavar="FILE", help="User registry of canonical md5s, merged over the profile's (env PARITY_REGISTRY; default ~/.config/parity/registry.yaml)."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Print the gate set (each check's command, env, expected "
                                     "value), the builds and the lock, and the go / no-go; run nothing."),
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

        req = GateRequest(model=model, path=path, ops=op_list, backend=backend, kl=kl, engine=engine, expect=expect,
                          form=form, record=record, registry=registry, dry_run=dry_run,
                          kl_sweep=parse_str_list(kl_sweep))
        doc = run(ctx, req)
        if dry_run:
            from parity.gonogo import raise_if_no_go

            ctx.out.emit(doc, lambda: render_plan(ctx.out, doc))
            raise_if_no_go(doc["go_no_go"], doc["run_dir"])  # after the plan: 2 (a missing file), 4 (GPU not free)
            return

        def human():
            ctx.out.info(f"gates {'GREEN' if doc['green'] else 'RED'} ({doc['status']}) -> {doc['run_dir']}")
            for r in doc["recorded"]:
                ctx.out.info(f"recorded canonical md5 in {r}")
            if doc["record_error"]:
                ctx.out.info(f"not recorded: {doc['record_error']}")
            if doc.get("kl_sweep"):
                cols = ["ctx", "path", "KLD", "p99 KLD", "same top p %", "verdict"]
                rows = [[r[k] for k in ("ctx", "path", "kld", "kld_p99", "same_top_p", "status")] for r in doc["kl_sweep"]]
                ctx.out.table(f"KL drift sweep ({doc['kl_sweep'][0]['model']})", cols, rows)

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


def render_plan(out, doc: dict) -> None:
    import shlex

    from parity.cli.common import render_go

    engine, builds = doc["engine"] or "the first engine", ", ".join(doc["engines"]) or "none"
    out.info(f"gate plan: {len(doc['checks'])} check(s) on engine {engine}; builds: {builds}; lock {doc['lock']}")
    for c in doc["checks"]:
        out.info(f"# {c['check']}: expected {c['expected']}")
        for cmd in c["commands"]:
            env = " ".join(f"{k}={shlex.quote(v)}" for k, v in cmd["env"].items())
            out.info(f"{('env ' + env + ' ') if env else ''}{' '.join(shlex.quote(str(a)) for a in cmd['argv'])}")
    render_go(out, doc)
