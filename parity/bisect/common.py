"""What the bisection and the canary share: the engine's series and where its llama.cpp comes from."""

from __future__ import annotations

from parity.errors import UsageError
from parity.llamacpp import patches
from parity.llamacpp import source as srcmod
from parity.llamacpp.build import resolved_series_dir
from parity.engines import kind_of
from parity.paths import expand_path
from parity.results import run_dir


def llama_engine(profile, engine: str, command: str) -> None:
    """bisect and canary apply a patch series to llama.cpp (and build it): -e must name a llama engine."""
    kind = kind_of(profile, engine)  # an unknown engine: one line naming the known ones
    if not kind.variants:
        llama = [n for n in profile.engines if kind_of(profile, n).variants]
        which = f": one of {', '.join(llama)}" if llama else f"; profile {profile.name} has none"
        raise UsageError(f"-e {engine}: engine kind {kind.name}; parity {command} needs a llama engine "
                         f"(a patch series applied to a llama.cpp build){which}")


def series_dir(profile, engine: str, override: str | None = None) -> str:
    """--series DIR, else the engine's series (series: auto = the localai source's patches/paged);
    a series without a patch is refused: a canary or bisection of nothing would pass."""
    if override:
        d = expand_path(override)
    else:
        e = profile.engine(engine)
        if not e.series:
            raise UsageError(f"engine {engine} has no series (give --series DIR or an engine with one)")
        if not e.source:
            raise UsageError(f"engine {engine} has no source")
        d = resolved_series_dir(e, srcmod.describe(e.source, profile.sources[e.source]))
    run_dir(d, "patch series directory")  # missing, a file, a name too long: one line
    if not patches.list_series(d):
        raise UsageError(f"patch series {d}: no NNNN-*.patch in it: nothing to apply (a moved or emptied series directory?)")
    return d


def repo_of(profile, engine: str, override: str | None = None) -> str:
    """--repo PATH|URL, else the engine's source checkout, else its url."""
    if override:
        return override
    e = profile.engine(engine)
    cfg = profile.sources.get(e.source) if e.source else None
    where = cfg and (cfg.checkout or cfg.url)
    if not where:
        raise UsageError(f"engine {engine}: its source names no llama.cpp checkout or url: give --repo PATH|URL")
    return where
