"""One run (what parity.history.source.read_run gives) as plain rows of the store's tables:
provenance, builds, every measured row, medians, paired rows, gates, telemetry, lever rows.
Pure: no database, no files written."""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
import statistics
from pathlib import Path

from parity.files import sha256
from parity import __version__
from parity.engines import ENGINES
from parity.paths import expand_path
from parity.results.model import PointRow
from parity.report.rundata import gate_problems
from parity.yamlload import safe_load

BENCH_METRICS = ("s_tg", "s_pp", "s", "t_pp", "t_tg", "t", "n_kv")
NOT_METRICS = {"n", "repeat", "slot", "pp", "tg", "b", "block"}
TELEMETRY = ("samples", "sm_mhz_median", "mem_mhz_median", "power_w_median", "temp_c_max", "load1_min", "load1_max", "client_cpu_s", "client_cpu_pct", "server_cpu_s", "server_cpu_pct")
DATED_NAME = re.compile(r"(\d{8}_\d{6})")


def number(v) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


def timestamp(text) -> _dt.datetime | None:
    """An ISO time (the manifest's started) as naive UTC; None when absent or unreadable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        t = _dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return t.astimezone(_dt.timezone.utc).replace(tzinfo=None) if t.tzinfo else t


def dated_name(name: str) -> _dt.datetime | None:
    """The time in a run dir's name (YYYYMMDD_HHMMSS, parity's and the users' ART dirs), local time."""
    m = DATED_NAME.search(name)
    if not m:
        return None
    try:
        return _dt.datetime.strptime(m.group(1), "%Y%m%d_%H%M%S")
    except ValueError:
        return None


def run_key(rd) -> str:
    """Stable over copies of one run: its id, host and start for a parity run; its result file's
    content for the users' artifacts and manifest-less copies."""
    m = rd.manifest
    if m.get("started"):
        basis = f"{m.get('run_id')}|{m.get('hostname')}|{m.get('started')}"
    else:
        files = [rd.path / f for f in ("summary.tsv", "summary.json", "bench.json")]
        basis = "|".join(f.read_text(errors="replace") for f in files if f.is_file()) or str(rd.path)
    return sha256(basis).hexdigest()[:20]


def served_identity(build: dict) -> tuple[str, str] | None:
    """(source kind, identity) of a row its kind wrote without a build (vLLM, an endpoint), as the kind says."""
    kind = ENGINES.get(build.get("kind") or "llama")
    return kind.provenance_identity(build) if kind is not None else None


def source_pin(build: dict) -> str | None:
    """An engine's llama.cpp identity: the pinned commit, else the package, path or tree."""
    src = build.get("source") or {}
    pin = src.get("pin") or src.get("package") or src.get("path") or src.get("url")
    if pin:
        return str(pin)
    if build.get("prebuilt"):
        return f"prebuilt:{build['prebuilt']}"
    served = served_identity(build)
    if served is not None:
        return served[1]
    return (build.get("tree_before") or None) and str(build["tree_before"])[:12]


def builds(rd, key: str) -> list[dict]:
    out = []
    for engine, b in sorted((rd.builds or {}).items()):
        if not isinstance(b, dict):
            continue
        flags = [a for a in b.get("cmake_configure") or [] if isinstance(a, str) and a.startswith("-D") and not a.startswith("-DCMAKE_BUILD_TYPE")]
        out.append({"run_key": key, "engine": engine, "build_key": b.get("key"), "source_kind": (b.get("source") or {}).get("kind") or ((served_identity(b) or (None,))[0]) or ("prebuilt" if b.get("prebuilt") else None),
                    "pin": source_pin(b), "series_dir": b.get("series_dir"), "series_digest": b.get("series_digest"),
                    "patches": json.dumps([[p.get("name"), p.get("sha256")] for p in b.get("patches") or [] if isinstance(p, dict)]) if b.get("patches") is not None else None,
                    "tree_after": b.get("tree_after"), "cuda_archs": None if b.get("cuda_archs") is None else str(b.get("cuda_archs")), "flags": " ".join(flags) or None})  # fmt: skip
    return out


def _primary(rd, build_rows: list[dict]) -> dict:
    """The run's headline provenance: the lever summary's, else the engine with a series, else the first build."""
    s = rd.summary or {}
    if s.get("kind") == "lever-ab":
        return {"pin": s.get("pin"), "series_digest": s.get("series_digest")}
    series = [b for b in build_rows if b["series_digest"]]
    pick = series[0] if series else (build_rows[0] if build_rows else {})
    return {"pin": pick.get("pin"), "series_digest": pick.get("series_digest")}


