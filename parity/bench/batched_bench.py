"""The llama-batched-bench tool: its markdown table -> rows; a partial table is a failure."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from parity import session
from parity.context import Run
from parity.engines import with_binaries
from parity.engines.bound import Engine, bind
from parity.options import positive_int
from parity.errors import InfraError, UsageError
from parity.efficiency import roofline
from parity.engines.envpolicy import check_bench_env
from parity.gpu import bandwidth as peak
from parity.results import write_bench

COLS = ["pp", "tg", "b", "n_kv", "t_pp", "s_pp", "t_tg", "s_tg", "t", "s"]
_HEADER = re.compile(r"^\|\s*PP\s*\|\s*TG\s*\|\s*B\s*\|\s*N_KV\s*\|")
_FAIL = ("failed to find a memory slot", "llama_decode() failed", "failed to decode", "failed to add token", "GGML_ASSERT", "error:")


def parse(text: str) -> list[dict]:
    rows, in_table = [], False
    for line in text.splitlines():
        s = line.strip()
        if _HEADER.match(s):
            in_table = True
            continue
        if in_table and s.startswith("|"):
            cells = [c.strip() for c in s.strip("|").split("|")]
            if len(cells) != len(COLS) or set(cells[0]) <= {"-", ":"}:
                continue
            try:
                vals = [int(c) if i < 4 else float(c) for i, c in enumerate(cells)]
            except ValueError:
                continue
            rows.append(dict(zip(COLS, vals)))
    return rows


def failure(text: str) -> str | None:
    for line in text.splitlines():
        if any(f in line for f in _FAIL):
            return line.strip()
    return None


def parse_header(text: str) -> dict:
    """The `llama_batched_bench: n_kv_max = 16384, n_batch = ...` line (older builds: `main: n_kv_max = ...`) -> {name: int}."""
    m = re.search(r"^\s*(?:llama_batched_bench|main): (n_kv_max = .*)", text, re.M)
    return {k: int(v) for k, v in re.findall(r"(\w+) = (-?\d+)", m.group(1))} if m else {}


def missing_rows(rows: list[dict], npp, ntg, npl, header: dict | None = None) -> tuple[list[str], list[str]]:
    """(skipped, lost): PP/TG/B rows absent from the table.  `skipped` ones need
    more KV than n_kv_max (the tool skips them silently); `lost` ones fit, so the
    tool ran them but the line never reached stdout (llama.cpp's async logger can
    drop the tail of stdout at exit)."""
    have = {(r["pp"], r["tg"], r["b"]) for r in rows}
    kv_max = (header or {}).get("n_kv_max")
    skipped, lost = [], []
    for pp in npp:
        for tg in ntg:
            for b in npl:
                if (pp, tg, b) in have:
                    continue
                need = b * (pp + tg)
                (skipped if kv_max is not None and need > kv_max else lost).append(f"PP={pp} TG={tg} B={b}" + (f" (N_KV {need} > n_kv_max {kv_max})" if kv_max is not None and need > kv_max else ""))
    return skipped, lost


def check(res, rows: list[dict], npp, ntg, npl, timeout_s: float) -> None:
    """A partial table is a failure, not a result."""
    text = res.stdout + "\n" + res.stderr
    skipped, lost = missing_rows(rows, npp, ntg, npl, parse_header(res.stdout))
    why = failure(text)
    if res.timed_out or res.rc != 0 or why or skipped or lost:
        expected = len(npp) * len(ntg) * len(npl)
        if why:
            detail = why
        elif res.timed_out:
            detail = f"timed out after {timeout_s:.0f} s"
        elif res.rc != 0:
            detail = f"exit {res.rc}: {res.tail(2)}"
        elif skipped:
            detail = f"skipped {', '.join(skipped)}: raise -c (serving.bench.ctx)"
        else:
            detail = f"rows {', '.join(lost)} missing from the output although they fit (the tool's log tail was lost at exit)"
        raise PartialTable(f"llama-batched-bench failed ({len(rows)}/{expected} table rows; a partial table is not a result): {detail}", lost_only=bool(lost) and not (skipped or why or res.rc or res.timed_out))


class PartialTable(InfraError):
    def __init__(self, msg: str, lost_only: bool = False):
        super().__init__(msg)
        self.lost_only = lost_only  # only output was lost: worth a retry


def split_kv_problem(npp, ntg, npl, b) -> str | None:
    """Without -kvu llama-batched-bench splits its -c cells evenly over max(npl) sequences;
    a sequence longer than its share fails with "failed to find a memory slot" on the first row."""
    args = set(b.extra_args)
    if args & {"-kvu", "--kv-unified", "-pps"} or not npl:
        return None
    share, need = b.ctx // max(npl), max(npp) + max(ntg)
    if share >= need:
        return None
    return (f"serving.bench.ctx {b.ctx} / max npl {max(npl)} = {share} cells per sequence, but npp+ntg needs {need} "
            f"(llama-batched-bench without -kvu splits the KV cache per sequence): raise ctx to {max(npl) * need} or add -kvu to serving.bench.extra_args")


def argv(binary: str, model: str, npp, ntg, npl, b) -> list[str]:
    j = lambda xs: ",".join(str(x) for x in xs)  # noqa: E731
    return [binary, "-m", model, "-c", str(b.ctx), "-b", str(b.batch), "-ub", str(b.ubatch), *b.extra_args, "-npp", j(npp), "-ntg", j(ntg), "-npl", j(npl)]


def run_complete(runner, cmd: list[str], env: dict, b, npp, ntg, npl, log=None, warn=None):
    """(result, rows, retried): runs again, up to b.retries times, while the only problem
    is rows lost from stdout; anything else (a crash, skipped rows) raises at once."""
    retried: list[str] = []
    for attempt in range(1 + max(0, b.retries)):
        res = runner.run(cmd, env=env, timeout=b.timeout_s)
        if log:
            log(attempt, res)
        rows = parse(res.stdout)
        try:
            check(res, rows, npp, ntg, npl, b.timeout_s)
            return res, rows, retried
        except PartialTable as e:
            if attempt >= b.retries or not e.lost_only:
                raise
            retried.append(str(e))
            if warn:
                warn(f"{e}; running it again ({attempt + 1}/{b.retries})")
    raise AssertionError("unreachable")


def default_engine(profile) -> str | None:
    """The first serving engine with llama.cpp binaries of its own."""
    return next(iter(with_binaries(profile, profile.serving.engines)), None)


@dataclass
class SinglePlan:
    """One llama-batched-bench run as checked: its engine (bound), model, shape and env."""

    engine: Engine
    model: str
    npp: list[int]
    ntg: list[int]
    npl: list[int]
    env: dict[str, str]
    settings: Any  # serving.bench (config.BenchConfig): the tool's timeout, retries, flags


def plan_single(profile, engine=None, model=None, npp=None, ntg=None, npl=None, allow_env=()) -> SinglePlan:
    """Every check of one run, touching nothing."""
    s = profile.serving
    b = s.bench
    engine = engine or default_engine(profile)
    if not engine:
        raise UsageError("no llama engine to bench (serving.engines or --engine)")
    if engine not in with_binaries(profile, [engine]):
        raise UsageError(f"engine {engine} is {profile.engine(engine).kind}: llama-batched-bench needs an engine with llama.cpp binaries")
    npp, ntg, npl = npp or b.npp, ntg or b.ntg, npl or b.npl
    for name, vals in (("--npp", npp), ("--ntg", ntg), ("--npl", npl)):  # campaign steps skip the CLI's parsing
        if not vals or not all(map(positive_int, vals)):
            raise UsageError(f"{name}: expected positive integers, got {vals!r}")
    if problem := split_kv_problem(npp, ntg, npl, b):
        raise UsageError(problem)
    eng = bind(profile, engine)
    env = eng.env()
    check_bench_env(env, profile.policy, allow_env)
    session.check_model(profile, model or s.model)
    return SinglePlan(eng, model or s.model, npp, ntg, npl, env, b)


def run_bench(run: Run, p: SinglePlan, model_file: str, locked) -> dict:
    """The run under `locked` (session.measuring of its engine; the caller prepared the build and
    model_file before it); bench.json."""
    b, engine, npp, ntg, npl, env = p.settings, p.engine.name, p.npp, p.ntg, p.npl, p.env
    cmd = argv(p.engine.tool_path("llama-batched-bench", run.runner, run.out), model_file, npp, ntg, npl, b)
    with locked:

        def log(attempt, res):
            run.dir.write_text(f"bench-{engine}{f'-retry{attempt}' if attempt else ''}.log", res.stdout + "\n" + res.stderr)

        res, rows, retried = run_complete(run.runner, cmd, env, b, npp, ntg, npl, log, run.out.warn)
    doc = {"kind": "bench", "engine": engine, "model": p.model, "command": cmd, "env": env, "rows": rows, "header": parse_header(res.stdout), "retried": retried}

    doc["efficiency"] = roofline.bench(rows, model_file, peak.load(run.dir.path), engine=engine)
    write_bench(run.dir, doc)
    return doc
