"""The cross-hardware report of a matrix: per target (host x profile) the same headline
metrics, the gates, the paired verdicts and the provenance (hardware class, GPU, driver,
CUDA, pin, series digest, clocks, Slurm job), side by side.  build_report computes the
table from the targets' run dirs; render_markdown only renders it."""

from __future__ import annotations

import statistics
from pathlib import Path
from parity.errors import UsageError
from parity.files import atomic_write_text
from parity.metrics.registry import compared
from parity.report.rundata import gate_problems, load_run


def provenance(run) -> dict:
    m, hw, builds = run.manifest, run.hardware or {}, run.builds or {}
    gpus = hw.get("gpus") or []
    series = {e: (b.get("series_digest") or "")[:12] for e, b in builds.items() if isinstance(b, dict) and b.get("series_digest")}
    pins = sorted({str((b.get("source") or {}).get("pin") or (b.get("source") or {}).get("package") or b.get("tree_before", "")[:12])
                   for b in builds.values() if isinstance(b, dict)})  # fmt: skip
    clocks = {}
    for key in ("sm_mhz_median", "mem_mhz_median"):
        tel = [r.telemetry for r in run.rows() if isinstance(r.telemetry, dict)]
        vals = [t[key] for t in tel if isinstance(t.get(key), (int, float))]
        clocks[key] = statistics.median(vals) if vals else None
    slurm = m.get("slurm") or {}
    return {
        "hostname": m.get("hostname"), "hardware_class": hw.get("hardware_class"), "status": m.get("status"),
        "gpu": ", ".join(str(g.get("name")) for g in gpus if isinstance(g, dict)) or None,
        "driver": hw.get("driver"), "cuda": hw.get("cuda_version"), "cpu": (hw.get("cpu") or {}).get("model"),
        "pin": ", ".join(p for p in pins if p) or None, "series_digest": series or None,
        "sm_clock_mhz": clocks["sm_mhz_median"], "mem_clock_mhz": clocks["mem_mhz_median"],
        "slurm_job": f"{slurm['job_id']} on {slurm.get('node') or '?'} ({slurm.get('state') or '?'})" if slurm.get("job_id") else None,
        "parity_git_sha": m.get("parity_git_sha"),
    }  # fmt: skip


def gates(run) -> dict:
    g = run.gates if isinstance(run.gates, dict) else {}
    return {"pre": (g.get("pre") or {}).get("status", "not-run"), "post": (g.get("post") or {}).get("status", "not-run"),
            "problems": gate_problems(run)}  # fmt: skip


def build_report(root: Path, name: str, table: list[dict]) -> dict:
    targets, runs = [], {}
    for row in table:
        t = {"target": row["target"], "host": row["host"], "kind": row.get("kind"), "exit_code": row.get("exit_code"), "error": row.get("error")}
        if row.get("run_dir"):
            try:
                run = load_run(root / row["run_dir"], need_summary=False)
            except UsageError as e:
                t["error"] = t["error"] or str(e)
            else:
                runs[row["target"]] = run
                t.update(provenance=provenance(run), gates=gates(run))
        targets.append(t)
    medians, verdicts, metrics = [], [], compared()
    cells = sorted({(str(r.get("engine")), int(r.get("n", 0))) for run in runs.values() for r in (run.summary or {}).get("medians") or []})
    for engine, n in cells:
        for metric in metrics:
            vals = {}
            for tname, run in runs.items():
                for r in (run.summary or {}).get("medians") or []:
                    if r.get("engine") == engine and int(r.get("n", 0)) == n and isinstance(r.get(metric), (int, float)):
                        vals[tname] = r[metric]
            if vals:
                medians.append({"engine": engine, "n": n, "metric": metric, "values": vals})
    keys = sorted({(p["engine"], p["reference"], int(p["n"]), p["metric"]) for run in runs.values() for p in (run.summary or {}).get("paired") or []
                   if p.get("metric") in metrics})  # fmt: skip
    for engine, ref, n, metric in keys:
        vals = {}
        for tname, run in runs.items():
            for p in (run.summary or {}).get("paired") or []:
                if (p["engine"], p["reference"], int(p["n"]), p["metric"]) == (engine, ref, n, metric):
                    vals[tname] = {k: p.get(k) for k in ("ratio", "low", "high", "outcome", "n_blocks")}
        verdicts.append({"engine": engine, "reference": ref, "n": n, "metric": metric, "values": vals})
    return {"matrix": name, "targets": targets, "medians": medians, "paired": verdicts, "metrics": metrics}


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e4 else f"{v:.0f}"
    if isinstance(v, dict):
        return ", ".join(f"{k} {val}" for k, val in v.items()) or "-"
    return str(v)