def gate_status(rd) -> str:
    """pass | fail | ungated (a lever A/B keeps its gates' verdict in its summary)."""

    s = rd.summary or {}
    if s.get("kind") == "lever-ab" and isinstance(s.get("gates"), dict) and rd.gates is None:
        return "pass" if s["gates"].get("ok") else "fail"
    if rd.gates is None and not rd.gate_rows:
        return "ungated"
    problems = [p for p in gate_problems(rd) if "gate" in p]
    return "fail" if problems else "pass"


def profile_name(m: dict) -> str | None:
    """The profile a run used, as a later command can name it: --profile (a file made absolute
    against the run's cwd), else its campaign file's profile:, else the resolved profile's name."""
    import os

    def absolute(value: str) -> str:
        if value.endswith((".yaml", ".yml")) or "/" in value:
            return os.path.normpath(os.path.join(m.get("cwd") or "", os.path.expanduser(value)))
        return value

    argv = list(m.get("argv") or [])
    for i, a in enumerate(argv):
        if a in ("-p", "--profile") and i + 1 < len(argv):
            return absolute(argv[i + 1])
        if a.startswith("--profile="):
            return absolute(a.split("=", 1)[1])
    camp = (m.get("campaign") or {}).get("file")
    if camp:
        try:
            prof = (safe_load(Path(absolute(camp)).read_text()) or {}).get("profile")
            if isinstance(prof, str):
                return absolute(expand_path(prof))
        except Exception:  # the campaign file moved or changed: the profile's name below
            pass
    return (m.get("config") or {}).get("name")


VERDICT_EXITS = (5, 7)  # a regression beyond noise, a confirmed change point: the numbers stand, the verdict failed


def counts(m: dict) -> bool:
    """Whether a run's numbers count in a series: it completed, or only verdict steps failed
    (exit 5 or 7: the nightly that confirms a change point is itself a point of the series)."""
    if m.get("status") == "complete":
        return True
    failed = [s for s in (m.get("steps") or {}).values() if isinstance(s, dict) and s.get("status") == "failed"]
    return m.get("status") == "failed" and bool(failed) and all(s.get("exit_code") in VERDICT_EXITS for s in failed)


def inside(f: Path, run_dir: Path) -> bool:
    """f is a regular file of the run dir, not a link out of it."""
    try:
        return f.is_file() and f.resolve().is_relative_to(Path(run_dir).resolve())
    except OSError:
        return False


def reports(rd) -> list[str]:
    d = rd.path / "reports"
    return sorted(str(f) for f in d.glob("*-phase*.md") if inside(f, rd.path)) if d.is_dir() else []


def run_row(rd, key: str, build_rows: list[dict]) -> dict:
    m, hw = rd.manifest, rd.hardware or {}
    gpus = [g for g in hw.get("gpus") or [] if isinstance(g, dict)]
    started = timestamp(m.get("started"))
    run_at = started or dated_name(rd.path.name)
    origin = m.get("origin") or ("users' harness" if m.get("kind") == "users-snapshot" else "parity")

    s = rd.summary or {}
    b = rd.bench or {}
    return {
        "run_key": key, "run_id": rd.run_id, "path": str(rd.path), "origin": origin, "kind": m.get("kind") or s.get("kind"),
        "status": m.get("status"), "counts": counts(m), "valid": m.get("valid"), "error": m.get("error"),
        "started": started, "ended": timestamp(m.get("ended")), "run_at": run_at,
        "host": m.get("host"), "hostname": m.get("hostname"), "user": m.get("user"),
        "hardware_class": hw.get("hardware_class"), "gpu": ", ".join(str(g.get("name")) for g in gpus) or None,
        "driver": hw.get("driver") or next((g.get("driver") for g in gpus if g.get("driver")), None), "cuda_version": hw.get("cuda_version"),
        "cpu": (hw.get("cpu") or {}).get("model") if isinstance(hw.get("cpu"), dict) else None,
        **_primary(rd, build_rows),
        "build_keys": json.dumps({r["engine"]: r["build_key"] for r in build_rows if r["build_key"]}, sort_keys=True) if build_rows else None,
        "engines": ",".join(s.get("engines") or b.get("engines") or ([b["engine"]] if b.get("engine") else [])) or None,
        "reference_engine": s.get("reference_engine") or b.get("reference"), "model": s.get("model") or b.get("model"),
        "profile": profile_name(m), "campaign": (m.get("campaign") or {}).get("name"),
        "parity_version": m.get("parity_version"), "parity_git_sha": m.get("parity_git_sha"),
        "gate_status": gate_status(rd), "problems": "; ".join(gate_problems(rd)) or None,
        "report": (reports(rd) or [None])[-1], "argv": json.dumps(m.get("argv")) if m.get("argv") else None, "cwd": m.get("cwd"),
        "notes": "; ".join(rd.notes) or None, "ingested_by": __version__,
    }  # fmt: skip


