"""Render a dated phase report (markdown + PNGs + sidecar JSON) from one run dir,
optionally A/B against a control run, and append it to the ledger.

Layout in the output dir:
  YYYY-MM-DD-phaseNNN-<slug>.md     the report (JSON-valued front matter)
  YYYY-MM-DD-phaseNNN-<slug>.json   sidecar: ledger row + the data the report shows
  YYYY-MM-DD-phaseNNN-<slug>/*.png  plots, linked from the report
  BENCHMARK.md / BENCHMARK.csv      the ledger
Inside a campaign the report goes to <run dir>/reports/ unless the step says
out_dir (a path, or "profile" for the profile's reports.dir), and it joins the
running ledger (reports.dir, or the step's `ledger:` dir): its phase number
continues the phases of every earlier run there, and its row is appended there
too, linking the report in the run dir.  `ledger: run` keeps a campaign's
reports to its own ledger (phases restart at 1 in each run dir)."""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from parity import results, stats
from parity.metrics import registry
from parity.report import plots
from parity.artifacts import slugify
from parity.files import atomic_write_json, atomic_write_text
from parity.errors import RegressionDetected, UsageError
from parity.report import ledger
from parity.report.rundata import RunData, gate_problems, load_run, values_by_cell
from parity.report.sections import (ab_table, bench_section, buckets_section, definitions, fmt, gates_section, hardware_section, key_ratios,
                                    noise_section, output_parity_section, paired_definition, paired_section, paired_text, provenance_section, ratio_section, reconciliation_section,
                                    reproduce, results_section, server_section, sessions_table, validity_section)
from parity.errors import ConfigError
from parity.options import check_step_options
from parity.report.bench_sections import bench_ab_section
from parity.report.compare import check_regressions, compare_runs
from parity.report.efficiency_sections import efficiency_section
from parity.report.ledger import rebuild
from parity.report.plots import throughput_vs_clock
from parity.report.telemetry_sections import canary_problem, canary_section, plot_points, telemetry_section
from parity.report.runtime_sections import runtime_section, traces_section
from parity.report.ttft_sections import ttft_section
from parity.report.reference_sections import check_references, reference_section
from parity.report.workload_sections import workload_section
from parity.stats.paired import overall

TEMPLATES = Path(__file__).resolve().parent / "templates"
USER_VERDICTS = ("keep", "reject", "default-off")
SUMMARY_KINDS = ("snapshot", "users-snapshot")  # run kinds whose result is their summary


@dataclass
class ReportRequest:
    """What `parity report` (or a campaign's report step) asks for."""

    run: str | None = None
    out_dir: str | None = None  # None: the profile's reports.dir
    phase: int | None = None
    title: str | None = None
    verdict: str | None = None
    compare: str | None = None  # the control run (A); `run` is the candidate (B)
    noise_floor: str | None = None
    metrics: list[str] | None = None
    force: bool = False
    plots: bool = True
    current: bool = False  # the run is the campaign's own, still running
    date: str | None = None
    rebuild_ledger: bool = False  # regenerate BENCHMARK.md/.csv from the reports in out_dir instead
    ledger_dir: str | None = None  # a running ledger to join besides out_dir's own (phases continue there)
    references: list[str] | None = None  # --reference: the headline's engines ("% of" the first, "x over" the rest)


def report(ctx, req: ReportRequest) -> dict:
    """`parity report`: a dated phase report appended to the ledger (or the ledger rebuilt)."""
    from dataclasses import replace

    req = replace(req, out_dir=req.out_dir or ctx.profile.reports.dir)
    if req.rebuild_ledger:
        out = results.run_dir(req.out_dir, "--out-dir directory")
        rows = rebuild(out)
        return {"ledger": str(out / "BENCHMARK.md"), "rows": rows}
    if not req.run:
        raise UsageError("parity report needs a RUN directory (or --rebuild-ledger)")
    return render_report(ctx.profile, req)


