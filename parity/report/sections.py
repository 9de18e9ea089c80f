"""The report's sections as plain data (rows of cells, already formatted),
read from a RunData; the template only lays them out."""

from __future__ import annotations

import shlex
from pathlib import Path

from parity import stats
from parity.engines import ENGINES
from parity.report.rundata import RunData, values_by_cell
from parity.stats.calibrate import outran_line
from parity.metrics import registry
from parity.metrics.registry import all_metrics, direction
from parity.stats.paired import MAX_BLOCKS_ESTIMATE, METHOD, OUTCOMES, by_point, overall


def fmt(v, digits: int = 4) -> str:
    if v is None or v == "":
        return "-"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v != v:
            return "nan"
        a = abs(v)
        if a >= 1000:
            return f"{v:.1f}"
        if a >= 1:
            return f"{v:.2f}"
        return f"{v:.{digits}g}" if v else "0"
    return str(v)


def pct(v) -> str:
    return "-" if v is None else f"{v:+.2f}%"


def hardware_section(rd: RunData) -> dict | None:
    h = rd.hardware
    if not h:
        return None
    gpus = [f"{g.get('name')} (driver {g.get('driver')}, cc {g.get('compute_cap') or 'n/a'}, {g.get('memory')})" for g in h.get("gpus") or []]
    cpu = h.get("cpu") or {}
    return {
        "class": h.get("hardware_class"),
        "gpus": gpus or [f"none ({h.get('source') or 'no GPU'})"],
        "cuda": h.get("cuda_version") or "n/a",
        "cpu": f"{cpu.get('model')} x{cpu.get('cpus')} ({cpu.get('arch')})" if cpu else "-",
        "host": h.get("host") or rd.manifest.get("hostname"),
    }


def bench_section(rd: RunData) -> dict | None:
    """bench.json (llama-batched-bench): one row per PP x TG x B, as the tool prints it."""
    b = rd.bench
    if not b or not b.get("rows"):
        return None
    rows = [[r.get("pp"), r.get("tg"), r.get("b"), r.get("n_kv"), fmt(r.get("s_pp")), fmt(r.get("s_tg")), fmt(r.get("t"))] for r in b["rows"]]
    return {"engine": b.get("engine"), "rows": rows, "command": shlex.join(str(a) for a in b.get("command") or [])}


def _flags(argv: list[str]) -> list[str]:
    return [a for a in argv or [] if a.startswith("-D")]


def provenance_section(rd: RunData) -> list[dict]:
    out = []
    sources = ((rd.manifest.get("config") or {}).get("sources")) or {}
    engines_cfg = ((rd.manifest.get("config") or {}).get("engines")) or {}
    for name, b in sorted((rd.builds or {}).items()):
        kind = ENGINES.get(b.get("kind") or "llama")  # a builds.json row says its kind (a build row before kinds said none)
        cells = kind.provenance_cells(b) if kind is not None else None
        if cells is not None:
            out.append({"engine": name, **cells})
            continue
        src = b.get("source") or sources.get((engines_cfg.get(name) or {}).get("source") or "", {}) or {}
        pin = src.get("pin") or src.get("package") or src.get("path") or src.get("url") or "-"
        if src.get("sha256"):
            pin = f"{pin} (sha256 {src['sha256'][:12]})"
        patches = b.get("patches") or []
        tree = b.get("tree_after")
        exp = b.get("expected_tree")
        series = "none (stock)" if not b.get("series_dir") else f"{Path(b['series_dir']).name}: {len(patches)} patches"
        out.append({
            "engine": name,
            "source": f"{src.get('kind', '-')}: {pin}" if src else ("prebuilt" if b.get("prebuilt") else "-"),
            "series": series,
            "tree": (tree[:12] if tree else "-") + (f" (expected {exp[:12]}, {'match' if exp == tree else 'MISMATCH'})" if exp else ""),
            "flags": " ".join(_flags(b.get("cmake_configure") or [])) or "-",
            "cuda_archs": b.get("cuda_archs") or "cpu",
            "bin": b.get("bin_dir") or b.get("prebuilt") or "-",
            "key": b.get("key") or "-",
        })
    return out


