"""The llama-batched-bench tool: its markdown table -> rows; a partial table is a failure."""

from __future__ import annotations

import re

from parity.errors import InfraError

COLS = ["pp", "tg", "b", "n_kv", "t_pp", "s_pp", "t_tg", "s_tg", "t", "s"]
_HEADER = re.compile(r"^\|\s*PP\s*\|\s*TG\s*\|\s*B\s*\|\s*N_KV\s*\|")
_FAIL = ("failed to find a memory slot", "llama_decode() failed", "failed to decode", "error:")


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


def argv(binary: str, model: str, npp, ntg, npl, b) -> list[str]:
    j = lambda xs: ",".join(str(x) for x in xs)  # noqa: E731
    return [binary, "-m", model, "-c", str(b.ctx), "-b", str(b.batch), "-ub", str(b.ubatch), *b.extra_args, "-npp", j(npp), "-ntg", j(ntg), "-npl", j(npl)]


def run_bench(ctx, engine=None, model=None, npp=None, ntg=None, npl=None, allow_env=()) -> dict:
    from parity.engine.build import tool_path, write_builds_json
    from parity.envpolicy import check_bench_env
    from parity.gates.run import path_env, resolve_model
    from parity.hardware import write_hardware
    from parity.lock import held_lock

    s = ctx.profile.serving
    b = s.bench
    engine = engine or next((e for e in s.engines if ctx.profile.engine(e).kind == "llama"), None)
    if not engine:
        raise InfraError("no llama engine to bench")
    env = path_env(ctx, engine, None)
    check_bench_env(env, ctx.profile.policy, allow_env)
    model_file = resolve_model(ctx, model or s.model)[1]
    npp, ntg, npl = npp or b.npp, ntg or b.ntg, npl or b.npl
    cmd = argv(tool_path(ctx.profile, engine, "llama-batched-bench", ctx.runner, ctx.out), model_file, npp, ntg, npl, b)
    if ctx.run:
        write_hardware(ctx)
        write_builds_json(ctx, [engine])
    with held_lock(ctx):
        res = ctx.runner.run(cmd, env=env, timeout=b.timeout_s)
    text = res.stdout + "\n" + res.stderr
    if ctx.run:
        ctx.run.write_text(f"bench-{engine}.log", text)
    rows = parse(res.stdout)
    expected = len(npp) * len(ntg) * len(npl)
    why = failure(text)
    if res.timed_out or res.rc != 0 or why or len(rows) != expected:
        detail = why or (f"timed out after {b.timeout_s:.0f} s" if res.timed_out else f"exit {res.rc}")
        raise InfraError(f"llama-batched-bench failed ({len(rows)}/{expected} table rows; a partial table is not a result): {detail}")
    doc = {"engine": engine, "model": model or s.model, "command": cmd, "env": env, "rows": rows}
    if ctx.run:
        ctx.run.write_json("bench.json", doc)
    return doc


def campaign_step(ctx, options: dict) -> dict:
    """kind: bench -- options {engine, model, npp, ntg, npl}."""
    doc = run_bench(ctx, options.get("engine"), options.get("model"), options.get("npp"), options.get("ntg"), options.get("npl"), options.get("allow_env", ()))
    return {"engine": doc["engine"], "rows": doc["rows"]}