def decide(user: str | None, problems: list[str], ab: dict | None, rule: stats.Rule, session: str = "", paired: str = "") -> tuple[str, str]:
    """(verdict, the rule that produced it).  The verdict word is the users' rule's (theirs to
    keep); `paired` (sections.paired_text: the paired block statistics of the run's own
    session, engine/reference) is said beside it, with where the two rules disagree."""
    also = f"; {paired}" if paired else ""
    if problems:
        if user in ("keep", "default-off"):
            raise UsageError(f"--verdict {user}: the run is not valid ({'; '.join(problems)}); only reject is allowed")
        return (user or "invalid"), "not valid: " + "; ".join(problems) + " -- its numbers do not count"
    if ab and ab.get("invalid"):
        why = "; ".join(ab["invalid"])
        if user in ("keep", "default-off"):
            raise UsageError(f"--verdict {user}: the A/B reads numbers that do not count ({why}); "
                             "only reject is allowed")
        return (user or "invalid"), f"the A/B reads numbers that do not count (never a verdict): {why}"
    if ab and ab.get("missing"):
        gaps = "; ".join(ab["missing"])
        if user in ("keep", "default-off"):
            raise UsageError(f"--verdict {user}: the A/B has no verdict where a number is missing ({gaps}); only reject is allowed")
        return (user or "invalid"), f"no verdict where a number is missing (never within noise): {gaps}"
    if user:
        basis = f" (A/B: {ab['counts']['improved']} improved, {ab['counts']['regressed']} regressed, {ab['counts']['within noise']} within noise)" if ab else ""
        return user, f"set by the author (--verdict {user}){basis}{also}"
    if ab is None:
        tail = f"; same session: {session}" if session else ""
        return "measurement-only", f"no A/B control given (--compare): a measurement, not a claim{tail}{also}"
    c = ab["counts"]
    tail = f"users' rule, A vs B: {c['improved']} improved, {c['regressed']} regressed, {c['within noise']} within noise under: {rule.text()}"
    if paired:
        tail += f"; within B's session, {paired}"
    if c["regressed"]:
        return "reject", f"a metric regressed beyond noise ({tail})"
    if c["improved"]:
        return "keep", f"improved beyond noise with no regression ({tail})"
    return "default-off", f"nothing beat the noise threshold: keep only default-off, not a speedup claim ({tail})"


# ----------------------------------------------------------------- plots


def draw_plots(rd: RunData, ab: dict | None, asset_dir: Path, rel: str, paired: dict | None = None) -> tuple[list[dict], str | None]:
    try:
        import matplotlib  # noqa: F401
    except ImportError as e:
        return [], f"plots unavailable (matplotlib: {e})"
    out = []
    summary = rd.summary or {}
    spreads = {k: (min(v.values()), max(v.values())) for k, v in values_by_cell(rd, "decode_agg_tps").items() if v}
    rates = [m for m in registry.headline() if registry.direction(m) == "higher"]  # a TTFT ratio would stretch the axis
    jobs = [
        ("decode t/s vs N per engine", "decode_tps_vs_n.png", lambda p: plots.throughput_vs_n(summary.get("medians") or [], spreads, p)),
        (f"ratio vs {summary.get('reference_engine')} by N", "ratio_vs_n.png",
         lambda p: plots.ratio_vs_n(summary.get("ratios") or [], rates, p, plots.ratio_spreads(rd.rows(), summary.get("reference_engine"), rates))),
        (f"paired block ratios vs {summary.get('reference_engine')} (geometric mean, interval, +-threshold band)", "paired_blocks.png",
         lambda p: plots.paired_blocks(paired["points"], p, paired["threshold_pct"]) if paired else None),
        ("kernel buckets", "buckets.png", lambda p: plots.bucket_bars((rd.analysis or {}).get("captures") or [], p)),
        ("A/B deltas with noise bands", "ab_deltas.png", lambda p: plots.ab_deltas(ab["rows"], p) if ab else None),
        ("throughput per repeat beside SM clock and power", "telemetry.png", lambda p: telemetry_plot(rd, p)),
    ]
    for title, name, fn in jobs:
        path = fn(asset_dir / name)
        if path is not None:
            out.append({"title": title, "file": f"{rel}/{name}", "path": str(path)})
    return out, None


def telemetry_plot(rd: RunData, path: Path):
    """Only when the run has GPU telemetry (parity/telemetry)."""

    return throughput_vs_clock(plot_points(rd), path)


# ----------------------------------------------------------------- render


def template_env():
    """The jinja environment of parity's report templates (filters fmt, cell, tojson_line)."""
    return _env()


def _env():
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined, autoescape=False)
    env.filters["fmt"] = fmt
    env.filters["tojson_line"] = lambda v: json.dumps(v)
    env.filters["cell"] = lambda v: str("-" if v is None or v == "" else v).replace("|", "\\|").replace("\n", " ")
    return env


def default_title(rd: RunData) -> str:
    s = rd.summary or {}
    engines = " vs ".join(s.get("engines") or []) or "run"
    return f"{rd.manifest.get('kind') or 'run'} {s.get('model') or ''} {engines}".replace("  ", " ").strip()


