"""Build an engine (source + series + CMake) into the cache, once per key.

Cache: <cache>/builds/<key>/{src,build,build.json,build.log,BUILD_OK}.  The
key hashes the source identity, its fixups, the series content, the cmake args, the
targets and the compiler versions, so a rebuild with nothing changed is a
lookup.  Builds happen in place (binaries carry an rpath to their libs) and
BUILD_OK is written last: a failed or interrupted build is never "good".
<cache>/builds/<key>.lock: one builder per key; compile-<source>.lock: one compile per source.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from parity.paths import cache_dir
from parity.llamacpp import cmake, patches
from parity.llamacpp import source as srcmod
from parity.errors import ConfigError, InfraError, UsageError
from parity.filelock import locked
from parity.gpu.held import refuse_while_held
from parity.llamacpp import detach as bg, mirror
from parity.files import atomic_write_json, atomic_write_text, sha256
from parity.paths import expand_path
from parity.runners.local import LocalRunner

OK_MARKER = "BUILD_OK"


class BuildPlan(msgspec.Struct):
    engine: str
    key: str
    source: srcmod.Source
    series_dir: str | None
    series: list[dict]
    fixups_dir: str | None
    configure: list[str]
    build: list[str]
    targets: list[str]
    toolchain: dict
    dir: Path = msgspec.field(default_factory=Path)


class Target(NamedTuple):
    """What a build reads of one engine: its name, its section and the profile it is in (its
    sources).  The engines pass their parity.engines.bound.Engine, which has these fields;
    llamacpp sits below engines, so its own entry points (build, campaign_step) make this one."""

    name: str
    section: Any
    profile: Any


def target(profile, name: str) -> Target:
    """The profile's engine `name` to build (a one-line ConfigError for an unknown engine)."""
    return Target(name, profile.engine(name), profile)


class BuildResult(msgspec.Struct):
    engine: str
    key: str
    bin_dir: Path
    build_dir: Path
    provenance: dict
    cached: bool


@functools.lru_cache(maxsize=None)
def _version(tool: str) -> str | None:
    r = LocalRunner()
    if not r.which(tool):
        return None
    res = r.run([tool, "--version"], timeout=30)
    lines = [ln for ln in (res.stdout + res.stderr).splitlines() if ln.strip()]
    return lines[-1].strip() if tool == "nvcc" and lines else (lines[0].strip() if lines else None)


def toolchain(cuda: bool) -> dict:
    tc = {"cmake": _version("cmake"), "ninja": _version("ninja"), "gcc": _version("gcc"), "g++": _version("g++")}
    if cuda:
        tc["nvcc"] = _version("nvcc")
    return tc


def selection(e) -> patches.Selection:
    if (e.series_until or e.series_without) and not e.series:
        raise UsageError("series_until / series_without need an engine with a series")
    return patches.Selection(e.series_until, tuple(e.series_without))


def resolved_series_dir(e, src: srcmod.Source) -> str | None:
    if e.series == "auto":
        if not src.series_dir:
            raise UsageError("series: auto needs a localai source (series from its patches/paged/)")
        return src.series_dir
    return e.series


def plan(eng, extra_flags: list[str] | None = None, jobs: int | None = None) -> BuildPlan:
    """eng: the engine to build (.name, .section, .profile: a Target or an engines.bound.Engine)."""
    e, engine, profile = eng.section, eng.name, eng.profile
    if not hasattr(e, "source"):  # only a kind built from a source has one (parity.engines.llama)
        raise UsageError(f"engine {engine} is a {e.kind} engine: nothing to build")
    if not e.source:
        raise UsageError(f"engine {engine} has no source to build (it uses prebuilt binaries from {e.bin_dir})")
    src = srcmod.describe(e.source, profile.sources[e.source])
    series_dir = resolved_series_dir(e, src)
    series = patches.series_digest(series_dir, selection(e))
    patches.check_expected_tree(e.expected_tree, f"{profile.source_file}: engines.{engine}")
    flags = [*e.cmake_flags, *(extra_flags or [])]
    tc = toolchain(bool(e.cuda_archs))
    fixups_dir = profile.sources[e.source].fixups
    key_doc = {"source": src.identity, "series": series, "flags": flags, "archs": e.cuda_archs, "targets": e.targets, "toolchain": tc, "v": 1}
    if fixups_dir:  # only when set, so the keys of sources without fixups stay what they were
        key_doc["fixups"] = patches.series_digest(fixups_dir)
    key = sha256(json.dumps(key_doc, sort_keys=True)).hexdigest()[:20]
    d = cache_dir() / "builds" / key
    return BuildPlan(
        engine,
        key,
        src,
        series_dir,
        series,
        fixups_dir,
        cmake.configure_argv(str(d / "src"), str(d / "build"), e.cuda_archs, flags),
        cmake.build_argv(str(d / "build"), e.targets, jobs),
        list(e.targets),
        tc,
        d,
    )


