"""parity doctor -> parity.doctor.diagnose"""

from typing import Optional

import typer

from parity.cli.common import JsonOpt, ProfileOpt


def register(app: typer.Typer) -> None:
    @app.command("doctor")
    def doctor(profile: Optional[str] = ProfileOpt, json: bool = JsonOpt):
        """What this machine has for each capability (ok / missing / degraded) and what that means."""
        from parity.cli.common import make_context
        from parity.doctor import diagnose

        ctx = make_context(profile, json)
        data = diagnose(ctx)

        def human():
            ctx.out.table("parity doctor", ["capability", "status", "found", "consequence"], [[c["name"], c["status"], c["found"], c["consequence"]] for c in data["checks"]])
            s = data["summary"]
            ctx.out.info(f"{s['ok']} ok, {s['degraded']} degraded, {s['missing']} missing")

        ctx.out.emit(data, human)
