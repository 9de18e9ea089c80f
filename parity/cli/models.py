"""parity models synth / list"""

from typing import Optional

import typer

from parity.cli.common import JsonOpt, ProfileOpt


def register(app: typer.Typer) -> None:
    models = typer.Typer(help="Model files: synthesize tiny GGUFs, list the profile's models.", no_args_is_help=True)
    app.add_typer(models, name="models")

    @models.command("synth")
    def synth(
        out: str = typer.Option(..., "--out", "-o", metavar="FILE", help="Where to write the GGUF (atomically)."),
        arch: Optional[str] = typer.Option(None, "--arch", help="Architecture: llama, qwen35 (dense hybrid: gated-DeltaNet + full attention) or qwen35moe (with routed experts)."),
        dtype: Optional[str] = typer.Option(None, "--dtype", metavar="f32|f16", help="Weight type (default f32)."),
        seed: Optional[int] = typer.Option(None, "--seed", help="Weight seed (default 0)."),
        layers: Optional[int] = typer.Option(None, "--layers", help="Blocks (default 2)."),
        embd: Optional[int] = typer.Option(None, "--embd", help="Embedding width (default 64)."),
        heads: Optional[int] = typer.Option(None, "--heads", help="Attention heads (default 4)."),
        kv_heads: Optional[int] = typer.Option(None, "--kv-heads", help="KV heads (default 2)."),
        ff: Optional[int] = typer.Option(None, "--ff", help="FFN width (default 128)."),
        ctx_len: Optional[int] = typer.Option(None, "--ctx", help="Training context length (default 512)."),
        experts: Optional[int] = typer.Option(None, "--experts", help="Routed experts (qwen35moe; default 8)."),
        experts_used: Optional[int] = typer.Option(None, "--experts-used", help="Experts per token (qwen35moe; default 2)."),
        noise: Optional[float] = typer.Option(None, "--noise", help="Relative Gaussian weight noise, e.g. 0.01 (default 0)."),
        perturb_seed: Optional[int] = typer.Option(None, "--perturb-seed", help="Seed of the noise (default 0)."),
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """Write a small deterministic GGUF (byte-level vocab, random weights); same options, same sha256."""
        from parity.cli.common import make_context
        from parity.models.catalog import spec_from_options
        from parity.models.synth import write_model

        ctx = make_context(profile, json)
        spec = spec_from_options(
            arch=arch, dtype=dtype, seed=seed, layers=layers, embd=embd, heads=heads, kv_heads=kv_heads, ff=ff, ctx=ctx_len, noise=noise, perturb_seed=perturb_seed,
            experts=experts, experts_used=experts_used,
        )
        digest = write_model(out, spec)
        ctx.out.emit({"path": out, "sha256": digest, "spec": spec}, lambda: ctx.out.info(f"{out}\nsha256 {digest}"))

    @models.command("list")
    def list_(profile: Optional[str] = ProfileOpt, json: bool = JsonOpt):
        """The profile's models: path, whether the file exists, how it is made."""
        from parity.cli.common import make_context
        from parity.models.catalog import model_rows

        ctx = make_context(profile, json)
        rows = model_rows(ctx.profile)

        def human():
            ctx.out.table(
                f"models of profile {ctx.profile.name}",
                ["model", "status", "size", "made by", "path"],
                [[r["name"], r["status"], r["bytes"] if r["bytes"] is not None else "-", r["source"], r["path"]] for r in rows],
            )

        ctx.out.emit({"profile": ctx.profile.name, "models": rows}, human)