def workload_of(summary: dict) -> str:
    name = (summary.get("workload") or {}).get("name") if isinstance(summary.get("workload"), dict) else None
    model = summary.get("model")
    if summary.get("source", "").startswith("users'"):
        return "serve (users' harness)"
    return " ".join(x for x in (name or "serve", model) if x)


def _point_label(r: PointRow) -> str:
    return str(r.label)


def serving_rows(rd, key: str) -> tuple[list[dict], list[dict]]:
    """(rows, paired) of a snapshot's summary.json (N sweep, workload, or the users' artifact)."""
    s = rd.summary or {}
    points_in = rd.rows()
    if not points_in:
        return [], []
    wl = workload_of(s)
    rows = []
    for i, r in enumerate(points_in):
        base = {"run_key": key, "source": "serving", "workload": wl, "engine": str(r.engine), "point": _point_label(r), "n": _int(r.n),
                "repeat": _int(i if r.repeat is None else r.repeat), "valid": r.valid}  # fmt: skip
        for metric, v in r.metrics.items():
            if metric not in NOT_METRICS and (x := number(v)) is not None:
                rows.append({**base, "metric": metric, "value": x})
    points = {(str(r.n),): _point_label(r) for r in points_in}
    paired = [_paired_row(key, "serving", wl, p, points.get((str(p.get("n")),), p.get("point") or f"N={p.get('n')}")) for p in s.get("paired") or []]
    if not paired and s.get("source", "").startswith("users'"):  # their ratio block: one session's ratio per N, no blocks
        for r in s.get("ratios") or []:
            for metric, v in r.items():
                if (x := number(v)) is not None and metric not in NOT_METRICS:
                    paired.append({"run_key": key, "source": "serving", "workload": wl, "engine": r.get("engine"), "reference": r.get("reference"), "point": f"N={r.get('n')}", "n": _int(r.get("n")),
                                   "metric": metric, "ratio": x, "low": None, "high": None, "n_blocks": 1, "half_width_pct": None, "outcome": None, "blocks_needed": None, "block_ratios": None})  # fmt: skip
    return rows, paired


def _int(v) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _paired_row(key: str, source: str, workload: str, p: dict, point: str) -> dict:
    return {"run_key": key, "source": source, "workload": workload, "engine": str(p.get("engine")), "reference": p.get("reference"), "point": point, "n": _int(p.get("n", p.get("b"))),
            "metric": p.get("metric"), "ratio": number(p.get("ratio")), "low": number(p.get("low")), "high": number(p.get("high")), "n_blocks": _int(p.get("n_blocks")),
            "half_width_pct": number(p.get("half_width_pct")), "outcome": p.get("outcome"), "blocks_needed": _int(p.get("blocks_needed")),
            "block_ratios": [float(x) for x in p.get("ratios") or [] if number(x) is not None] or None}  # fmt: skip


def bench_label(r: dict) -> str:
    return f"PP={r.get('pp')} TG={r.get('tg')} B={r.get('b')}"


def bench_rows(rd, key: str) -> tuple[list[dict], list[dict]]:
    """(rows, paired) of bench.json: one llama-batched-bench table, or the blocks of `bench --engines`."""
    b = rd.bench or {}
    if not isinstance(b.get("rows"), list):
        return [], []
    wl = " ".join(x for x in ("batched-bench", b.get("model") or (rd.summary or {}).get("model")) if x)
    rows = []
    for r in b["rows"]:
        base = {"run_key": key, "source": "bench", "workload": wl, "engine": str(r.get("engine") or b.get("engine")), "point": bench_label(r), "n": _int(r.get("b")),
                "repeat": _int(r.get("repeat", 0)), "valid": True}  # fmt: skip
        rows += [{**base, "metric": m, "value": x} for m in BENCH_METRICS if (x := number(r.get(m))) is not None]
    paired = [_paired_row(key, "bench", wl, p, bench_label(p)) for p in b.get("paired") or []]
    return rows, paired