def _cached(p: BuildPlan) -> BuildResult | None:
    return _finished(p.dir, p.engine, p.key)


def _finished(d: Path, engine: str, key: str) -> BuildResult | None:
    """The finished build in d; None when there is none, or its provenance does not read
    (damaged by hand or by the disk): then it is built again, under the key's lock."""
    if (d / OK_MARKER).exists() and (d / "build.json").exists():
        try:
            prov = json.loads((d / "build.json").read_text())
        except (OSError, ValueError):
            return None
        if isinstance(prov, dict):
            return BuildResult(engine, key, d / "build" / "bin", d / "build", prov, True)
    return None


# (engine section by identity, build cache) -> (that section, its build): an engine's build is
# resolved once in a process.  Every later arm of the run asks the value, not the source again: a
# run of 20 blocks re-read the pin's archive at each server start and died at block 4 when it had gone.
_resolved: dict[tuple[int, str], tuple[Any, BuildResult]] = {}


def ensure_built(eng, runner, out, force: bool = False, extra_flags: list[str] | None = None, jobs: int | None = None) -> BuildResult:
    at = (id(eng.section), str(cache_dir()))
    if not force and not extra_flags and (seen := _resolved.get(at)) and seen[0] is eng.section:
        r = seen[1]
        if hit := _finished(r.build_dir.parent, r.engine, r.key):  # still finished there (its files, not the source)
            return hit
    r = _ensure_built(eng, runner, out, force, extra_flags, jobs)
    if not extra_flags:
        _resolved[at] = (eng.section, r)
    return r


def _ensure_built(eng, runner, out, force: bool, extra_flags: list[str] | None, jobs: int | None) -> BuildResult:
    p = plan(eng, extra_flags, jobs)
    if not force and (hit := _cached(p)):
        return hit
    with locked(p.dir.parent / f"{p.key}.lock", on_wait=None if force else lambda f: out.info(f"waiting for another build of {eng.name} ({p.key}) to finish")):
        if not force and (hit := _cached(p)):
            return hit
        return _build(eng, p, runner, out)


