"""parity build -> parity.llamacpp.build.build"""

from typing import List, Optional

import typer

from parity.cli.common import JsonOpt, ProfileOpt


def register(app: typer.Typer) -> None:
    @app.command("build")
    def build(
        engine: Optional[List[str]] = typer.Option(None, "--engine", "-e", metavar="NAME", help="Engine to build (repeatable); default: all llama engines."),
        define: Optional[List[str]] = typer.Option(None, "-D", metavar="VAR=VALUE", help="Extra CMake -D flag (repeatable)."),
        check_series: bool = typer.Option(False, "--check-series", help="Only apply the series on the pin and check the tree (mirror invariant): pin tree, series digest, resulting tree, verdict."),
        record: bool = typer.Option(False, "--record", help="With --check-series: record the resulting tree for this series digest and pin (~/.config/parity/series-trees.yaml)."),
        fork: Optional[str] = typer.Option(None, "--fork", metavar="PATH", help="With --check-series: the fork checkout whose HEAD^{tree} the series must give (engines.NAME.fork)."),
        fork_ref: Optional[str] = typer.Option(None, "--fork-ref", metavar="REF", help="The fork's ref to compare with (default HEAD)."),
        print_cmake: bool = typer.Option(False, "--print-cmake", "--dry-run", help="Print the configure/build commands and cache key; build nothing."),
        force: bool = typer.Option(False, "--force", help="Rebuild even when the cache has this key."),
        jobs: Optional[int] = typer.Option(None, "-j", "--jobs", help="Parallel compile jobs (default: CPU count)."),
        detach: bool = typer.Option(False, "--detach", help="Build in the background; poll with --status."),
        status: bool = typer.Option(False, "--status", help="Show detached builds."),
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """Build the profile's llama.cpp engines (pin + patch series, CMake, cached)."""
        from parity.cli.common import make_context
        from parity.llamacpp.build import BuildRequest
        from parity.llamacpp.build import build as run

        ctx = make_context(profile, json)
        req = BuildRequest(engines=engine or [], defines=define or [], mode=_mode(check_series, print_cmake, detach, status), force=force, jobs=jobs, profile=profile,
                           record=record, fork=fork, fork_ref=fork_ref)  # fmt: skip
        doc = run(ctx, req)
        ctx.out.emit(doc, lambda: RENDER[req.mode](ctx.out, doc))


def _mode(check_series: bool, print_cmake: bool, detach: bool, status: bool) -> str:
    return "status" if status else "detach" if detach else "print" if print_cmake else "check-series" if check_series else "build"


def _status(out, rows) -> None:
    if not rows:
        return out.info("no detached builds")
    out.table("detached builds", ["id", "pid", "state", "progress", "last line", "log"], [[r.get("id", r["started"]), r["pid"], r["state"], r["progress"], r["last_line"], r["log"]] for r in rows])


def _plans(out, plans) -> None:
    import shlex

    for pl in plans:
        out.info(f"# {pl['engine']} (key {pl['key']}, {'cached' if pl['cached'] else 'not built'})")
        out.info(" ".join(shlex.quote(a) for a in pl["configure"]))
        out.info(" ".join(shlex.quote(a) for a in pl["build"]))


def _series(out, results) -> None:
    from parity.llamacpp.build import check_series_lines

    for r in results:
        for line in check_series_lines(r):
            out.info(line)
        if r.get("recorded_in"):
            out.info(f"  recorded in {r['recorded_in']}")


def _built(out, results) -> None:
    for r in results:
        out.info(f"{r['engine']}: {'cached' if r['cached'] else 'built'} -> {r['bin_dir']}")


RENDER = {
    "status": _status,
    "detach": lambda out, doc: out.info(f"build running in the background (pid {doc['pid']}); log: {doc['log']}; `parity build --status` to poll"),
    "print": _plans,
    "check-series": _series,
    "build": _built,
}