def lever_rows(rd, key: str) -> tuple[list[dict], list[dict]]:
    """(levers, paired) of a lever A/B's summary.json (kind lever-ab)."""
    s = rd.summary or {}
    if s.get("kind") != "lever-ab":
        return [], []
    meas, k = s.get("measurement") or {}, s.get("key") or {}
    arms = s.get("arms") or {}
    lever = {"run_key": key, "lever": s.get("lever"), "lever_kind": s.get("lever_kind"), "engine": s.get("engine"), "changes": s.get("changes"), "verdict": s.get("verdict"), "why": s.get("why"),
             "metric": k.get("metric") or meas.get("metric"), "point": k.get("point"), "ratio": number(k.get("ratio")), "low": number(k.get("low")), "high": number(k.get("high")),
             "n_blocks": _int(k.get("n_blocks")), "hardware_class": s.get("hardware_class"), "pin": s.get("pin"), "series_digest": s.get("series_digest"),
             "gates_ok": (s.get("gates") or {}).get("ok")}  # fmt: skip
    wl = f"lever {meas.get('kind') or '?'}"
    paired = [_paired_row(key, "lever", wl, {"engine": arms.get("B"), "reference": arms.get("A"), "metric": meas.get("metric"), **p}, str(p.get("point"))) for p in meas.get("points") or []]
    return [lever], paired


def medians(rows: list[dict]) -> list[dict]:
    """Per source x workload x engine x point x metric: the median of the valid repeats."""
    groups: dict[tuple, list[float]] = {}
    for r in rows:
        if r["valid"]:
            groups.setdefault((r["source"], r["workload"], r["engine"], r["point"], r["n"], r["metric"]), []).append(r["value"])
    return [{"run_key": rows[0]["run_key"], "source": k[0], "workload": k[1], "engine": k[2], "point": k[3], "n": k[4], "metric": k[5], "value": statistics.median(v), "repeats": len(v)}
            for k, v in groups.items()]  # fmt: skip


def gates(rd, key: str) -> list[dict]:
    out = []
    if isinstance(rd.gates, dict):
        for phase, s in rd.gates.items():
            if isinstance(s, dict):
                out += [{"run_key": key, "phase": phase, "check": c.get("check"), "expected": _text(c.get("expected")), "got": _text(c.get("got")), "status": c.get("status")} for c in s.get("checks") or [] if isinstance(c, dict)]
    elif rd.gate_rows:
        out = [{"run_key": key, "phase": r.get("phase"), "check": r.get("check"), "expected": _text(r.get("expected")), "got": _text(r.get("got")), "status": r.get("status")} for r in rd.gate_rows]
    return out


def _text(v) -> str | None:
    return None if v is None else str(v)


def telemetry(rd, key: str) -> list[dict]:
    out = []
    for r in rd.rows():
        t = r.telemetry
        if not isinstance(t, dict):
            continue
        row = {"run_key": key, "engine": str(r.engine), "point": _point_label(r), "n": _int(r.n), "repeat": _int(r.repeat), "gpu_source": t.get("gpu"),
               "throttle": json.dumps(t.get("throttle"), sort_keys=True) if t.get("throttle") else None, "foreign_pids": len(t.get("foreign_pids") or []) if isinstance(t.get("foreign_pids"), list) else None}  # fmt: skip
        row.update({k: number(t.get(k)) for k in TELEMETRY})
        out.append(row)
    return out


def positive(paired: list[dict]) -> tuple[list[dict], list[str]]:
    """(the paired rows whose ratio is a ratio: positive; why each other one was left out)."""
    kept, why = [], []
    for p in paired:
        if p["ratio"] is not None and p["ratio"] <= 0:
            cell = f"{p['source']} {p['engine']}/{p['reference']} {p['point']} {p['metric']}"
            why.append(f"paired {cell}: ratio {p['ratio']:g} is not positive, left out")
        else:
            kept.append(p)
    return kept, why


def cells(rd) -> dict[str, list[dict]]:
    """Every table's rows for one run: {table: [row, ...]} (runs holds exactly one row); "left_out":
    the reasons for what of the run's files was not taken (also in the run's notes)."""
    key = run_key(rd)
    b = builds(rd, key)
    srows, spaired = serving_rows(rd, key)
    brows, bpaired = bench_rows(rd, key)
    levers, lpaired = lever_rows(rd, key)
    rows = srows + brows
    paired, left_out = positive(spaired + bpaired + lpaired)
    run = run_row(rd, key, b)
    if left_out:
        run["notes"] = "; ".join([*([run["notes"]] if run["notes"] else []), *left_out])
    return {"runs": [run], "builds": b, "rows": rows, "medians": medians(rows) if rows else [], "paired": paired,
            "gates": gates(rd, key), "telemetry": telemetry(rd, key), "levers": levers,
            "left_out": left_out}  # fmt: skip