def _build(eng, p: BuildPlan, runner, out) -> BuildResult:
    refuse_while_held(f"the build of {p.engine}")
    e, profile = eng.section, eng.profile
    t0 = time.monotonic()
    (p.dir / OK_MARKER).unlink(missing_ok=True)  # first: a rebuild killed while removing the old one never leaves it "good"
    shutil.rmtree(p.dir, ignore_errors=True)
    p.dir.mkdir(parents=True)
    pristine = srcmod.materialize(e.source, profile.sources[e.source], runner, out)
    out.info(f"building {p.engine} ({p.key}): copying source from {pristine}")
    srcmod.copy_tree(pristine, p.dir / "src")
    series, fixups, mirror_doc = _patch(runner, p, str(p.dir / "src"), e, out)
    # the scratch repo only served the tree hash; without it llama.cpp's build-info does not run git on it
    shutil.rmtree(p.dir / "src" / ".git", ignore_errors=True)
    log_path = p.dir / "build.log"
    with _compile_slot(p, out), open(log_path, "w", buffering=1) as log:
        log.write("$ " + " ".join(p.configure) + "\n")
        res = runner.run(p.configure, env=cmake.ccache_env(p.dir.parent), timeout=1800, on_line=lambda s, ln: log.write(ln + "\n"))
        if not res.ok:
            raise InfraError(f"cmake configure of {p.engine} failed (log: {log_path}): {res.tail(3)}")
        unused = cmake.parse_unused_variables(res.stdout + "\n" + res.stderr)
        if unused:
            out.warn(f"{p.engine}: this source does not use the CMake variable(s) {', '.join(unused)} (a typo or a renamed option?)")
        log.write("$ " + " ".join(p.build) + "\n")
        _compile(p, runner, out, log, log_path)
    bin_dir = p.dir / "build" / "bin"
    binaries = {}
    for t in p.targets:
        exe = bin_dir / t
        if not exe.is_file():
            raise InfraError(f"build of {p.engine} produced no {t} in {bin_dir}")
        binaries[t] = patches.sha256(exe)
    # the series may only touch a shared library (common, llama, ggml): hash those too
    libraries = {f.name: patches.sha256(f) for f in sorted(bin_dir.glob("lib*.so*")) if f.is_file() and not f.is_symlink()}
    prov = {
        "engine": p.engine,
        "key": p.key,
        "source": p.source.info,
        "series_dir": p.series_dir,
        "patches": series.patches,
        "tree_before": series.tree_before,
        "tree_after": series.tree_after,
        "series_digest": patches.digest_of(series.patches) if p.series_dir else None,
        "series_selection": selection(e).describe() if selection(e) else None,
        "expected_tree": mirror_doc["expected_tree"],
        "expected_from": mirror_doc["expected_from"],
        "preimage_mismatch": len({m["patch"] for m in series.preimage_mismatch}),
        "fixups_dir": p.fixups_dir,
        "fixups": fixups.patches,
        "tree_built": fixups.tree_after,
        "cuda_archs": e.cuda_archs,
        "cmake_configure": p.configure,
        "cmake_build": p.build,
        "cmake_unused": unused,
        "toolchain": {**toolchain(True), **p.toolchain},
        "binaries": binaries,
        "libraries": libraries,
        "bin_dir": str(bin_dir),
        "wall_s": round(time.monotonic() - t0, 1),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }

    atomic_write_json(p.dir / "build.json", prov)
    atomic_write_text(p.dir / OK_MARKER, p.key + "\n")
    out.info(f"built {p.engine} in {prov['wall_s']} s -> {bin_dir}")
    return BuildResult(p.engine, p.key, bin_dir, p.dir / "build", prov, False)


def compile_slot_path(p: BuildPlan) -> Path:
    return p.dir.parent / f"compile-{sha256(p.source.identity).hexdigest()[:16]}.lock"


@contextlib.contextmanager
def _compile_slot(p: BuildPlan, out):
    """One compile at a time per source (a pin, an sdist): two builds of one source at once
    both miss ccache for every object they share (a pin's stock build and a bisection's good
    end, say); one after the other, the second takes the first's objects from ccache, and
    the total is the same or less, since each build already uses every core.  Builds of other
    sources share little and do not wait.  Held by a lock file, so a killed build frees it."""

    def waiting(path):
        try:
            holder = path.read_text().strip() or "another parity"
        except OSError:
            holder = "another parity"
        out.info(f"{p.engine} ({p.key}): waiting for the build compiling now ({holder}): one compile at a time per source, so this one reuses its objects")

    with locked(compile_slot_path(p), on_wait=waiting) as path:
        path.write_text(f"{p.engine} {p.key}, pid {os.getpid()}\n")  # the holder's note (the lock is on the file's inode, not its text)
        yield


def _patch(runner, p: BuildPlan, workdir: str, e, out) -> tuple[patches.SeriesResult, patches.SeriesResult, dict]:
    """The engine's series, its mirror invariant (pin + series == the fork's tree), then the
    source's fixups (not part of the invariant)."""

    sel = selection(e)
    series = patches.apply_series(runner, workdir, p.series_dir, out, sel=sel)
    if sel:
        doc = {"mirror_ok": None, "expected_tree": None, "expected_from": f"a variant of the series ({sel.describe()}): no mirror to check", "differing": []}
    elif p.series_dir:
        exp = mirror.expectation(e, runner, patches.digest_of(series.patches), series.tree_before)
        doc = mirror.verify(runner, workdir, series.tree_after, exp)
    else:
        doc = {"mirror_ok": None, "expected_tree": None, "expected_from": "no series", "differing": []}
    return series, patches.apply_series(runner, workdir, p.fixups_dir, out, tree_before=series.tree_after, what="fixups"), doc


