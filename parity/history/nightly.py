"""kind: history -- a campaign step (the nightly's last): this run's cells into the store, then the
change points of every series this run belongs to.  A change confirmed for the first time fails
the step with exit 7 (ChangePointConfirmed) after printing the bisect command that searches it
(bisect: run also runs it); a pending one is printed only.  The nightly's exit code then says
"change point confirmed", not "worse than last night"."""

from __future__ import annotations

from parity.errors import ChangePointConfirmed, ConfigError, UsageError
from parity.history import record, store
from parity.history.changes import ChangesRequest, changes

OPTIONS = {"store", "bisect", "kind", "metrics", "match", "max_pvalue", "window", "min_points", "min_after"}
BISECT = ("print", "run", "off")


def campaign_step(ctx, options: dict) -> dict:
    from parity.campaign import check_step_options

    check_step_options("history", options, OPTIONS)
    how = options.get("bisect", "print")
    if how not in BISECT:
        raise ConfigError("campaign", "with.bisect", f"one of {', '.join(BISECT)}, got {how!r}")
    rd = ctx.require_run()
    path = store.resolve(options.get("store"), ctx.artifacts_root)
    if path is None:
        ctx.out.info(f"[history] the store is off ({store.ENV}=off): no change points")
        return {"store": None}
    key = record.record_run(rd.path, ctx.artifacts_root, ctx.out.warn, str(path))
    if key is None:
        raise UsageError(f"history: this run could not be written to {path} (see the warning above)")
    metrics = options.get("metrics")
    req = ChangesRequest(store=str(path), match=options.get("match"), metrics=[metrics] if isinstance(metrics, str) else metrics, kind=options.get("kind", "paired"),
                         max_pvalue=float(options.get("max_pvalue", ChangesRequest.max_pvalue)), window=int(options.get("window", ChangesRequest.window)),
                         min_points=int(options.get("min_points", ChangesRequest.min_points)), min_after=int(options.get("min_after", ChangesRequest.min_after)),
                         bisect=how == "run", record=True, current=key)  # fmt: skip
    doc = changes(ctx, req)
    mine = {s["series_id"] for s in doc["series"] if s["last_run"] == rd.run_id}
    doc["changes"] = [c for c in doc["changes"] if c["series_id"] in mine]
    doc["series"] = [s for s in doc["series"] if s["series_id"] in mine]
    short = [s for s in doc["series"] if s["status"] != "analysed"]
    ctx.out.info(f"[history] {len(doc['series'])} series of this run in {path}" + (f"; {len(short)} too short to call a change ({short[0]['status']})" if short else ""))
    for c in doc["changes"]:
        ctx.out.info(line(c))
        if c["new"] and c["bisect"]["command"]:
            ctx.out.info(f"[history]   bisect: {c['bisect']['command']}")
        elif c["new"]:
            ctx.out.info(f"[history]   no bisection: {c['bisect']['why']}")
    new = [c for c in doc["changes"] if c["new"]]
    if new:
        err = ChangePointConfirmed(f"change point confirmed in {len(new)} series: " + "; ".join(f"{c['series_id']} {c['step_pct']:+.2f}% from {c['first_after']['run_id']}" for c in new))
        raise err
    return {"store": str(path), "series": len(doc["series"]), "changes": doc["changes"]}


def line(c: dict) -> str:
    iv = "" if c["low_pct"] is None else f" [{c['low_pct']:+.2f}%, {c['high_pct']:+.2f}%]"
    tag = "NEW " if c["new"] else ""
    return (f"[history] {tag}{c['status']} change in {c['series_id']}: {c['step_pct']:+.2f}%{iv} ({c['direction']}) at night {c['night']} of the series, "
            f"p={c['pvalue']:.2g}; before {c['before']['runs']} runs to {c['last_before']['run_id']}, after {c['after']['runs']} from {c['first_after']['run_id']}")  # fmt: skip
