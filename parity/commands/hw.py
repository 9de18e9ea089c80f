"""parity hw"""

from __future__ import annotations

from typing import Optional

import typer

from parity.commands.common import JsonOpt, ProfileOpt


def register(app: typer.Typer) -> None:
    @app.command("hw")
    def hw(
        out_dir: Optional[str] = typer.Option(None, "--out", metavar="DIR", help="Also write hardware.txt and hardware.json into DIR."),
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """GPU, driver, compute capability, memory, CUDA, CPU and the hardware_class."""
        from parity.commands.common import make_context
        from parity.hardware import inventory, render

        ctx = make_context(profile, json)
        info = inventory(ctx.runner)
        if out_dir:
            from pathlib import Path

            from parity.artifacts import atomic_write_json, atomic_write_text

            d = Path(out_dir)
            try:
                d.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                from parity.errors import UsageError

                raise UsageError(f"--out {out_dir}: {e.strerror}") from None
            atomic_write_text(d / "hardware.txt", render(info))
            atomic_write_json(d / "hardware.json", info)
        ctx.out.emit(info, lambda: ctx.out.info(render(info).rstrip()))
