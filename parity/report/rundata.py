"""Read a run directory's files (names from docs/CONTRACTS.md) into one object,
and say whether its gates are green.  Missing optional files are None.

An artifact dir of the users' harness (paged-current-serving-snapshot.sh: summary.tsv,
<arm>/nNNN.json, gate_summary.tsv, hardware.txt; no manifest.json) is read into the
same object (load_users_artifact), so `parity compare` and `parity report` take it
beside a parity run."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

from parity import results, stats, tables
from parity.metrics import registry
from parity.results import model
from parity.errors import UsageError
from parity.artifacts import RunDir


@dataclass
class RunData:
    path: Path
    manifest: dict
    hardware: dict | None = None
    gates: dict | None = None
    gate_rows: list[dict] | None = None  # gate_checks.tsv (or a gate_summary.tsv, either layout)
    summary: dict | None = None
    builds: dict | None = None
    analysis: dict | None = None
    bench: dict | None = None  # bench.json (llama-batched-bench)
    notes: list[str] = field(default_factory=list)  # unreadable files
    points: list[model.PointRow] | None = None  # summary.json's rows as the reader typed them

    @property
    def run_id(self) -> str:
        return self.manifest.get("run_id") or self.path.name

    @property
    def hardware_class(self) -> str | None:
        return (self.hardware or {}).get("hardware_class")

    def rows(self) -> list[model.PointRow]:
        """The summary's rows, typed (a summary set by hand or from a users' artifact: typed here)."""
        if self.points is not None:
            return list(self.points)
        return model.point_rows((self.summary or {}).get("rows") or [])


def _json(path: Path, notes: list[str], shape=dict):
    """An optional side file (hardware, gates, builds, analysis, the users' nNNN.json) checked as
    its model (results.model): its content, else None with a note saying why it is left out."""
    if not path.exists():
        return None
    try:
        return results.check(results.load_json(path), shape, path, "").data
    except results.BadResultFile as e:
        notes.append(f"{e}: left out")
        return None


def _result(read, path: Path):
    """summary.json / bench.json through the typed reader: None when absent, one line (exit 2) when bad."""
    return read(path).data if path.exists() else None


USERS_STATUS = {"ok": "pass", "skipped": "not-run", "mismatch": "fail", "fail": "fail", "missing": "error"}


def parse_gate_summary(text: str) -> list[dict]:
    """Gate rows {phase, check, expected, got, status (pass|fail|error|not-run)} from parity's
    gate_checks.tsv (phase check expected got status; gate_summary.tsv of runs before it was
    renamed) or from a gate_summary.tsv in the users' layout (phase check status actual expected
    details: ok/skipped/mismatch/fail/missing)."""
    layout, table = tables.gate_table(text)
    if layout == "parity":
        return tables.records(table)
    return [{"phase": r["phase"], "check": r["check"], "expected": r["expected"] or "-", "got": r["actual"] or "-",
             "status": USERS_STATUS.get(r["status"], "error"), "detail": r["details"]}
            for r in tables.records(table)]


def load_run(path, *, need_summary: bool = True) -> RunData:
    p = results.run_dir(path).resolve()
    if not (p / "manifest.json").exists() and is_users_artifact(p):
        return load_users_artifact(p, need_summary=need_summary)
    notes: list[str] = []
    if not (p / "manifest.json").exists():
        raise UsageError(f"{path}: not a parity run directory (no manifest.json)")
    manifest = results.read_manifest(p / "manifest.json").filled()
    if manifest.get("status") == "running":
        if RunDir(p).settle("report"):  # its parity was killed: it will never end by itself
            manifest = results.read_manifest(p / "manifest.json").filled()
    rd = RunData(p, manifest, notes=notes)
    rd.hardware = _json(p / "hardware.json", notes, model.Hardware)
    rd.gates = _json(p / "gates.json", notes, model.Gates)
    summary = results.read_summary(p / "summary.json") if (p / "summary.json").exists() else None
    rd.summary = summary.data if summary else None
    rd.points = summary.typed.rows if summary and isinstance(summary.typed, model.Summary) else None  # lever A/B: none
    rd.builds = _json(p / "builds.json", notes, model.Builds)
    rd.analysis = _json(p / "profile" / "analysis.json", notes, model.Analysis)
    rd.bench = _result(results.read_bench, p / "bench.json")
    tsv = next((f for f in (p / "gate_checks.tsv", p / "gate_summary.tsv") if f.is_file()), p / "gate_checks.tsv")
    if tsv.is_file():
        try:
            rd.gate_rows = parse_gate_summary(tsv.read_text())
        except (ValueError, csv.Error) as e:
            notes.append(str(e))
    if need_summary and not rd.summary:
        raise UsageError(f"{path}: no summary.json (not a snapshot run, or it failed before any result)")
    return rd


# --------------------------------------------------------------------------- the users' artifacts

def users_summary_columns() -> list[str]:
    return ["arm", "n", *registry.users_columns()]


def users_ratio_columns(engine: str = "paged", reference: str = "vllm") -> dict[str, str]:
    """Their ratio block's column -> its metric (<engine>_<name>_over_<reference>; their arms)."""
    return {f"{engine}_{short}_over_{reference}": m for m, short in registry.users_ratios().items()}


