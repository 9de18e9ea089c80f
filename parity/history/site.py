"""`parity history site OUT/`: a static dashboard of the store (no server, no script, nothing
fetched): index.html lists the open change points with their bisections and every series; one page
per series plots its points (inline SVG: each run's value with its paired interval, the segment
means, the change points marked) above a table of its runs; one page per run holds its
provenance and a copy of its report."""

from __future__ import annotations

import html
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from parity.files import sha256
from parity.errors import UsageError
from parity.history import cells as run_cells
from parity.history import store
from parity.history.changes import ChangesRequest, analyse_all, check, left_out

CSS = """body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222}table{border-collapse:collapse;margin:8px 0}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}th{background:#f3f3f3}
code{font-size:12px;background:#f6f6f6;padding:1px 3px}.worse{color:#b00}.better{color:#070}.muted{color:#777}
svg text{font:11px system-ui,sans-serif}"""
MEMBERS = ("a run is a point of its series when it completed (or failed only on a verdict), is valid and its gates "
           "passed")
# the users' headline numbers, in this order: serving decode and TTFT, batched-bench decode
HEADLINE = ("decode_agg_tps", "ttft_mean_ms", "s_tg", "decode_perseq_tps", "agg_tps")
RUN_FIELDS = ("run_id", "kind", "status", "valid", "gate_status", "problems", "run_at", "hostname", "hardware_class", "gpu", "driver", "cuda_version", "cpu",
              "pin", "series_digest", "build_keys", "engines", "reference_engine", "model", "profile", "campaign", "parity_version", "parity_git_sha", "path", "argv")  # fmt: skip


@dataclass
class SiteRequest:
    """What `parity history site` asks for."""

    out: str
    store: str | None = None
    match: str | None = None
    kind: str = "paired"
    max_pvalue: float = ChangesRequest.max_pvalue
    window: int = ChangesRequest.window
    min_points: int = ChangesRequest.min_points
    min_after: int = ChangesRequest.min_after


def esc(v) -> str:
    return html.escape("-" if v is None else str(v))


def slug(text: str) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60]
    return f"{base}-{sha256(text).hexdigest()[:8]}"


def page(title: str, body: str, up: str = "") -> str:
    nav = f'<p><a href="{up}index.html">all series and change points</a></p>' if up else ""
    return f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title><style>{CSS}</style></head>\n<body>{nav}<h1>{esc(title)}</h1>\n{body}\n</body></html>\n'


def fmt(v, digits: int = 4) -> str:
    return "-" if v is None else f"{v:.{digits}f}" if isinstance(v, float) else esc(v)


def interval(p: dict) -> str:
    return "-" if p.get("low") is None else f"[{fmt(p['low'])}, {fmt(p['high'])}]"


def pct(v) -> str:
    return "-" if v is None else f"{v:+.2f}%"