def render_markdown(doc: dict) -> str:
    names = [t["target"] for t in doc["targets"]]
    head = "| | " + " | ".join(names) + " |\n|---|" + "---|" * len(names) + "\n"
    out = [f"# Cross-hardware report: {doc['matrix']}\n\n", "The same campaign on each target (host x profile); every value from that target's run dir.\n\n",
           "## Targets and provenance\n\n", head]  # fmt: skip
    by = {t["target"]: t for t in doc["targets"]}
    rows = [("host", lambda t: f"{t['host']} ({t.get('kind') or 'ssh'})"), ("exit code", lambda t: t.get("exit_code"))]
    for key in ("status", "hardware_class", "hostname", "gpu", "driver", "cuda", "cpu", "pin", "series_digest", "sm_clock_mhz", "mem_clock_mhz", "slurm_job", "parity_git_sha"):
        rows.append((key, lambda t, key=key: (t.get("provenance") or {}).get(key)))
    rows += [("pre-gate", lambda t: (t.get("gates") or {}).get("pre")), ("post-gate", lambda t: (t.get("gates") or {}).get("post")),
             ("trust", lambda t: "; ".join((t.get("gates") or {}).get("problems") or []) or ("green" if t.get("gates") else "no run dir"))]  # fmt: skip
    for label, get in rows:
        out.append(f"| {label} | " + " | ".join(_fmt(get(by[n])).replace("|", "/") for n in names) + " |\n")
    errors = [t for t in doc["targets"] if t.get("error")]
    if errors:
        out.append("\n" + "".join(f"- **{t['target']}**: {t['error']}\n" for t in errors))
    out.append("\n## Medians per hardware\n\n| engine | N | metric | " + " | ".join(names) + " |\n|---|---|---|" + "---|" * len(names) + "\n")
    for r in doc["medians"]:
        out.append(f"| {r['engine']} | {r['n']} | {r['metric']} | " + " | ".join(_fmt(r["values"].get(n)) for n in names) + " |\n")
    if not doc["medians"]:
        out.append("| - | - | no serving summary in any target | " + " | ".join("-" for _ in names) + " |\n")
    out.append("\n## Paired verdicts per hardware (engine / reference, same session on each target)\n\n| engine / ref | N | metric | "
               + " | ".join(names) + " |\n|---|---|---|" + "---|" * len(names) + "\n")  # fmt: skip
    for r in doc["paired"]:
        cells = []
        for n in names:
            v = r["values"].get(n)
            cells.append(f"{v['ratio']:.4f} [{v['low']:.4f}, {v['high']:.4f}] {v['outcome']}" if v and v.get("ratio") is not None and v.get("low") is not None else "-")
        out.append(f"| {r['engine']} / {r['reference']} | {r['n']} | {r['metric']} | " + " | ".join(cells) + " |\n")
    out.append("\nTargets are separate sessions on separate machines: compare a target's paired ratio with another's, "
               "not raw throughput across hardware classes as a regression.\n")  # fmt: skip
    return "".join(out)


def write_report(root: Path, name: str, table: list[dict]) -> dict:
    doc = build_report(root, name, table)
    doc["files"] = {"json": "cross_hardware.json", "markdown": "cross_hardware.md"}
    import json

    atomic_write_text(root / "cross_hardware.json", json.dumps(doc, indent=2, default=str) + "\n")
    atomic_write_text(root / "cross_hardware.md", render_markdown(doc))
    return doc