def is_users_artifact(p: Path) -> bool:
    head = (p / "summary.tsv").read_text(errors="replace").split("\n", 1)[0] if (p / "summary.tsv").is_file() else ""
    return head.split("\t")[:2] == ["arm", "n"] or any(p.glob("*/n[0-9]*.json"))


def parse_users_summary(text: str) -> tuple[list[dict], list[dict]]:
    """The users' summary.tsv: (rows [{arm, n, agg_tps, ...}], ratios [{ratio, n, paged_decode_over_vllm, ...}])
    (parity.tables.users_summary: the arm table, a blank line, the `ratio` block)."""
    arms, ratios = tables.users_summary(text, columns=users_summary_columns())
    return tables.records(arms), [r for block in ratios for r in tables.records(block)]


def parse_users_hardware(text: str) -> dict:
    """The users' hardware.txt (write_hardware_report): its key=value lines, plus the GPU from nvidia-smi -L."""
    info = dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith(" "))
    gpu = next((ln.split(":", 1)[1].split("(")[0].strip() for ln in text.splitlines() if ln.startswith("GPU 0:")), None)
    return {"hardware_class": info.get("hardware_class"), "gpus": [{"name": info.get("gpu_name") or gpu}] if (info.get("gpu_name") or gpu) else [],
            "parity_note": info.get("parity_note"), "source": "users' hardware.txt"}  # fmt: skip


def _users_gates(rows: list[dict]) -> dict:
    """gates.json's shape from the users' gate_summary.tsv rows (a `skipped` phase is absent)."""
    sets: dict[str, dict] = {}
    for r in rows:
        if r["status"] == "not-run" and r["check"] == "all":
            continue
        s = sets.setdefault(r["phase"], {"phase": r["phase"], "checks": []})
        s["checks"].append({"check": r["check"], "kind": "md5" if r["check"].endswith("_md5") else "op", "expected": r["expected"], "got": r["got"], "status": r["status"], "detail": r.get("detail", "")})
    for s in sets.values():
        s["status"] = "pass" if s["checks"] and all(c["status"] == "pass" for c in s["checks"]) else "fail"
    return {**sets, "status": "pass" if sets and all(s["status"] == "pass" for s in sets.values()) else "fail"}


