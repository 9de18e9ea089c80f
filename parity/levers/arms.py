"""The two arms of a lever A/B, derived from one base engine of the profile.

A runtime lever (--env NAME=VALUE, --server-arg "--flag value") runs the base build twice: arm B is
the same engine config with the extra env or server arguments, so the same build key and binaries.  A build lever
(--series-without NNNN, --series-until NNNN, --series DIR) is the users' "separately
built in-backend A/B": arm B is the base config with another patch selection (its own
build key; ccache recompiles only what the patches touch).  Both may be combined (a
patch compiled in and switched on by env)."""

from __future__ import annotations

import copy
import re
import shlex
from dataclasses import dataclass, field

from parity.decode import replace
from parity.engines import kind_of
from parity.engines.bound import bind
from parity.errors import UsageError
from parity.bisect import upstream
from parity.bisect.common import repo_of, series_dir
from parity.llamacpp.build import OK_MARKER, plan, selection
from parity.llamacpp.patches import patch_number as checked
from parity.llamacpp.source import add_pinned_source
from parity.paths import expand_path

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ARM_B_SUFFIX = "+lever"


@dataclass
class Lever:
    env: dict[str, str] = field(default_factory=dict)
    server_args: list[str] = field(default_factory=list)  # --server-arg strings as given (arm B's server gets them split)
    series_without: list[str] = field(default_factory=list)
    series_until: str | None = None
    series: str | None = None  # another series directory
    name: str | None = None  # --name; None: derived
    pin: str | None = None  # another llama.cpp commit (--pin REF of --repo), the series applied there
    repo: str | None = None  # --repo PATH|URL; None: the engine's source checkout or url
    pin_commit: str | None = None  # pin resolved to a commit (ab.prepare)
    repo_path: str | None = None  # repo resolved to a local checkout or clone

    @property
    def kind(self) -> str:
        return "build" if self.builds() else "runtime"

    def builds(self) -> bool:
        return bool(self.series_without or self.series_until or self.series or self.pin)

    def derived_name(self) -> str:
        parts = [f"{k}={v}" for k, v in self.env.items()] + list(self.server_args)
        if self.series:
            parts.append(f"series={self.series.rstrip('/').rsplit('/', 1)[-1]}")
        if self.series_until:
            parts.append(f"series-until={self.series_until}")
        parts += [f"series-without={n}" for n in self.series_without]
        if self.pin:
            parts.append(f"pin={self.pin}")
        return " ".join(parts)

    def label(self) -> str:
        return self.name or self.derived_name()

    def changes(self, base: str) -> str:
        """What arm B changes against arm A, in words (the map's `changes` column)."""
        out = []
        if self.env:
            out.append("env " + " ".join(f"{k}={v}" for k, v in self.env.items()) + f" on the {base} build")
        if self.server_args:
            out.append("server arguments " + " ".join(self.server_args) + f" on {base}'s server")
        if self.series:
            out.append(f"series {self.series} instead of {base}'s")
        if self.series_until:
            out.append(f"series patches <= {self.series_until} only")
        if self.series_without:
            out.append(f"series without patch {', '.join(self.series_without)}")
        if self.pin:
            out.append(f"llama.cpp at {self.pin}" + (f" ({self.pin_commit[:12]})" if self.pin_commit and not self.pin_commit.startswith(self.pin) else "") + " instead of the pin")
        return "; ".join(out)


def parse_env(items: list[str] | None) -> dict[str, str]:
    """--env NAME=VALUE (repeatable) -> {NAME: VALUE}; a malformed item is a one-line UsageError."""
    env: dict[str, str] = {}
    for item in items or []:
        name, sep, value = str(item).partition("=")
        if not sep or not ENV_NAME.match(name):
            raise UsageError(f"--env {item!r}: expected NAME=VALUE with NAME an environment variable name")
        if name in env and env[name] != value:
            raise UsageError(f"--env {name} given twice with different values ({env[name]!r}, {value!r})")
        env[name] = value
    return env


def parse_server_args(items: list[str] | None) -> list[str]:
    """--server-arg "--flag value" (repeatable) -> the strings as given, each checked to split into
    an option and its values; a malformed item is a one-line UsageError."""
    out: list[str] = []
    for item in items or []:
        try:
            words = shlex.split(str(item))
        except ValueError as e:
            raise UsageError(f"--server-arg {item!r}: {e}") from None
        if not words or not words[0].startswith("-"):
            raise UsageError(f"--server-arg {item!r}: expected a server option and its value, "
                             "e.g. --server-arg '--cache-ram 0'")
        out.append(" ".join(words))
    if len(set(out)) != len(out):
        raise UsageError(f"--server-arg given twice: {', '.join(sorted({a for a in out if out.count(a) > 1}))}")
    return out


def server_argv(lever: Lever) -> list[str]:
    return [w for a in lever.server_args for w in shlex.split(a)]


def patch_number(value: str, flag: str) -> str:
    """The number as written (the lever's name keeps it), checked by the series' own rule."""

    checked(value, flag)
    return str(value).strip()