def svg_plot(points: list[dict], changes: list[dict], width: int = 900, height: int = 320) -> str:
    """The series: a dot per run (its paired interval as a whisker), the mean of each segment
    between change points, a dashed line at each change point with its step; 1.0 marked for ratios."""
    left, right, top, bottom = 64, 16, 16, 48
    vals = [p["value"] for p in points] + [p[k] for p in points for k in ("low", "high") if p.get(k) is not None]
    lo, hi = min(vals), max(vals)
    if points[0]["kind"] == "paired":
        lo, hi = min(lo, 1.0), max(hi, 1.0)
    pad = (hi - lo) * 0.08 or abs(hi) * 0.01 or 1.0
    lo, hi = lo - pad, hi + pad
    n = len(points)
    x = lambda i: left + (width - left - right) * (i + 0.5) / n  # noqa: E731
    y = lambda v: top + (height - top - bottom) * (hi - v) / (hi - lo)  # noqa: E731
    parts = [f'<svg class="series-plot" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" data-points="{n}" data-changes="{len(changes)}">',
             f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{height - top - bottom}" fill="#fcfcfc" stroke="#ccc"/>']  # fmt: skip
    for k in range(5):
        v = lo + (hi - lo) * k / 4
        parts.append(f'<line x1="{left - 4}" x2="{width - right}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#eee"/><text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.4g}</text>')
    if points[0]["kind"] == "paired":
        parts.append(f'<line class="unity" x1="{left}" x2="{width - right}" y1="{y(1.0):.1f}" y2="{y(1.0):.1f}" stroke="#999" stroke-dasharray="2,3"/>')
    every = max(1, n // 10)
    for i in range(0, n, every):
        parts.append(f'<text x="{x(i):.1f}" y="{height - bottom + 16}" text-anchor="middle">{i + 1}</text>')
    parts.append(f'<text x="{(left + width - right) / 2:.0f}" y="{height - 8}" text-anchor="middle">run (time order)</text>')
    cuts = [0, *[c["index"] for c in changes], n]
    for a, b in zip(cuts, cuts[1:]):
        if b > a:
            m = sum(p["value"] for p in points[a:b]) / (b - a)
            parts.append(f'<line class="segment" x1="{x(a) - 4:.1f}" x2="{x(b - 1) + 4:.1f}" y1="{y(m):.1f}" y2="{y(m):.1f}" stroke="#4a7" stroke-width="2"/>')
    for i, p in enumerate(points):
        if p.get("low") is not None and p.get("high") is not None:
            parts.append(f'<line class="whisker" x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{y(p["low"]):.1f}" y2="{y(p["high"]):.1f}" stroke="#89a"/>')
        tip = f'{p["run_id"]}: {p["value"]:.4f}' + (f' [{p["low"]:.4f}, {p["high"]:.4f}]' if p.get("low") is not None else "")
        parts.append(f'<circle class="pt" cx="{x(i):.1f}" cy="{y(p["value"]):.1f}" r="3.5" fill="#246"><title>{esc(tip)}</title></circle>')
    for c in changes:
        cx = (x(c["index"] - 1) + x(c["index"])) / 2
        color = "#b00" if c["direction"] == "worse" else "#070"
        parts.append(f'<line class="cp" x1="{cx:.1f}" x2="{cx:.1f}" y1="{top}" y2="{height - bottom}" stroke="{color}" stroke-dasharray="5,3" stroke-width="1.5"/>'
                     f'<text x="{cx + 4:.1f}" y="{top + 14}" fill="{color}">{esc(pct(c["step_pct"]))} [{esc(pct(c["low_pct"]))}, {esc(pct(c["high_pct"]))}]</text>')  # fmt: skip
    parts.append("</svg>")
    return "\n".join(parts)


def run_page(run: dict, builds: list[dict], cells: list[dict], report: str | None) -> str:
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(store.plain(run.get(k)))}</td></tr>" for k in RUN_FIELDS)
    b = "".join(f"<tr><td>{esc(x['engine'])}</td><td>{esc(x['build_key'])}</td><td>{esc(x['pin'])}</td><td>{esc((x['series_digest'] or '')[:12])}</td><td>{esc(x['flags'])}</td></tr>" for x in builds)
    c = "".join(f"<tr><td>{esc(x['engine'])}/{esc(x['reference'])}</td><td>{esc(x['point'])}</td><td>{esc(x['metric'])}</td><td>{fmt(x['ratio'])}</td><td>[{fmt(x['low'])}, {fmt(x['high'])}]</td><td>{esc(x['n_blocks'])}</td><td>{esc(x['outcome'])}</td></tr>" for x in cells)
    rep = f'<p><a class="report" href="{esc(report)}">the run\'s report</a></p>' if report else '<p class="muted">no report in the run dir</p>'
    return page(f"run {run['run_id']}", f"{rep}<h2>provenance</h2><table>{rows}</table><h2>builds</h2><table><tr><th>engine</th><th>build key</th><th>pin</th><th>series</th><th>flags</th></tr>{b}</table>"
                f"<h2>paired cells</h2><table><tr><th>engine/reference</th><th>point</th><th>metric</th><th>ratio</th><th>95 % interval</th><th>blocks</th><th>outcome</th></tr>{c}</table>", "../")  # fmt: skip


def series_page(sid: str, points: list[dict], changes: list[dict], run_links: dict[str, str]) -> str:
    ch = "".join(f'<tr class="{esc(c["direction"])}"><td>{c["night"]}</td><td>{esc(c["status"])}</td><td>{pct(c["step_pct"])} [{pct(c["low_pct"])}, {pct(c["high_pct"])}]</td><td>{c["pvalue"]:.2g}</td>'
                 f'<td><a href="{run_links[c["last_before"]["run_key"]]}">{esc(c["last_before"]["run_id"])}</a> -> <a href="{run_links[c["first_after"]["run_key"]]}">{esc(c["first_after"]["run_id"])}</a></td>'
                 f'<td><code>{esc(c["bisect"]["command"] or c["bisect"]["why"])}</code></td></tr>' for c in changes)  # fmt: skip
    rows = "".join(f'<tr><td>{i + 1}</td><td>{esc(store.plain(p["run_at"]))}</td><td><a href="{run_links[p["run_key"]]}">{esc(p["run_id"])}</a></td><td>{fmt(p["value"])}</td>'
                   f'<td>{interval(p)}</td><td>{esc(p["blocks"])}</td><td>{esc(str(p["pin"] or "")[:24])}</td><td>{esc(str(p["series_digest"] or "")[:12])}</td></tr>'
                   for i, p in enumerate(points))  # fmt: skip
    what = "ratio engine/reference per run (geometric mean of its blocks, 95 % t interval)" if points[0]["kind"] == "paired" else "median of the run's valid repeats"
    body = (f"<p>{esc(what)}; {len(points)} runs.</p>{svg_plot(points, changes)}<h2>change points</h2>"
            + (f"<table><tr><th>night</th><th>status</th><th>step [95 %]</th><th>p</th><th>runs</th><th>bisect</th></tr>{ch}</table>" if changes else "<p>none</p>")
            + f"<h2>runs</h2><table><tr><th>#</th><th>at</th><th>run</th><th>value</th><th>interval</th><th>blocks</th><th>pin</th><th>series</th></tr>{rows}</table>")  # fmt: skip
    return page(sid, body, "../")


def dicts(con, sql: str, args: list) -> list[dict]:
    cols, rows = store.query_args(con, sql, args)
    return [dict(zip(cols, r)) for r in rows]


def check_out(text: str) -> Path:
    """OUT is a directory, or one parity can make: its nearest existing parent is a writable directory."""
    out = Path(text).expanduser()
    if out.exists() and not out.is_dir():
        raise UsageError(f"{text}: not a directory")
    up = out
    while not up.exists() and up != up.parent:
        up = up.parent
    if not up.is_dir():
        raise UsageError(f"{text}: cannot be made ({up} is not a directory)")
    if not os.access(up, os.W_OK | os.X_OK):
        raise UsageError(f"{text}: cannot be written ({up} is not writable)")
    return out


def write_site(ctx, req: SiteRequest) -> dict:
    creq = ChangesRequest(store=req.store, match=req.match, kind=req.kind, max_pvalue=req.max_pvalue, window=req.window, min_points=req.min_points, min_after=req.min_after)
    check(creq)
    path = store.resolve(req.store, ctx.artifacts_root)
    if path is None:
        raise UsageError(f"the history store is off ({store.ENV}=off): give --store FILE")
    out = check_out(req.out)
    with store.connect(path, write=False) as con:
        series, infos, found = analyse_all(con, creq)
        keys = sorted({p["run_key"] for pts in series.values() for p in pts})
        runs = {k: dicts(con, "SELECT * FROM runs WHERE run_key = ?", [k])[0] for k in keys}
        builds = {k: dicts(con, "SELECT * FROM builds WHERE run_key = ? ORDER BY engine", [k]) for k in keys}
        cells = {k: dicts(con, "SELECT * FROM paired WHERE run_key = ? ORDER BY engine, n, metric", [k]) for k in keys}
        recorded = dicts(con, "SELECT * FROM change_points ORDER BY confirmed_at", [])
        outside = left_out(con, None)
    try:
        pages, skipped = write_pages(out, series, infos, found, recorded, runs, builds, cells, str(path), outside)
    except OSError as e:
        raise UsageError(f"{req.out}: cannot write the site ({store.one_line(e)})") from None
    return {"out": str(out), "index": str(out / "index.html"), "series": len(pages), "runs": len(keys),
            "changes": len(found), "store": str(path), "skipped": skipped}


def copy_report(run: dict, dest: Path) -> str | None:
    """The run's report copied to dest; None when it is gone.  A report that is a link out of its
    run directory is never followed into the site (ValueError says so)."""
    src = run.get("report")
    if not src or not Path(src).is_file():
        return None
    if not run_cells.inside(Path(src), Path(run.get("path") or "")):
        raise ValueError(f"run {run['run_id']}: its report {src} is a link out of its run directory: not copied")
    shutil.copyfile(src, dest)
    return dest.name


def write_pages(out: Path, series, infos, found, recorded, runs, builds, cells, where: str, outside: list[dict]):
    """Every page of the site; (the series pages, the reports not copied and why)."""
    (out / "series").mkdir(parents=True, exist_ok=True)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    run_links, skipped = {}, []
    for k in sorted(runs):
        try:
            report = copy_report(runs[k], out / "runs" / f"{k}.report.md")
        except ValueError as e:
            report = None
            skipped.append(str(e))
        (out / "runs" / f"{k}.html").write_text(run_page(runs[k], builds[k], cells[k], report))
        run_links[k] = f"../runs/{k}.html"
    by_series: dict[str, list[dict]] = {}
    for c in found:
        by_series.setdefault(c["series_id"], []).append(c)
    pages = {}
    for sid, pts in series.items():
        pages[sid] = f"series/{slug(sid)}.html"
        (out / pages[sid]).write_text(series_page(sid, pts, sorted(by_series.get(sid, []), key=lambda c: c["index"]), run_links))
    links = {k: v.replace("../", "") for k, v in run_links.items()}
    (out / "index.html").write_text(index_page(infos, found, recorded, pages, links, where, series, outside))
    return pages, skipped


def series_cell(sid: str, pages: dict[str, str]) -> str:
    return f'<a href="{pages[sid]}">{esc(sid)}</a>' if sid in pages else esc(sid)


def tr(*cells: str) -> str:
    """A table row of cells already escaped."""
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def table(head: list[str], rows: list[str]) -> str:
    return "<table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr>" + "".join(rows) + "</table>"


def headline_rank(info: dict) -> tuple:
    return (HEADLINE.index(info["metric"]), info["kind"] != "paired", info["series_id"])


def headline_table(infos: list[dict], series: dict[str, list[dict]], pages: dict[str, str]) -> str:
    """The headline series first: each one's last point with its interval, where it stands."""
    heads = sorted((i for i in infos if i["metric"] in HEADLINE), key=headline_rank)
    if not heads:
        return f"<p>no series of {', '.join(HEADLINE)} in this store</p>"
    rows = []
    for i in heads:
        last = series[i["series_id"]][-1]
        what = "ratio" if i["kind"] == "paired" else "median"
        value = f"{what} {fmt(last['value'])}"
        rows.append(tr(esc(i["metric"]), series_cell(i["series_id"], pages), value, interval(last), esc(last["run_id"]),
                       str(i["points"]), esc(i["status"]), str(i.get("changes", 0))))
    head = ["metric", "series", "last run's value", "95 % interval", "last run", "runs", "status", "changes"]
    return table(head, rows)


def index_page(infos: list[dict], found: list[dict], recorded: list[dict], pages: dict[str, str],
               run_links: dict[str, str], where: str, series: dict[str, list[dict]], outside: list[dict]) -> str:
    bis = {(r["series_id"], r["run_key"]): r for r in recorded}
    open_rows = []
    for c in sorted(found, key=lambda c: (c["status"] != "confirmed", c["series_id"])):
        r = bis.get((c["series_id"], c["first_after"]["run_key"])) or c.get("recorded") or {}
        state = (f'bisected: culprit <code>{esc(r.get("culprit"))}</code> (exit {esc(r.get("bisect_exit"))}, {esc(r.get("bisect_run"))})' if r.get("bisect_run") or r.get("bisect_exit") is not None
                 else "recorded, not bisected" if r else "not recorded")  # fmt: skip
        open_rows.append(f'<tr class="{esc(c["direction"])}"><td><a href="{pages[c["series_id"]]}">{esc(c["series_id"])}</a></td><td>{esc(c["status"])}</td><td>{pct(c["step_pct"])} [{pct(c["low_pct"])}, {pct(c["high_pct"])}]</td>'
                         f'<td>{c["pvalue"]:.2g}</td><td><a href="{run_links[c["first_after"]["run_key"]]}">{esc(c["first_after"]["run_id"])}</a></td>'
                         f'<td>{esc(", ".join(c["before"]["pins"]))} -> {esc(", ".join(c["after"]["pins"]))}; {esc(", ".join(c["before"]["series_digests"]))} -> {esc(", ".join(c["after"]["series_digests"]))}</td>'
                         f'<td><code>{esc(c["bisect"]["command"] or c["bisect"]["why"])}</code></td><td>{state}</td></tr>')  # fmt: skip
    ch = ("<table><tr><th>series</th><th>status</th><th>step [95 %]</th><th>p</th><th>first run after</th><th>pins; series digests</th><th>bisect</th><th>bisection</th></tr>" + "".join(open_rows) + "</table>") if open_rows else "<p>no change point</p>"
    others = sorted((i for i in infos if i["metric"] not in HEADLINE), key=lambda i: i["series_id"])
    rows = [tr(series_cell(i["series_id"], pages), str(i["points"]), esc(i["status"]), str(i.get("changes", 0)),
               esc(i["last_run"])) for i in others]
    # confirmed by an earlier analysis (a nightly alerted on it) but not called by today's: said, not hidden
    called = {(c["series_id"], (c.get("recorded") or {}).get("run_key")) for c in found}
    faded = [r for r in recorded if (r["series_id"], r["run_key"]) not in called]
    old = "".join(f'<tr><td>{series_cell(r["series_id"], pages)}</td><td>{pct(r["step_pct"])} [{pct(r["low_pct"])}, {pct(r["high_pct"])}]</td><td>{r["pvalue"]:.2g}</td>'
                  f'<td>{esc(store.plain(r["confirmed_at"]))}</td><td><code>{esc(r["command"])}</code></td><td>{esc(r["culprit"])}</td></tr>' for r in faded)  # fmt: skip
    earlier = (f"<h2>confirmed earlier, not called by the history as it stands</h2><table><tr><th>series</th><th>step then [95 %]</th><th>p then</th><th>confirmed</th><th>bisect</th><th>culprit</th></tr>{old}</table>" if faded else "")
    out = [tr(esc(r["run_id"]), esc(r["kind"]), esc(r["run_at"]), esc(r["why"])) for r in outside]
    left = (f"<h2>runs in no series</h2><p>{len(outside)} runs of the store are no point of any series:</p>"
            + table(["run", "kind", "at", "why"], out) if outside else "")
    return page("parity history", f'<p class="muted">store {esc(where)}; {MEMBERS}</p><h2>headline series</h2>'
                + headline_table(infos, series, pages) + f"<h2>change points</h2>{ch}{earlier}<h2>other series</h2>"
                + table(["series", "runs", "status", "changes", "last run"], rows) + left)