def load_users_artifact(p: Path, *, need_summary: bool = True) -> RunData:
    """An artifact dir of the users' harness as RunData: one repeat per (arm, n), the arm as the engine;
    rows from summary.tsv, each merged with its <arm>/nNNN.json (their h2h output, every number in it)."""
    notes: list[str] = []
    rows: list[dict] = []
    ratios: list[dict] = []
    if (p / "summary.tsv").is_file():
        try:
            rows, ratios = parse_users_summary((p / "summary.tsv").read_text())
        except (ValueError, csv.Error) as e:
            notes.append(str(e))
    have = {(r["arm"], r["n"]) for r in rows}
    for f in sorted(p.glob("*/n[0-9]*.json")):
        data = _json(f, notes)
        if not isinstance(data, dict) or "n" not in data:
            continue
        if not isinstance(data["n"], int) or isinstance(data["n"], bool):
            notes.append(f"{f}: n is {data['n']!r}, not an integer: left out")
            continue
        key = (f.parent.name, data["n"])
        nums = {k: v for k, v in data.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
        if key in have:
            theirs = users_summary_columns()
            row = next(r for r in rows if (r["arm"], r["n"]) == key)
            row.update({k: v for k, v in nums.items() if k not in theirs})
        else:
            rows.append({"arm": key[0], **nums, "n": key[1]})
    parity_rows = [{"engine": r["arm"], "repeat": 0, **{k: v for k, v in r.items() if k != "arm"}, "source": "users' summary.tsv"} for r in rows]
    engines = list(dict.fromkeys(r["engine"] for r in parity_rows))
    reference = "vllm" if "vllm" in engines else None
    summary = None
    if parity_rows:
        named = users_ratio_columns()
        summary = {
            "kind": "snapshot",
            "source": "users' harness (paged-current-serving-snapshot.sh)",
            "engines": engines,
            "reference_engine": reference,
            "rows": parity_rows,
            "medians": [{**{k: v for k, v in r.items() if k not in ("repeat", "source")}, "repeats": 1} for r in parity_rows],
            "ratios": [{"engine": "paged", "reference": "vllm", "n": r["n"],
                        **{named[k]: v for k, v in r.items() if k in named}} for r in ratios],
        }
    manifest = {"run_id": p.name, "kind": "users-snapshot", "status": "complete", "valid": True, "source": "users' harness", "host": None, "argv": []}
    rd = RunData(p, manifest, notes=notes)
    rd.summary = summary
    if (p / "hardware.txt").is_file():
        rd.hardware = parse_users_hardware((p / "hardware.txt").read_text(errors="replace"))
    gs = p / "gate_summary.tsv"
    if gs.is_file():
        try:
            rd.gate_rows = parse_gate_summary(gs.read_text())
            rd.gates = _users_gates(rd.gate_rows)
        except (ValueError, csv.Error) as e:
            notes.append(str(e))
    if need_summary and not rd.summary:
        raise UsageError(f"{p}: an artifact dir of the users' harness without summary.tsv or <arm>/nNNN.json rows")
    return rd


def gate_problems(rd: RunData, *, current: bool = False) -> list[str]:
    """Why this run's numbers are not trustworthy; [] when gates are green.
    current=True: the run is still in progress (a campaign reporting on itself)."""
    m = rd.manifest
    out = []
    if m.get("valid") is False:
        out.append("manifest valid=false (" + "; ".join(m.get("invalid_reasons") or ["no reason"]) + ")")
    status = m.get("status")
    if status in ("failed", "interrupted", None) or (status == "running" and not current):
        out.append(f"run status {status}" if status else "manifest.json has no status (did the run end?)")
    bad_rows = invalid_rows(rd)
    if bad_rows:
        more = "; ..." if len(bad_rows) > 3 else ""
        shown = "; ".join(bad_rows[:3]) + more
        out.append(f"summary.json: {len(bad_rows)} of {len(rd.rows())} row(s) invalid ({shown})")
    elif (rd.summary or {}).get("valid") is False:
        points = (rd.summary or {}).get("invalid_points") or ["no reason"]
        out.append("summary.json valid=false (" + "; ".join(map(str, points)) + ")")
    g = rd.gates
    if not isinstance(g, dict):
        users = m.get("kind") == "users-snapshot"
        out.append(f"no gate_summary.tsv (ungated, or not summarized: parity gate summarize {rd.path})" if users else "no gates.json (ungated)")
        return out
    for phase in ("pre", "post"):
        s = g.get(phase)
        if not isinstance(s, dict):
            out.append(f"no {phase}-gate")
        elif s.get("status") != "pass":
            bad = [c.get("check", "?") for c in s.get("checks", []) if c.get("status") != "pass"]
            out.append(f"{phase}-gate red" + (f": {', '.join(bad)}" if bad else ""))
    if g.get("status") != "pass" and not any("gate red" in o for o in out):
        out.append(f"gates.json status {g.get('status')}")
    return out


def row_valid(r: model.PointRow) -> bool:
    """A summary row counts only while it says valid (rows of runs before parity marked them lack the key)."""
    return r.valid is True


def invalid_rows(rd: RunData) -> list[str]:
    """"paged r0 N=1: why" for every row marked invalid."""
    rows = enumerate(rd.rows())
    return [f"{r.engine} r{_repeat(r, i)} N={r.n}: {why_invalid(r)}" for i, r in rows if not row_valid(r)]


def _repeat(r: model.PointRow, i: int):
    """The row's repeat; its place among the rows when it has none (a users' artifact, an old run)."""
    return i if r.repeat is None else r.repeat


def why_invalid(r: model.PointRow) -> str:
    return "; ".join(map(str, r.invalid_reasons or [])) or "no reason"


def values_by_cell(rd: RunData, metric: str) -> dict[tuple[str, int], dict[int, float]]:
    """{(engine, n): {repeat: value}} for one metric from the valid summary rows' usable values."""
    out: dict[tuple[str, int], dict[int, float]] = {}
    for i, r in enumerate(rd.rows()):
        v = r.metric(metric)
        if not row_valid(r) or not stats.usable(v):
            continue
        out.setdefault((str(r.engine), int(r.n)), {})[int(_repeat(r, i))] = float(v)
    return out


def cells(rd: RunData, metric: str) -> dict[tuple[str, int], dict]:
    """{(engine, n): {"values": {repeat: value}, "gaps": [why a repeat has no value], "invalid": [the
    invalid rows' gaps]}} for one metric: every row is read, and a row marked invalid, or whose value is
    absent, null, non-finite, out of the statistics' range or not a number, is a gap (never a value)."""
    out: dict[tuple[str, int], dict] = {}
    for i, r in enumerate(rd.rows()):
        key = (str(r.engine), r.n)  # n: an N, or a workload's rate
        cell = out.setdefault(key, {"values": {}, "gaps": [], "invalid": []})
        v, repeat = r.metric(metric), _repeat(r, i)
        if not row_valid(r):
            cell["invalid"].append(f"r{repeat}: invalid ({why_invalid(r)})")
        elif stats.usable(v):
            cell["values"][int(repeat) if isinstance(repeat, int) else i] = float(v)
        else:
            cell["gaps"].append(f"r{repeat}: {no_value(r, metric)}")
    return out


def no_value(r: model.PointRow, metric: str) -> str:
    """Why a valid row has no value of metric: absent, null, a number the statistics cannot hold, not a number."""
    if metric in r.info:
        return f"a {type(r.info[metric]).__name__}"
    if metric not in r.metrics or r.metrics[metric] is None:
        return "absent" if metric not in r.metrics else "null"
    v = r.metrics[metric]
    lo, hi = stats.RANGE
    return repr(v) if not math.isfinite(v) else f"{v:g} (beyond the statistics' range {lo:g}..{hi:g})"