def gates_section(rd: RunData, problems: list[str]) -> dict:
    rows = []
    if isinstance(rd.gates, dict):
        for phase, s in rd.gates.items():
            if isinstance(s, dict):
                rows += [{"phase": phase, **{k: c.get(k) for k in ("check", "expected", "got", "status")}} for c in s.get("checks") or []]
    elif rd.gate_rows:
        rows = rd.gate_rows
    status = rd.gates.get("status") if isinstance(rd.gates, dict) else ("ungated" if not rd.gate_rows else "unknown")
    per = (rd.summary or {}).get("binary_gates") or {}  # per engine: gated, not run, or not applicable (its kind says why)
    engines = [[e, g.get("status"), g.get("why")] for e, g in per.items() if isinstance(g, dict)]
    return {"rows": rows, "status": status, "problems": problems, "engines": engines}


def results_section(rd: RunData) -> dict:
    med = (rd.summary or {}).get("medians") or []
    metrics = [m for m in registry.columns() if any(isinstance(r.get(m), (int, float)) for r in med)]
    rows = [[r.get("engine"), r.get("n"), _repeats(r)] + [fmt(r.get(m)) for m in metrics] for r in med]
    return {"metrics": metrics, "rows": rows, "shape": (rd.summary or {}).get("shape") or {}, "model": (rd.summary or {}).get("model")}


def _repeats(m: dict) -> str:
    bad = m.get("invalid_repeats")
    return f"{m.get('repeats')}" + (f" (+{bad} invalid)" if bad else "")


def validity_section(rd: RunData) -> dict:
    """Which points broke a rule (they are in the rows, not in the medians or ratios)."""
    s = rd.summary or {}
    windows = [[r.engine, r.repeat, r.n, fmt(r.metric("wall_s")), fmt(r.metric("decode_window_s")),
                f"{_count(r, 'valid_requests')}/{_count(r, 'requests')}",
                "valid" if r.valid else "INVALID: " + "; ".join(r.invalid_reasons or [])] for r in rd.rows()]
    cal, mw = s.get("calibration") or {}, (s.get("shape") or {}).get("min_window_s")
    return {"invalid": s.get("invalid_points") or [], "rows": windows, "min_window_s": mw, "outran": outran_line(cal.get("outran") or [], cal.get("margin"), mw)}


def _count(r, key: str):
    """A row's request count, '-' when the row has none."""
    return r.metrics.get(key, "-")


def reconciliation_section(rd: RunData) -> list[list]:
    """Per point: the server's own /metrics deltas against the client's counts."""
    out = []
    for r in rd.rows():
        for q in r.reconciliation:
            out.append([r.engine, r.repeat, r.n, q.quantity, fmt(q.client), fmt(q.server), q.rule, q.status])
    return out


def server_section(rd: RunData) -> list[list]:
    """Server-side figures the client cannot see: preemptions, prefix cache, KV use."""
    out = []
    for r in rd.rows():
        s = r.server or {}
        if s:
            figures = ("preemptions", "prefix_queries", "prefix_hits", "prefix_hit_rate", "kv_usage_after")
            out.append([r.engine, r.repeat, r.n, *(fmt(s.get(k)) for k in figures)])
    return out


def noise_section(rd: RunData, metrics: list[str]) -> list[list]:
    rows = []
    for m in metrics:
        for (eng, n), vals in sorted(values_by_cell(rd, m).items()):
            s = stats.describe(vals.values())
            rows.append([eng, n, m, s.n, fmt(s.median), fmt(s.stdev), "-" if s.cv_pct is None else f"{s.cv_pct:.2f}%", f"{fmt(s.min)}..{fmt(s.max)}"])
    return rows


def _verdict(r: dict, k: str) -> str:
    v = (r.get("verdicts") or {}).get(k)
    if v:
        return v["verdict"]
    return r.get("noise") if r.get("noise", "known") != "known" else "-"


def ratio_section(rd: RunData) -> dict:
    """Ratios of medians of valid repeats, each with the noise rule's verdict ('noise unknown'
    under 3 repeats: no verdict)."""
    ratios = (rd.summary or {}).get("ratios") or []
    shown = dict.fromkeys(registry.headline() + registry.compared())  # the headline, then the other compared
    keys = [k for k in shown if any(k in r for r in ratios)] or [k for k in ("decode_agg_tps", "agg_tps", "prefill_tps", "ttft_p50_ms") if any(k in r for r in ratios)]
    cols, rows = [], []
    for k in keys:
        cols += [k, "verdict"] if any((r.get("verdicts") or {}).get(k) or r.get("noise") for r in ratios) else [k]
    for r in ratios:
        row = [r["engine"], r["n"], r.get("repeats", "-")]
        for k in keys:
            row.append(fmt(r.get(k)))
            if len(cols) > len(keys):
                row.append(_verdict(r, k))
        rows.append(row)
    return {"reference": (rd.summary or {}).get("reference_engine"), "cols": cols, "rows": rows, "headline": (rd.summary or {}).get("headline") or ""}


