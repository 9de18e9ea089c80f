"""From a confirmed change point to the bisection that names its culprit: what changed between
the last run before the step and the first after it (the pin or the patch series of the engine
the series measures, or of its reference), and the exact `parity bisect` command that searches
that change.  Pure: the plan only; parity.history.changes runs it with --bisect."""

from __future__ import annotations

import json
import re
import shlex

COMMIT = re.compile(r"^[0-9a-f]{7,40}$")
BENCH_POINT = re.compile(r"PP=(\d+) TG=(\d+) B=(\d+)")
# the llama-batched-bench throughput a bisection probe measures for each series metric
PROBE_METRIC = {"s_tg": "s_tg", "s_pp": "s_pp", "s": "s", "decode_agg_tps": "s_tg", "decode_perseq_tps": "s_tg", "steady_decode_tps": "s_tg", "tpot_ms": "s_tg",
                "itl_p50_ms": "s_tg", "prefill_tps": "s_pp", "ttft_mean_ms": "s_pp", "ttft_p50_ms": "s_pp", "agg_tps": "s"}  # fmt: skip


def patch_number(name: str) -> str | None:
    m = re.match(r"^(\d+)-", name or "")
    return m.group(1) if m else None


def series_range(before: list, after: list) -> tuple[str, str] | None:
    """(first, last) patch numbers of the after-series from its first patch that is new or whose
    content changed, to its end; None when the after-series only lost patches."""
    had = {tuple(p) for p in before}
    changed = [p for p in after if tuple(p) not in had]
    if not changed:
        return None
    first, last = patch_number(changed[0][0]), patch_number(after[-1][0])
    return (first, last) if first and last else None


def _patches(build: dict) -> list:
    try:
        return json.loads(build.get("patches") or "[]")
    except ValueError:
        return []


def what_changed(before: dict, after: dict) -> list[str]:
    """Words for each provenance field that differs between two builds of one engine."""
    out = []
    if before.get("pin") != after.get("pin"):
        out.append(f"pin {before.get('pin')} -> {after.get('pin')}")
    if before.get("series_digest") != after.get("series_digest"):
        out.append(f"series {str(before.get('series_digest'))[:12]} -> {str(after.get('series_digest'))[:12]}")
    if before.get("flags") != after.get("flags"):
        out.append(f"flags {before.get('flags')} -> {after.get('flags')}")
    return out


def probe_options(point: str, n, metric: str, model: str | None, step_pct: float) -> list[str]:
    """--metric, --min-delta-pct (half the step: a probe that carries the step is slower than that,
    one without it is not), the batched-bench point, the model."""
    args = ["--metric", PROBE_METRIC.get(metric, "s_tg"), "--min-delta-pct", f"{max(0.5, round(abs(step_pct) / 2, 1)):g}"]
    m = BENCH_POINT.fullmatch(point or "")
    if m:
        args += ["--npp", m.group(1), "--ntg", m.group(2), "--npl", m.group(3)]
    elif isinstance(n, int) and n > 0:
        args += ["--npl", str(n)]
    if model:
        args += ["-m", model]
    return args


def plan(change: dict, builds_before: dict, builds_after: dict, run_after: dict) -> dict:
    """{over, engine, changed (words), commands: [argv...], command (the first, shell-quoted), why}.
    change: series (engine, reference, point, n, metric, workload), step_pct."""
    s = change["series"]
    engines = [e for e in (s["engine"], s.get("reference")) if e]
    changed = {e: what_changed(builds_before.get(e) or {}, builds_after.get(e) or {}) for e in engines if builds_before.get(e) and builds_after.get(e)}
    moved = [e for e in engines if changed.get(e)]
    out = {"over": None, "engine": None, "changed": {e: w for e, w in changed.items() if w}, "commands": [], "command": None, "why": ""}
    if not moved:
        missing = [e for e in engines if not (builds_before.get(e) and builds_after.get(e))]
        same = [e for e in engines if e not in missing]
        parts = ([f"the builds of {' and '.join(same)} are the same on both sides (pin, series, flags)"] if same else []) + ([f"no builds.json provenance for {', '.join(missing)} on both sides"] if missing else [])
        out["why"] = "; ".join(parts) + ": nothing to bisect over; the step came from elsewhere (host, driver, model, load): see the runs' provenance"
        return out
    engine = moved[0]
    b, a = builds_before[engine], builds_after[engine]
    model = run_after.get("model")
    common = ["--engine", engine, *probe_options(s.get("point"), s.get("n"), s["metric"], model, change["step_pct"])]
    profile = run_after.get("profile")
    tail = ["-p", profile] if profile else []
    cmds, why = [], []
    if b.get("pin") != a.get("pin"):
        if COMMIT.match(str(b.get("pin") or "")) and COMMIT.match(str(a.get("pin") or "")):
            cmds.append(["parity", "bisect", "--over", "pin", "--criterion", "metric", "--good", b["pin"], "--bad", a["pin"], *common, *tail])
        else:
            why.append(f"{engine}'s source moved from {b.get('pin')} to {a.get('pin')}, not two commits of one repository: no pin bisection")
    if b.get("series_digest") != a.get("series_digest"):
        rng = series_range(_patches(b), _patches(a))
        if rng:
            series = ["--series", a["series_dir"]] if a.get("series_dir") else []
            cmds.append(["parity", "bisect", "--over", "series", "--criterion", "metric", *series, "--first", rng[0], "--last", rng[1], *common, *tail])
        else:
            why.append(f"{engine}'s series only lost patches ({len(_patches(b))} -> {len(_patches(a))}): measure the removed ones with `parity ab --series-without NNNN`")
    out.update(over="pin" if cmds and cmds[0][3] == "pin" else "series" if cmds else None, engine=engine, commands=cmds, command=shlex.join(cmds[0]) if cmds else None,
               why="; ".join(why) or f"{engine}: " + "; ".join(changed[engine]))  # fmt: skip
    return out
