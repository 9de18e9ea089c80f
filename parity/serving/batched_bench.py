"""The llama-batched-bench tool: its markdown table -> rows; a partial table is a failure."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from parity.config import positive_int
from parity.errors import InfraError, UsageError
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


@dataclass
class BenchRequest:
    """What `parity bench` (or a campaign's bench step) asks for; None keeps serving.bench's value."""

    engine: str | None = None
    model: str | None = None
    npp: list[int] | None = None
    ntg: list[int] | None = None
    npl: list[int] | None = None
    allow_env: list[str] = field(default_factory=list)
    # the A/B (parity.serving.bench_ab): any of these makes blocks of runs
    engines: list[str] | None = None
    aa: bool = False
    repeat: int | None = None
    until_ci: float | None = None
    max_repeats: int | None = None
    budget_s: float | None = None
    order: str | None = None

    def blocks(self) -> bool:
        """Blocks of runs (an A/B, an A/A, or one engine's repeats) rather than the single run."""
        return bool((self.engines and len(self.engines) > 1) or self.aa or self.repeat is not None or self.until_ci is not None or self.max_repeats is not None or self.budget_s is not None)

    def ab_request(self) -> "BenchRequest":
        """The same request with --engine folded into engines (what parity.serving.bench_ab reads)."""
        from dataclasses import replace

        if self.engine and self.engines:
            raise UsageError("give --engine or --engines, not both")
        return replace(self, engine=None, engines=list(self.engines or ([self.engine] if self.engine else [])), allow_env=list(self.allow_env or []))


def default_engine(ctx) -> str | None:
    s = ctx.profile.serving
    return next((e for e in s.engines if ctx.profile.engine(e).kind == "llama"), None)


def bench(ctx, req: BenchRequest) -> dict:
    """`parity bench`: a run directory with bench.json (one run, or blocks: parity.serving.bench_ab)."""
    from parity.context import run_session

    if req.blocks():
        from parity.serving.bench_ab import run_ab

        ab = req.ab_request()
        if not ab.engines:
            ab.engines = [e for e in [default_engine(ctx)] if e]
        if not ab.engines:
            raise UsageError("no llama engine to bench (serving.engines or --engines)")
        from parity.serving.bench_ab import arms_for

        arms_for(ab.engines, ab.aa)  # refuse a bad arm list before the run directory exists
        with run_session(ctx, "bench", "bench-ab" if len(ab.engines) > 1 or ab.aa else "bench"):
            doc = run_ab(ctx, ab)
            return {"run_dir": str(ctx.run.path), **doc}
    if req.engines:
        req.engine = req.engines[0]
    with run_session(ctx, "bench", "bench"):
        doc = run_bench(ctx, req.engine, req.model, req.npp, req.ntg, req.npl, req.allow_env)
        return {"run_dir": str(ctx.run.path), **doc}


def run_bench(ctx, engine=None, model=None, npp=None, ntg=None, npl=None, allow_env=()) -> dict:
    from parity.engine.build import tool_path, write_builds_json
    from parity.serving.envpolicy import check_bench_env
    from parity.gates.run import path_env, resolve_model
    from parity.gpu.hardware import write_hardware
    from parity.gpu.lock import held_lock

    s = ctx.profile.serving
    b = s.bench
    engine = engine or default_engine(ctx)
    if not engine:
        raise UsageError("no llama engine to bench (serving.engines or --engine)")
    if ctx.profile.engine(engine).kind != "llama":
        raise UsageError(f"engine {engine} is {ctx.profile.engine(engine).kind}: llama-batched-bench needs a llama engine")
    npp, ntg, npl = npp or b.npp, ntg or b.ntg, npl or b.npl
    for name, vals in (("--npp", npp), ("--ntg", ntg), ("--npl", npl)):  # campaign steps skip the CLI's parsing
        if not all(map(positive_int, vals)):
            raise UsageError(f"{name}: expected positive integers, got {vals!r}")
    if problem := split_kv_problem(npp, ntg, npl, b):
        raise UsageError(problem)
    env = path_env(ctx, engine, None)
    check_bench_env(env, ctx.profile.policy, allow_env)
    model_file = resolve_model(ctx, model or s.model)[1]
    cmd = argv(tool_path(ctx.profile, engine, "llama-batched-bench", ctx.runner, ctx.out), model_file, npp, ntg, npl, b)
    with held_lock(ctx):
        if ctx.run:
            write_hardware(ctx)
            write_builds_json(ctx, [engine])
        def log(attempt, res):
            if ctx.run:
                ctx.run.write_text(f"bench-{engine}{f'-retry{attempt}' if attempt else ''}.log", res.stdout + "\n" + res.stderr)

        res, rows, retried = run_complete(ctx.runner, cmd, env, b, npp, ntg, npl, log, ctx.out.warn)
    doc = {"kind": "bench", "engine": engine, "model": model or s.model, "command": cmd, "env": env, "rows": rows, "header": parse_header(res.stdout), "retried": retried}
    from parity.efficiency import peak, roofline  # efficiency hook: % of roofline per row

    doc["efficiency"] = roofline.bench(rows, model_file, peak.load(ctx.run.path) if ctx.run else None, engine=engine)
    if ctx.run:
        write_bench(ctx.run, doc)
    return doc


STEP_OPTIONS = {"engine", "model", "npp", "ntg", "npl", "allow_env", "engines", "aa", "repeat", "until_ci", "max_repeats", "budget_s", "order"}


def campaign_step(ctx, options: dict) -> dict:
    """kind: bench -- options {engine, model, npp, ntg, npl, allow_env}; blocks (an A/B, an A/A,
    repeats) with {engines (list or 'A,B'), aa, repeat, until_ci, max_repeats, budget_s, order}."""
    from parity.campaign import check_step_options

    check_step_options("bench", options, STEP_OPTIONS)
    engines = options.get("engines")
    if isinstance(engines, str):
        options = {**options, "engines": [x.strip() for x in engines.split(",") if x.strip()]}
    req = BenchRequest(**options)
    if req.blocks():
        from parity.serving.bench_ab import run_ab

        ab = req.ab_request()
        ab.engines = ab.engines or [e for e in [default_engine(ctx)] if e]
        doc = run_ab(ctx, ab)
        return {"engines": doc["engines"], "reference": doc["reference"], "blocks": doc["blocks"], "stop": doc["stop"],
                "paired": [{k: p[k] for k in ("engine", "reference", "pp", "tg", "b", "metric", "ratio", "low", "high", "outcome")} for p in doc["paired"]]}  # fmt: skip
    if req.engines:
        req.engine = req.engines[0]
    doc = run_bench(ctx, req.engine, req.model, req.npp, req.ntg, req.npl, req.allow_env or ())
    from parity.efficiency.roofline import lines

    for line in lines(doc.get("efficiency")):
        ctx.out.info(line)
    return {"engine": doc["engine"], "rows": doc["rows"], "efficiency": doc.get("efficiency")}