def key_ratios(rd: RunData, paired: list[dict] | None = None) -> str:
    """The ledger's key ratios: top-N decode/agg ratios, with the users' verdict or 'noise
    unknown', and the paired outcome with its interval for decode_agg_tps (paired: the run's
    paired points, when the ratio rows do not carry them)."""
    ratios = (rd.summary or {}).get("ratios") or []
    if (rd.summary or {}).get("workload"):  # a workload run's ratios are its own metrics: its headline says them
        return (rd.summary or {}).get("headline") or ""
    if not ratios:
        return ""
    top = max(r["n"] for r in ratios)
    out = []
    for r in ratios:
        if r["n"] != top:
            continue
        tail = [t for t in (_verdict(r, "decode_agg_tps"),) if t != "-"]
        p = (r.get("paired") or {}).get("decode_agg_tps") or next((x for x in paired or [] if (x["engine"], x["n"], x["metric"]) == (r["engine"], top, "decode_agg_tps")), None)
        if p and p.get("outcome"):
            tail.append(f"paired {p['outcome']} {interval(p)}" if p.get("low") is not None else f"paired: {p.get('reason')}")
        out.append(f"{r['engine']}/{r['reference']} decode {fmt(r.get('decode_agg_tps'))}x agg {fmt(r.get('agg_tps'))}x @N={top}" + (f" ({'; '.join(tail)})" if tail else ""))
    return "; ".join(out)


def buckets_section(rd: RunData) -> dict | None:
    """profile/analysis.json (parity.profiles): bucket table per capture, and the
    difference method (a list, one per engine)."""
    a = rd.analysis
    if not isinstance(a, dict):
        return None
    caps = []
    for c in a.get("captures") or []:
        rows = [[b.get("bucket"), fmt(b.get("total_ms")), f"{float(b.get('share') or 0) * 100:.2f}%", b.get("instances", "-"), fmt(b.get("ms_per_launch"))] for b in c.get("buckets") or []]
        unmatched = [f"{u.get('name')} ({fmt(u.get('total_ms'))} ms)" if isinstance(u, dict) else str(u) for u in c.get("unmatched_top") or []]
        caps.append({"label": c.get("label") or "-", "engine": c.get("engine") or "-", "ntg": c.get("ntg", "-"), "total_ms": fmt(c.get("total_ms")), "rows": rows, "unmatched": unmatched,
                     "warning": c.get("warning")})
    diffs = a.get("difference") or []
    dcols = ["bucket", "delta_ms", "delta_launches", "ms_per_step", "us_per_token", "ms_per_launch_delta"]
    out_diffs = [{"title": f"{d.get('long')} - {d.get('short')} ({d.get('engine') or '-'}, {d.get('steps')} steps x npl {d.get('npl')})", "formula": d.get("formula") or "",
                  "rows": [[fmt(r.get(k)) if k != "bucket" else r.get(k) for k in dcols] for r in ([d["total"]] if d.get("total") else []) + list(d.get("buckets") or [])]}
                 for d in diffs if isinstance(d, dict)]
    return {"captures": caps, "differences": out_diffs, "dcols": dcols, "collapsed": bool(a.get("collapsed")), "note": a.get("note")}


def definitions(names: list[str], summary: dict | None = None) -> tuple[list[list], str | None]:
    """The definitions the run recorded in summary.json (what its numbers meant when they were
    measured), else the registry's (parity.metrics.registry: each metric declared once)."""

    table = {n: (m.unit, m.better, m.formula) for n, m in all_metrics().items()}
    recorded = [m for m in (summary or {}).get("metrics") or [] if isinstance(m, dict) and "name" in m]
    table.update({m["name"]: (m.get("unit", "-"), m.get("better", "-"), m.get("formula", "-")) for m in recorded})
    rows = [[n, *table[n]] for n in names if n in table]
    return rows, (None if rows else "no definitions for these metrics")


def reproduce(rd: RunData) -> dict:
    m = rd.manifest
    argv = list(m.get("argv") or [])
    if argv and (Path(argv[0]).name == "parity" or argv[0].endswith("parity/__main__.py")):
        argv[0] = "parity"
    return {"cwd": m.get("cwd") or ".", "command": shlex.join(argv) if argv else "-", "git": m.get("parity_git_sha") or "-", "version": m.get("parity_version") or "-"}