def _compile(p: BuildPlan, runner, out, log, log_path) -> None:
    with out.progress(transient=True) as prog:
        task = prog.add_task(f"build {p.engine}", total=None, status="")

        def on_line(stream, line):
            log.write(line + "\n")
            nm = cmake.parse_progress(line)
            if nm:
                prog.update(task, completed=nm[0], total=nm[1], status=line.split("] ", 1)[-1][-50:])

        res = runner.run(p.build, env=cmake.ccache_env(p.dir.parent), timeout=4 * 3600, on_line=on_line)
    if not res.ok:
        raise InfraError(f"build of {p.engine} failed (log: {log_path}): {res.tail(4)}")


def tool_path(eng, tool: str, runner, out) -> str:
    """A tool binary of an engine: prebuilt bin_dir first, else the cached build."""
    if eng.section.bin_dir:
        path = Path(eng.section.bin_dir) / tool
    else:
        path = ensure_built(eng, runner, out).bin_dir / tool
    if not path.is_file():
        raise UsageError(f"engine {eng.name}: {tool} not found at {path}")
    return str(path)


def dry_tool_path(eng, tool: str, runner, out) -> str:
    """tool_path for a dry run, which builds nothing: the cached build's path, or a placeholder
    (also when the engine's source is not on this machine, e.g. the GB10's LocalAI checkout)."""
    if eng.section.bin_dir:
        return tool_path(eng, tool, runner, out)
    try:
        hit = _cached(plan(eng))
    except UsageError as e:
        return f"<{tool} of {eng.name}: {e}>"
    return str(hit.bin_dir / tool) if hit else f"<{tool} of {eng.name}: built on the first real run>"


def llama_engines(profile) -> list[str]:
    """The engines built from a source (prebuilt and served-only kinds have none)."""
    return [n for n, e in profile.engines.items() if getattr(e, "source", None)]


def check_series(eng, runner, out) -> dict:
    """Apply the series (then the fixups) on a scratch copy of the pin and check the mirror invariant."""
    import tempfile

    e = eng.section
    p = plan(eng)
    pristine = srcmod.materialize(e.source, eng.profile.sources[e.source], runner, out)
    with tempfile.TemporaryDirectory(prefix="parity-series-") as tmp:
        work = Path(tmp) / "src"
        srcmod.copy_tree(pristine, work)
        res, fixups, doc = _patch(runner, p, str(work), e, out)
    mismatch = sorted({m["patch"] for m in res.preimage_mismatch})
    return {
        "engine": eng.name,
        "pin": p.source.info.get("pin"),
        "series_dir": p.series_dir,
        "series_digest": patches.digest_of(res.patches) if p.series_dir else None,
        "patches": res.patches,
        "fixups": fixups.patches,
        "tree_built": fixups.tree_after,
        "tree_before": res.tree_before,
        "tree_after": res.tree_after,
        "expected_tree": doc["expected_tree"],
        "expected_from": doc["expected_from"],
        "mirror_ok": doc["mirror_ok"],
        "preimage_mismatch": mismatch,
    }


def check_series_lines(r: dict) -> list[str]:
    """`parity build --check-series` in words: pin tree, series digest, resulting tree, verdict."""
    verdict = {None: f"no expected tree ({r['expected_from']})", True: f"OK: matches {r['expected_from']}", False: "MISMATCH"}[r["mirror_ok"]]
    lines = [
        f"{r['engine']}: pin {r.get('pin') or '-'}",
        f"  pin tree       {r['tree_before']}",
        f"  series         {r['series_dir'] or '(none: stock)'}" + (f", {len(r['patches'])} patches, digest {r['series_digest']}" if r["series_dir"] else ""),
        f"  resulting tree {r['tree_after']}",
    ]
    if r["fixups"]:
        lines.append(f"  + {len(r['fixups'])} fixup(s) -> built tree {r['tree_built']}")
    if r.get("preimage_mismatch"):
        lines.append(f"  warning: {len(r['preimage_mismatch'])} patches carry index preimage ids that differ from their files (git apply ignores them)")
    lines.append(f"  verdict        {verdict}" if r["series_dir"] else "  verdict        no series to mirror")
    return lines