def render_report(profile, req: ReportRequest) -> dict:
    """The report, its sidecar and its ledger rows, written while the ledgers it joins are
    locked: two reports into one directory at once take phases N and N+1 (before, both took N,
    and with one title the second overwrote the first)."""
    if req.verdict is not None and req.verdict not in USER_VERDICTS:  # bad input: refused before any ledger lock file
        raise UsageError(f"--verdict {req.verdict}: must be one of {', '.join(USER_VERDICTS)}")
    if req.phase is not None and req.phase <= 0:
        raise UsageError("--phase must be a positive integer")
    rd = load_run(req.run, need_summary=False)  # a gates-only run still gets a report
    if not rd.summary and rd.manifest.get("kind") in SUMMARY_KINDS:  # its result is gone: no measurement to record
        files = "summary.tsv or <arm>/nNNN.json rows" if rd.manifest["kind"] == "users-snapshot" else "summary.json"
        status = rd.manifest.get("status")
        raise UsageError(f"{req.run}: a {rd.manifest['kind']} run without its results (no {files}; status {status}): "
                         "nothing to report")
    bad = canary_problem(rd.summary or {})
    if bad:  # checked before any lock or file: a crafted entry is one line, not a half-written report
        raise UsageError(f"{rd.path / 'summary.json'}: {bad}: cannot report it")
    if req.compare and not rd.summary:
        raise UsageError(f"{req.run}: no summary.json to compare (not a snapshot run, or it failed before any result)")
    check_references(rd, req.references)
    dirs = sorted({_resolved(d) for d in (req.out_dir, req.ledger_dir) if d})  # one order everywhere: no deadlock
    with contextlib.ExitStack() as held:
        for d in dirs:
            try:
                held.enter_context(ledger.locked(Path(d)))
            except OSError:  # not a usable directory: the report below says so, as it did unlocked
                pass
        return _render_report(profile, req, rd, held)


