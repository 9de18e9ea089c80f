"""parity hw -> parity.gpu.hardware.hw"""

from typing import Optional

import typer

from parity.cli.common import JsonOpt, ProfileOpt


def register(app: typer.Typer) -> None:
    @app.command("hw")
    def hw(
        out_dir: Optional[str] = typer.Option(None, "--out", metavar="DIR", help="Also write hardware.txt and hardware.json into DIR."),
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """GPU, driver, compute capability, memory, CUDA, CPU and the hardware_class."""
        from parity.cli.common import make_context
        from parity.gpu.hardware import hw as run
        from parity.gpu.hardware import render

        ctx = make_context(profile, json)
        info = run(ctx, out_dir)
        ctx.out.emit(info, lambda: ctx.out.info(render(info).rstrip()))