def record_series_tree(eng, runner, out) -> dict:
    """check_series, then record its resulting tree for this series digest and pin tree in the
    series registry (a mismatch against a fork or a constant is refused by check_series)."""

    r = check_series(eng, runner, out)
    if not r["series_dir"]:
        raise UsageError(f"engine {eng.name} has no series: nothing to record")
    how = f"matched {r['expected_from']}" if r["mirror_ok"] else "parity build --check-series --record (no fork to compare with)"
    r["recorded_in"] = str(mirror.record(r["series_digest"], r["tree_before"], r["tree_after"], len(r["patches"]), how))
    return r


def campaign_step(ctx, options: dict) -> dict:
    """kind: build -- options {engines: [names]} (default: every buildable engine)."""
    names = options.get("engines") or llama_engines(ctx.profile)
    if not isinstance(names, list):
        raise ConfigError("campaign", "with.engines", "must be a list of engine names")
    result = {}
    for n in names:
        r = ensure_built(target(ctx.profile, n), ctx.runner, ctx.out, force=bool(options.get("force")))
        result[n] = {"key": r.key, "bin_dir": str(r.bin_dir), "cached": r.cached, "tree_after": r.provenance.get("tree_after")}
        if ctx.run:
            prev = ctx.run.read_json("builds.json") if (ctx.run.path / "builds.json").is_file() else {}
            ctx.run.write_json("builds.json", {**(prev or {}), n: r.provenance})
    return result


class BuildRequest(msgspec.Struct):
    """What `parity build` asks for.  mode: build | check-series | print | detach | status."""

    engines: list[str] = msgspec.field(default_factory=list)  # empty: every llama engine of the profile
    defines: list[str] = msgspec.field(default_factory=list)  # VAR=VALUE, passed as -DVAR=VALUE
    mode: str = "build"
    force: bool = False
    jobs: int | None = None
    profile: str | None = None  # how the profile was named (a detached build re-runs with it)
    record: bool = False  # check-series: record the resulting tree per series digest
    fork: str | None = None  # check-series: the fork checkout (engines.NAME.fork for every engine asked)
    fork_ref: str | None = None


def build(ctx, req: BuildRequest):
    """`parity build`: build (or check, print, detach, poll) the requested engines; plain data back."""

    if req.mode == "status":
        return bg.detached_status()
    names = req.engines or llama_engines(ctx.profile)
    if not names:
        raise UsageError(f"profile {ctx.profile.name} has no llama engine to build")
    engines = [target(ctx.profile, n) for n in names]
    flags = []
    for d in req.defines:
        if "=" not in d:
            raise UsageError(f"-D {d}: expected VAR=VALUE")
        flags.append(f"-D{d}")
    if req.mode == "detach":
        return bg.start_detached(detached_args(req), ctx.runner)
    if req.mode == "print":
        plans = []
        for eng in engines:
            p = plan(eng, flags, req.jobs)
            plans.append({"engine": eng.name, "key": p.key, "dir": str(p.dir), "series_dir": p.series_dir, "patches": p.series, "configure": p.configure, "build": p.build, "cached": (p.dir / OK_MARKER).exists()})
        return plans
    if req.mode != "check-series" and (req.record or req.fork or req.fork_ref):
        raise UsageError("--record, --fork and --fork-ref go with --check-series")
    if req.mode == "check-series":
        for eng in engines:
            if req.fork:
                eng.section.fork = expand_path(req.fork)
            if req.fork_ref:
                eng.section.fork_ref = req.fork_ref
        check = record_series_tree if req.record else check_series
        return [check(eng, ctx.runner, ctx.out) for eng in engines if not req.record or eng.section.series]
    results = []
    for eng in engines:
        r = ensure_built(eng, ctx.runner, ctx.out, force=req.force, extra_flags=flags, jobs=req.jobs)
        results.append({"engine": eng.name, "key": r.key, "bin_dir": str(r.bin_dir), "cached": r.cached, "wall_s": r.provenance.get("wall_s"), "tree_after": r.provenance.get("tree_after")})
    return results


def detached_args(req: BuildRequest) -> list[str]:
    """The same build, as `parity` arguments for the background process."""
    import os

    args = ["build"]
    if req.profile:
        args += ["--profile", os.path.abspath(req.profile) if os.path.exists(req.profile) else req.profile]
    for n in req.engines:
        args += ["--engine", n]
    for d in req.defines:
        args += ["-D", d]
    if req.force:
        args.append("--force")
    if req.jobs:
        args += ["-j", str(req.jobs)]
    return args
