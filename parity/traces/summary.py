"""Per arm of a run, what its log says for the trace envs its env turns on: each format's line
count, the tags it carried and a histogram of every field (numbers with min / median / max), the
aggregate line of a once-at-exit trace as printed, and the series' [L5INSTR] exit counters with
the graph reuse they give.

[L5INSTR] is printed once, when the process exits (patches 0029/0040): a serving arm's figure
covers every point its server served, so a point has its own graph reuse only when its server
served it alone (summary.json rows carry graph_reuse_pct then); a bench block's covers the
block's points."""

from __future__ import annotations

import json
import re
import statistics
from collections import Counter
from pathlib import Path

from parity.gates.completion import series_counters
from parity.results.model import PointRow, point_rows
from parity.traces.formats import TraceFormat, trace_envs

LIMIT = 10  # values a field's histogram lists; the rest are counted as `other`


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def histograms(records: list[dict], limit: int = LIMIT) -> dict:
    """{field: {n, distinct, values: [[value, count], ...] (most first), other, min, median, max}};
    min / median / max only for a field that is a number on every line; dict fields left out."""
    out: dict = {}
    for key in dict.fromkeys(k for r in records for k in r):
        vals = [r[key] for r in records if key in r and not isinstance(r[key], dict)]
        if not vals:
            continue
        counts = sorted(Counter(vals).items(), key=lambda kv: (-kv[1], str(kv[0])))
        top = counts[:limit]
        h = {
            "n": len(vals),
            "distinct": len(counts),
            "values": [[v, c] for v, c in top],
            "other": len(vals) - sum(c for _, c in top),
        }
        if all(_number(v) for v in vals):
            h.update(min=min(vals), median=statistics.median(vals), max=max(vals))
        out[key] = h
    return out


def summarize_format(fmt: TraceFormat, lines: list[str], value: str) -> dict:
    recs = [r for ln in lines if (r := fmt.parse(ln)) is not None]
    tags = dict(sorted(Counter(t for t, _ in recs).items()))
    out = {**fmt.describe(), "value": value, "lines": len(recs), "tags": tags}
    if fmt.once:
        out["last"] = recs[-1][1] if recs else None
    else:
        out["fields"] = histograms([f for _, f in recs])
    if not recs:
        out["note"] = (
            f"{fmt.env}={value} was set, but the log holds no line of it "
            "(the build does not print it, or no call reached it)"
        )
    return out


def graph_reuse(counters: dict | None) -> dict | None:
    """{reused, steps, pct} from the [L5INSTR] counters (None: no graph_reuse field: before 0040)."""
    if not counters or "graph_reuse" not in counters:
        return None
    reused, steps = counters["graph_reuse"]
    return {"reused": reused, "steps": steps, "pct": round(100.0 * reused / steps, 2) if steps else None}


def summarize(text: str, env: dict[str, str]) -> dict:
    """One log: each trace env the env turns on, summarized, and the series' exit counters."""
    lines = text.splitlines()
    fmts = trace_envs(env)
    counters = series_counters(text)
    return {
        "traces": [summarize_format(f, lines, env[n]) for n, f in fmts.items()],
        "series_counters": counters,
        "graph_reuse": graph_reuse(counters),
    }


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def arm_env(run_dir: str | Path, engine: str, repeat: int) -> dict[str, str]:
    """The env a serving arm's server started with (servers/<engine>-r<k>.json, parity's record)."""
    try:
        doc = json.loads((Path(run_dir) / "servers" / f"{engine}-r{repeat}.json").read_text())
    except (OSError, ValueError):
        return {}
    env = doc.get("env") if isinstance(doc, dict) else None
    return {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {}


def worth_keeping(s: dict) -> bool:
    return bool(s["traces"]) or s["series_counters"] is not None


def for_serving(run_dir: str | Path, arms: list[dict], texts: dict | None = None) -> list[dict]:
    """summary.json "traces": per serving arm with a trace env set or the series' counters printed,
    its server log's summary (arms: the sweep's arms with their PointRows; texts: {(engine, repeat):
    log text} already read)."""
    out = []
    for a in arms:
        e, r = a["engine"], a["repeat"]
        name = f"servers/{e}-r{r}.log"
        text = (texts or {}).get((e, r))
        text = text if text is not None else _read(Path(run_dir) / name)
        env = arm_env(run_dir, e, r)
        s = summarize(text or "", env)
        if text is None and trace_envs(env):
            s["note"] = f"no log {name} to read"
        if not worth_keeping(s) and "note" not in s:
            continue
        points = [row.n for row in point_rows(a.get("rows") or [])]
        out.append({"engine": e, "repeat": r, "log": name, "points": points, **s})
    return out


def one_point_reuse(arm_traces: list[dict], rows: list[PointRow]) -> None:
    """graph_reuse_pct on the rows whose server served that point alone (in place)."""
    by_arm = {(t["engine"], t["repeat"]): t for t in arm_traces if t.get("graph_reuse")}
    for (e, r), t in by_arm.items():
        mine = [row for row in rows if row.engine == e and row.repeat == r]
        if len(mine) == 1 and t["graph_reuse"]["pct"] is not None:
            mine[0].put("graph_reuse_pct", t["graph_reuse"]["pct"])


def for_bench(run_dir: str | Path, arms: list[str], envs: dict[str, dict]) -> list[dict]:
    """bench.json "traces": per arm and block, the llama-batched-bench log its rows came from
    (bench-<arm>-b<k>.log, or its last -retry<j>.log), summarized; envs: arm -> the env it ran with."""
    out = []
    d = Path(run_dir)
    for arm in arms:
        env = {str(k): str(v) for k, v in (envs.get(arm) or {}).items()}
        name = re.compile(rf"bench-{re.escape(arm)}-b(\d+)(?:-retry(\d+))?\.log")
        last: dict[int, tuple[int, Path]] = {}
        for p in d.glob(f"bench-{glob_escape(arm)}-b*.log"):
            if (m := name.fullmatch(p.name)) is not None:
                block, retry = int(m[1]), int(m[2] or 0)
                if block not in last or retry > last[block][0]:
                    last[block] = (retry, p)
        for block, (_, p) in sorted(last.items()):
            s = summarize(_read(p) or "", env)
            if worth_keeping(s):
                out.append({"arm": arm, "block": block, "log": p.name, **s})
    return out


def glob_escape(s: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in s)