def ab_table(ab: dict) -> list[list]:
    return [
        [r["engine"], r["n"], r["metric"], r["better"], fmt(r["a_median"]), fmt(r["b_median"]), f"{r['a_repeats']}/{r['b_repeats']}", pct(r["delta_pct"]), f"{r['threshold_pct']:.2f}%",
         "-" if r["ci_pct"] is None else f"[{r['ci_pct'][0]:+.2f}, {r['ci_pct'][1]:+.2f}]%", {True: "yes", False: "no", None: "-"}[r["consistent"]], r["verdict"],
         *unpaired_cells(r.get("unpaired"))]
        for r in ab["rows"]
    ]


def unpaired_cells(u: dict | None) -> list[str]:
    """[B/A with its interval, outcome] of an unpaired (Welch) comparison; '-' when absent."""
    if not u or u.get("ratio") is None:
        return ["-", "-" if not u else f"- ({u.get('reason')})"]
    return [f"{u['ratio']:.4f} {interval(u)}", u["outcome"]]


def sessions_table(ab: dict, compact: bool = False) -> list[list]:
    """compare's "sessions": each run's own paired estimate and the change of that ratio
    (compact: without the intervals, for a terminal)."""

    def cell(p: dict) -> str:
        return f"{fmt(p.get('ratio'))} {p.get('outcome')}" if compact else f"{fmt(p.get('ratio'))} {interval(p)} {p.get('outcome')} ({p.get('n_blocks')} blocks)"

    return [[x["engine"], x["n"], x["metric"], cell(x["a"]), cell(x["b"]), *unpaired_cells(x["change"])] for x in ab.get("sessions") or []]


def output_parity_section(rd: RunData) -> dict | None:
    """Cross-engine output parity (same weights and prompts, greedy): per engine x prompt."""
    op = (rd.summary or {}).get("output_parity")
    if not op:
        return None
    rows = [[p.get("engine"), p.get("prompt"), p.get("prompt_tokens", "-"), p.get("tokens", "-"), fmt(p.get("agreement")), "-" if p.get("first_divergence") is None else p["first_divergence"],
             fmt(p.get("kl_mean")), fmt(p.get("kl_max")), p.get("status"), p.get("why")] for p in op.get("pairs") or []]  # fmt: skip
    return {"reference": op.get("reference"), "status": op.get("status"), "band": op.get("band") or {}, "rows": rows}


# ----------------------------------------------------------------- paired block statistics


def paired_points(rd: RunData, metrics: list[str], threshold_pct: float, confidence: float) -> tuple[list[dict], str]:
    """The run's paired block statistics (engine/reference per block x point x metric) and where
    they come from: summary.json's "paired" as recorded, else computed now from its rows (runs
    written before parity recorded them), else none."""
    s = rd.summary or {}
    if isinstance(s.get("paired"), list):
        return s["paired"], "recorded in summary.json"
    ref, rows = s.get("reference_engine"), [r for r in rd.rows() if r.repeat is not None]
    if not ref or not rows:
        return [], "not recorded (no reference engine or no repeat rows in the run)"

    ms = [m for m in metrics if any(r.metric(m) is not None for r in rows)]
    pts = by_point(rows, ref, ms, direction, threshold_pct, confidence)
    points = {r.n: r.point for r in rows if r.point}
    for p in pts:
        if p["n"] in points:
            p["point"] = points[p["n"]]
    return pts, f"not recorded in summary.json (older run): computed now from its rows, threshold {threshold_pct:g}%"


def _users_rule(ratio_rows: list[dict], p: dict) -> str:
    r = next((x for x in ratio_rows if x.get("engine") == p["engine"] and x.get("n") == p["n"]), None)
    if r is None:
        return "-"
    v = (r.get("verdicts") or {}).get(p["metric"])
    if v:
        return f"{v['verdict']} ({pct(v.get('delta_pct'))} vs {v['threshold_pct']:.2f}%)" if v.get("delta_pct") is not None else v["verdict"]
    return r.get("noise") if r.get("noise", "known") != "known" else "-"


def interval(p: dict) -> str:
    return "-" if p.get("low") is None else f"[{p['low']:.4f}, {p['high']:.4f}]"


