"""parity hw"""

from __future__ import annotations

from typing import Optional

import typer

from parity.commands.common import JsonOpt, ProfileOpt


def register(app: typer.Typer) -> None:
    @app.command("hw")
    def hw(profile: Optional[str] = ProfileOpt, json: bool = JsonOpt):
        """GPU, driver, compute capability, memory, CUDA, CPU and the hardware_class."""
        from parity.commands.common import make_context
        from parity.hardware import inventory, render

        ctx = make_context(profile, json)
        info = inventory(ctx.runner)
        ctx.out.emit(info, lambda: ctx.out.info(render(info).rstrip()))