def _render_report(profile, req: ReportRequest, rd: RunData, held: contextlib.ExitStack) -> dict:
    rule = stats.Rule.from_config(profile.stats)
    metrics = req.metrics or list(profile.stats.metrics)
    ab = None
    if req.compare:
        control = load_run(req.compare)
        floor = load_run(req.noise_floor) if req.noise_floor else None
        ab = compare_runs(control, rd, metrics, rule, force=req.force, floor=floor, current=rd if req.current else None, defaults=not req.metrics)
    out_dir = _made_dir(req.out_dir, "--out-dir")
    running = Path(os.path.expanduser(req.ledger_dir)) if req.ledger_dir else None
    if running is not None and running.resolve() == out_dir.resolve():
        running = None
    if running is not None:
        running = _made_dir(req.ledger_dir, "the running ledger (reports.dir or the step's ledger:)")
    for d in (out_dir, running):
        if d is not None:
            ledger.read_rows(d)  # a broken ledger stops the report here, before anything is written
    phase = req.phase or max(ledger.next_phase(out_dir), ledger.next_phase(running) if running else 1)
    title = req.title or default_title(rd)
    date = req.date or _dt.date.today().isoformat()
    stem = f"{date}-phase{phase:03d}-{slugify(title)}"
    md_path = out_dir / f"{stem}.md"
    if md_path.exists():
        raise UsageError(f"{md_path} already exists (the ledger is append-only): pick another --phase or --title")
    problems = gate_problems(rd, current=req.current)
    paired = paired_section(rd, list(profile.stats.metrics), profile.stats.min_delta_pct, profile.stats.confidence) if rd.summary else None
    ptext = paired_text(paired) if paired else ""
    verdict, verdict_rule = decide(req.verdict, problems, ab, rule, (rd.summary or {}).get("headline") or "", ptext)
    assets, staging = out_dir / stem, _staging(out_dir, stem, held)  # plots land in staging, published with the report
    figs, plot_note = draw_plots(rd, ab, staging, stem, paired) if req.plots else ([], "plots disabled")
    defs, defs_note = definitions(list(dict.fromkeys(registry.columns() + metrics)), rd.summary)
    row = {"date": date, "phase": phase, "title": title, "verdict": verdict, "key_ratios": key_ratios(rd, (paired or {}).get("points")), "report": md_path.name, "artifact": str(rd.path)}
    res = results_section(rd)

    workload = workload_section(rd, staging, stem, plots=req.plots)

    efficiency = efficiency_section(rd, staging, stem, plots=req.plots)
    prov, gates = provenance_section(rd), gates_section(rd, problems)
    ctx = {
        "front": {"phase": phase, "date": date, "title": title, "verdict": verdict, "run": str(rd.path), "compare": ab["a"] if ab else None, "key_ratios": row["key_ratios"], "forced": bool(ab and ab["forced"]),
                  "paired": paired_overall(paired)},
        "phase": phase, "date": date, "title": title, "verdict": verdict, "verdict_rule": verdict_rule, "rule": rule.text(),
        "run": rd, "manifest": rd.manifest, "hardware": hardware_section(rd), "provenance": prov, "provenance_rows": [[p[k] for k in ("engine", "source", "series", "tree", "flags", "cuda_archs", "key")] for p in prov],
        "gates": gates, "gate_rows": [[g.get(k) for k in ("phase", "check", "expected", "got", "status")] for g in gates["rows"]], "results": res, "noise": noise_section(rd, metrics), "ratios": ratio_section(rd), "paired": paired, "paired_text": ptext,
        "paired_definition": paired_definition(paired["threshold_pct"] if paired else profile.stats.min_delta_pct, paired["confidence"] if paired else profile.stats.confidence),
        "validity": validity_section(rd), "reconciliation": reconciliation_section(rd), "server": server_section(rd), "output_parity": output_parity_section(rd),
        "buckets": buckets_section(rd), "bench": bench_section(rd), "bench_ab": bench_ab_section(rd), "ab": ab, "ab_rows": ab_table(ab) if ab else [], "sessions_rows": sessions_table(ab) if ab else [], "plots": figs, "plot_note": plot_note,
        "definitions": defs, "definitions_note": defs_note, "reproduce": reproduce(rd), "notes": rd.notes, "workload": workload, "efficiency": efficiency,
        "telemetry": telemetry_section(rd), "canary": canary_section(rd), "ttft": ttft_section(rd),
        "runtime": runtime_section(rd), "traces": traces_section(rd), "against": reference_section(rd, req.references),
    }
    text = _env().get_template("report.md.j2").render(**ctx)
    _publish(staging, assets)
    figs = [{**f, "path": str(assets / Path(f["path"]).relative_to(staging))} for f in figs]
    atomic_write_text(md_path, text)
    side = {"ledger": row, "verdict_rule": verdict_rule, "gate_problems": problems, "compare": ab, "paired": paired and {k: paired[k] for k in ("points", "source", "counts", "disagree", "threshold_pct", "confidence")}, "plots": [f["file"] for f in figs] + [f["file"] for f in (workload or {}).get("plots", [])] + [f["file"] for f in (efficiency or {}).get("plots", [])], "results": res}
    if ctx["against"]:
        side["against"] = ctx["against"]["data"]
    atomic_write_json(out_dir / f"{stem}.json", side)
    ledger.append(out_dir, row)
    if running is not None:  # the running ledger links the report where it lives (the run dir)
        ledger.append(running, {**row, "report": os.path.relpath(md_path.resolve(), running.resolve())})
    return {"report": str(md_path), "sidecar": str(out_dir / f"{stem}.json"), "ledger": str(out_dir / "BENCHMARK.md"), "phase": phase, "verdict": verdict, "verdict_rule": verdict_rule, "plots": [f["path"] for f in figs], "forced": bool(ab and ab["forced"]),
            "ab_rows": ab["rows"] if ab else [], "running_ledger": str(running / "BENCHMARK.md") if running else None,
            "paired": (paired or {}).get("points") or [], "paired_overall": paired_overall(paired), "paired_source": (paired or {}).get("source"),
            **({"against": ctx["against"]["data"]} if ctx["against"] else {})}


def _staging(out_dir: Path, stem: str, held: contextlib.ExitStack) -> Path:
    """A hidden directory beside the report's assets, removed when the report ends (a refusal or
    a crash after some plots leaves nothing behind)."""
    staging = Path(tempfile.mkdtemp(prefix=f".{stem[:80]}.", suffix=".tmp", dir=out_dir))
    held.callback(shutil.rmtree, staging, ignore_errors=True)
    return staging


def _publish(staging: Path, assets: Path) -> None:
    """The staged plots become the report's assets dir (an orphan one of a report never written is replaced)."""
    if not any(staging.iterdir()):
        return
    if assets.is_dir() and not assets.is_symlink():
        shutil.rmtree(assets)
    os.replace(staging, assets)


def _resolved(path: str) -> str:
    try:
        return str(Path(os.path.expanduser(path)).resolve())
    except (OSError, RuntimeError, ValueError):  # not a usable path: _made_dir says so in one line
        return str(path)