def paired_section(rd: RunData, metrics: list[str], threshold_pct: float, confidence: float) -> dict:
    """Per engine x N x metric: the paired block statistics beside the users' rule's verdict."""
    pts, source = paired_points(rd, metrics, threshold_pct, confidence)
    ratio_rows = (rd.summary or {}).get("ratios") or []
    rows = [[p["engine"], p.get("point") or p["n"], p["metric"], "-" if p.get("ratio") is None else f"{p['ratio']:.4f}", interval(p),
             "-" if p.get("half_width_pct") is None else f"+-{p['half_width_pct']:.2f}%", p.get("n_blocks", 0), p.get("outcome") or "-",
             _needed(p), _users_rule(ratio_rows, p)] for p in pts]  # fmt: skip
    recorded = (rd.summary or {}).get("paired_rule") or {}
    thr = recorded.get("threshold_pct", threshold_pct)
    disagree = [f"{p['engine']} N={p['n']} {p['metric']}: paired {p['outcome']}, users' rule {r[-1].split(' (')[0]}" for p, r in zip(pts, rows) if _disagrees(p.get("outcome"), r[-1])]
    return {"rows": rows, "points": pts, "source": source, "reference": (rd.summary or {}).get("reference_engine"), "threshold_pct": thr,
            "confidence": recorded.get("confidence", confidence), "counts": _counts(pts), "disagree": disagree, "blocks": (rd.summary or {}).get("blocks") or [],
            "order_kind": (rd.summary or {}).get("order_kind")}  # fmt: skip


def _needed(p: dict) -> str:
    if p.get("blocks_needed"):
        return str(p["blocks_needed"])
    if p.get("n_blocks", 0) < 2:
        return ">= 2 (no interval from one block)" if p.get("n_blocks") else "-"
    if p.get("outcome") == "inconclusive" and p.get("low") is not None:
        return f"> {MAX_BLOCKS_ESTIMATE}"
    return "-"


def _disagrees(outcome: str | None, users: str) -> bool:
    """Both rules gave a verdict and they differ in kind: a claim against none, or opposite claims."""
    u = users.split(" (")[0]
    if u not in stats.VERDICTS or outcome is None:
        return False
    if outcome in ("improved", "regressed"):
        return u != outcome
    return u in ("improved", "regressed")


def _counts(pts: list[dict]) -> dict:
    return {o: sum(1 for p in pts if p.get("outcome") == o) for o in OUTCOMES}


def paired_text(sec: dict) -> str:
    """One line: the paired outcomes over every engine x N x metric, and where the rules disagree."""
    if not sec["points"]:
        return f"paired block statistics: {sec['source']}"

    c = sec["counts"]
    word = overall(p.get("outcome") for p in sec["points"])
    claims = [f"{p['engine']} N={p['n']} {p['metric']} {p['ratio']:.4f}x {interval(p)}" for p in sec["points"] if p.get("outcome") in ("improved", "regressed")]
    s = (f"paired blocks ({sec['reference']} as B/A reference, same session): {word} -- {c['improved']} improved, {c['regressed']} regressed, {c['equivalent']} equivalent, "
         f"{c['inconclusive']} inconclusive over {len(sec['points'])} engine x N x metric")  # fmt: skip
    if claims:
        s += " (" + "; ".join(claims[:3]) + (f"; and {len(claims) - 3} more" if len(claims) > 3 else "") + ")"
    if sec["disagree"]:
        s += "; the two rules disagree on " + "; ".join(sec["disagree"])
    return s


def paired_definition(threshold_pct: float, confidence: float) -> list[str]:
    """The method and the outcome rules, said once in the definitions."""

    return [
        f"A block is one repeat in which every engine ran once, back to back (the run's order); per block the ratio engine/reference of a metric. "
        f"Estimate and interval: {METHOD.replace('95 %', f'{confidence * 100:g} %')}. Drift of the box that moves both engines of a block cancels in its ratio.",
        f"improved / regressed: the interval excludes 1 AND the estimate is beyond the practical threshold (+-{threshold_pct:g}%, stats.min_delta_pct); "
        f"equivalent: the whole interval lies inside +-{threshold_pct:g}%; inconclusive: neither, with the blocks that would settle it at the observed spread.",
        "Why t on logs and not a bootstrap: with 3-20 blocks a percentile bootstrap's interval cannot be wider than the observed range and undercovers; "
        "the t interval is exact for normal log ratios and robust to the mild skew of recorded runs; logs make A/B and B/A symmetric.",
        "The users' rule (|delta of medians| > max(min_delta_pct, noise_k x control stdev) and every repeat the same way) stays beside it; where the two disagree the report says so.",
    ]