def make_lever(env: list[str] | None, series_without: list[str] | None, series_until: str | None, series: str | None, name: str | None,
               pin: str | None = None, repo: str | None = None, server_args: list[str] | None = None) -> Lever:  # fmt: skip
    env_, args = parse_env(env), parse_server_args(server_args)
    lever = Lever(env_, args, [patch_number(n, "--series-without") for n in series_without or []],
                  patch_number(series_until, "--series-until") if series_until else None, series, name, pin or None, repo or None)  # fmt: skip
    if repo and not pin:
        raise UsageError("--repo goes with --pin REF (the llama.cpp commit arm B is built at)")
    if not lever.env and not lever.server_args and not lever.builds():
        raise UsageError("no lever given: --env NAME=VALUE or --server-arg '--flag value' (runtime lever), --series-without NNNN, --series-until NNNN, --series DIR or --pin REF (build lever)")
    if name is not None and not str(name).strip():
        raise UsageError("--name: empty lever name")
    return lever


def derive(profile, base: str, lever: Lever):
    """(profile copy with arm B added, arm A name, arm B name).  The copy's serving reference is
    arm A, so every ratio reads B/A.  Bad combinations are one-line UsageErrors."""

    e = profile.engine(base)
    if not kind_of(profile, base).variants:
        raise UsageError(f"engine {base} is a {e.kind} engine: a lever A/B needs a llama engine (its build and env)")
    if lever.builds():
        if e.bin_dir:
            raise UsageError(f"engine {base} uses prebuilt binaries ({e.bin_dir}): a build lever needs an engine parity builds (a source)")
        if not (e.series or lever.series):
            raise UsageError(f"engine {base} has no patch series: --series-without / --series-until need one (or give --series DIR)")
    prof = copy.deepcopy(profile)
    # the lever's env wins over the engine's and every path's own (a path's env is applied last)
    paths = {p: {**penv, **lever.env} for p, penv in e.paths.items()}
    b = replace(copy.deepcopy(e), env={**e.env, **lever.env}, paths=paths)
    if lever.server_args:  # after the engine's own: the server takes an option's last value
        b = replace(b, server_args=[*e.server_args, *server_argv(lever)])
    if lever.pin and not lever.pin_commit:
        raise UsageError("--pin: resolve it first (levers.arms.resolve_pin)")
    if lever.builds():
        series = expand_path(lever.series) if lever.series else e.series
        if lever.pin:  # the base's series (auto = the localai source's) applied at the other commit

            series = series if lever.series else series_dir(profile, base)
        without = [*e.series_without, *(n for n in lever.series_without if n not in e.series_without)]
        b = replace(b, series=series, series_until=lever.series_until or e.series_until, series_without=without,
                    expected_tree=None, fork=None, description=f"{base} with {lever.changes(base)}")  # fmt: skip
    else:
        b.description = f"{base} with {lever.changes(base)}"
    if lever.pin:
        b = replace(b, source=add_pinned_source(prof, base, lever.repo_path, lever.pin_commit))
    name_b = base + ARM_B_SUFFIX
    prof.engines[name_b] = b
    prof.serving.reference_engine = base
    return prof, base, name_b


def measured_env(e) -> dict[str, str]:
    """The env an engine is measured with: its own, then its default path's (which wins)."""
    return {**e.env, **(e.paths.get(e.default_path, {}) if e.default_path is not None else {})}


def identical(profile, a: str, b: str, builds: dict) -> str | None:
    """Why arm B is arm A (the same build and the same measured env), or None when they differ.
    builds: check_build of each arm."""
    ea, eb = profile.engine(a), profile.engine(b)
    if builds.get(a) is None or builds.get(a) != builds.get(b):
        return None
    ba = builds[a]
    if not ba.get("key") and not ba.get("prebuilt"):
        return None
    env_a, env_b = measured_env(ea), measured_env(eb)
    if env_a != env_b or getattr(ea, "server_args", None) != getattr(eb, "server_args", None):
        return None
    where = f"path {ea.default_path}" if ea.default_path is not None else "its env"
    build = f"build {ba['key']}" if ba.get("key") else f"prebuilt {ba['prebuilt']}"
    env = " ".join(f"{k}={v}" for k, v in sorted(env_a.items())) or "no env"
    return f"arm B would be arm A: the same {build} and the same env on {where} ({env})"


def resolve_pin(profile, base: str, lever: Lever, runner, out=None) -> None:
    """--pin REF of --repo (or the engine's source checkout / url) -> a commit and a local repo."""
    if not lever.pin:
        return

    repo = upstream.repository(repo_of(profile, base, lever.repo), runner, out)
    lever.repo_path, lever.pin_commit = str(repo), upstream.commit_of(repo, lever.pin, runner)


def check_build(profile, arm: str) -> dict:
    """Plan arm's build now (an unknown patch number or series directory is a one-line
    UsageError before anything runs): {key, cached, series_selection, patches}."""

    eng = bind(profile, arm)
    e = eng.section
    if e.bin_dir or not e.source:
        return {"prebuilt": e.bin_dir}
    p = plan(eng)
    sel = selection(e)
    return {"key": p.key, "cached": (p.dir / OK_MARKER).exists(), "dir": str(p.dir), "series_dir": p.series_dir,
            "patches": len(p.series), "series_selection": sel.describe() if sel else None}  # fmt: skip