def _made_dir(path: str, what: str) -> Path:
    p = Path(os.path.expanduser(path))
    try:
        if p.exists() and not p.is_dir():
            raise UsageError(f"{what} {path}: a file, not a directory")
        p.mkdir(parents=True, exist_ok=True)
    except (OSError, ValueError) as e:
        raise UsageError(f"{what} {str(path)[:200]}: cannot create it ({getattr(e, 'strerror', None) or e})") from None
    return p


def paired_overall(paired: dict | None) -> str | None:
    """One word over the run's paired outcomes (None: no paired statistics)."""
    if not paired or not paired["points"]:
        return None

    return overall(p.get("outcome") for p in paired["points"])


def earlier_runs(rd) -> list[tuple[Path, dict]]:
    """The earlier runs of the same campaign (or command) beside rd, oldest first, with their
    manifests (a sibling whose manifest is broken is none of them)."""
    me = rd.manifest()
    key = ((me.get("campaign") or {}).get("name"), me.get("kind"))
    out = []
    for m in sorted(rd.path.parent.glob("*/manifest.json")):
        if m.parent.name >= rd.path.name:  # this run and later ones
            continue
        try:
            other = results.read_manifest(m).data
        except results.BadResultFile:
            continue
        if ((other.get("campaign") or {}).get("name"), other.get("kind")) == key:
            out.append((m.parent, other))
    return out


def previous_run(rd) -> str | None:
    """The newest earlier run of the same campaign (or command) beside rd that completed with
    green gates: the nightly's control run."""
    good = [str(p) for p, m in earlier_runs(rd) if m.get("status") == "complete" and m.get("valid", True)]
    return good[-1] if good else None


def campaign_step(ctx, options: dict) -> dict:
    """kind: report -- renders the campaign's own run.  Options {title, phase,
    verdict, compare, noise_floor, metrics, out_dir, plots, force, fail_on_regression, ledger};
    out_dir defaults to <run>/reports ("profile" = the profile's reports.dir);
    ledger: running (default: join the profile's reports.dir ledger, phases continue across
    runs) | run (the run dir's own ledger only) | a directory (that running ledger);
    compare: previous = the newest earlier complete, valid run of this campaign.  With a
    control run, a regression beyond noise or a missing number fails the step (exit 5) after
    the report is written, unless fail_on_regression: false; so do earlier runs of which none
    can be the control (the first run has none and passes)."""

    check_step_options("report", options, {"title", "phase", "verdict", "compare", "noise_floor", "metrics", "out_dir", "plots", "force", "fail_on_regression", "ledger"})
    rd = ctx.require_run()
    out_dir = options.get("out_dir") or str(rd.path / "reports")
    if out_dir == "profile":
        out_dir = ctx.profile.reports.dir
    which = options.get("ledger", "running")
    if not isinstance(which, str) or not which:
        raise ConfigError("campaign", "with.ledger", "running, run, or a directory")
    ledger_dir = None if which == "run" else ctx.profile.reports.dir if which == "running" else which
    compare = options.get("compare")
    no_control = None
    if compare == "previous":
        compare = previous_run(rd)
        ctx.out.info(f"report: control run {compare}" if compare else "report: no earlier complete run of this campaign to compare against")
        earlier = earlier_runs(rd) if compare is None else []
        if earlier:  # the first run has no control; a later one without a usable control checked nothing
            p, m = earlier[-1]
            no_control = (f"no control run: {len(earlier)} earlier run(s) of this campaign, none complete with green gates "
                          f"(newest {p.name}: status {m.get('status')}{', valid=false' if m.get('valid') is False else ''}); nothing was checked for a regression")  # fmt: skip
    req = ReportRequest(run=str(rd.path), out_dir=out_dir, phase=options.get("phase"), title=options.get("title"), verdict=options.get("verdict"),
                        compare=compare, noise_floor=options.get("noise_floor"), metrics=options.get("metrics"),
                        force=bool(options.get("force", False)), plots=bool(options.get("plots", True)), current=True, ledger_dir=ledger_dir)
    result = render_report(ctx.profile, req)
    ctx.out.info(f"report: {result['report']} (phase {result['phase']}, verdict {result['verdict']})" + (f"; ledger {result['running_ledger']}" if result["running_ledger"] else ""))
    if options.get("fail_on_regression", True):
        check_regressions(result["ab_rows"], f" against {compare} (report {result['report']})")
        if no_control:
            raise RegressionDetected(f"{no_control} (report {result['report']})")
    return result
