"""kind: history -- a campaign step (the nightly's last): this run's cells into the store, then the
change points of every series this run belongs to.  A change confirmed for the first time fails
the step with exit 7 (ChangePointConfirmed) after printing the bisect command that searches it
(bisect: run also runs it); a pending one is printed only.  The nightly's exit code then says
"change point confirmed", not "worse than last night"."""

from __future__ import annotations

from parity.errors import ChangePointConfirmed, ConfigError, UsageError
from parity.history import record, store
from parity.history.changes import ChangesRequest, changes, remember, run_bisection
from parity.options import check_step_options
from parity.stats.family import holm

OPTIONS = {"store", "bisect", "kind", "metrics", "match", "max_pvalue", "window", "min_points", "min_after"}
BISECT = ("print", "run", "off")


def campaign_step(ctx, options: dict) -> dict:
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
                         current=key)  # fmt: skip
    doc = changes(ctx, req)
    mine = {s["series_id"] for s in doc["series"] if s["last_run"] == rd.run_id}
    doc["changes"] = [c for c in doc["changes"] if c["series_id"] in mine]
    doc["series"] = [s for s in doc["series"] if s["series_id"] in mine]
    new = family_of(doc, req.max_pvalue)
    short = [s for s in doc["series"] if s["status"] != "analysed"]
    ctx.out.info(f"[history] {len(doc['series'])} series of this run in {path}" + (f"; {len(short)} too short to call a change ({short[0]['status']})" if short else ""))
    for c in doc["changes"]:
        ctx.out.info(line(c))
        if c in new:
            ctx.out.info(f"[history]   bisect: {c['bisect']['command']}" if c["bisect"]["command"] else f"[history]   no bisection: {c['bisect']['why']}")
        elif c.get("new_but"):
            ctx.out.info(f"[history]   {c['new_but']}")
    bisections = []
    if new:
        with store.connect(path, create=False) as con:
            for c in new:
                remember(con, c, key)
        if how == "run":
            bisections = [run_bisection(path, c, ctx.artifacts_root, ctx.runner, ctx.out)
                          for c in new if c["bisect"]["commands"]]  # fmt: skip
        raise ChangePointConfirmed(f"change point confirmed in {len(new)} series: " + "; ".join(f"{c['series_id']} {c['step_pct']:+.2f}% from {c['first_after']['run_id']}" for c in new)
                                   + "".join(f"; bisection exit {b['exit_code']}, culprit {b['culprit'] or '-'}" for b in bisections))  # fmt: skip
    return {"store": str(path), "series": len(doc["series"]), "changes": doc["changes"]}


def family_of(doc: dict, alpha: float) -> list[dict]:
    """The new confirmed changes that stand for the whole run: Holm over every series of this run
    that was long enough to analyse (m of them), each series' smallest p against alpha / (m - k);
    without it, a run with 40 series at p <= 0.001 each would alert on noise 4 % of nights."""

    analysed = [s["series_id"] for s in doc["series"] if s["status"] == "analysed"]
    best = {}
    for c in doc["changes"]:
        if c["new"] and (c["series_id"] not in best or c["pvalue"] < best[c["series_id"]]["pvalue"]):
            best[c["series_id"]] = c
    marks = dict(zip(analysed, holm([best[sid]["pvalue"] if sid in best else None for sid in analysed], alpha)))
    out = []
    for c in doc["changes"]:
        mk = marks.get(c["series_id"])
        c["family"] = {"m": len(analysed), "alpha": alpha, **mk} if mk and best.get(c["series_id"]) is c else None
        if c["family"] and c["family"]["rejected"]:
            out.append(c)
        elif c["new"]:
            c["new_but"] = f"not beyond the run's family of {len(analysed)} series (p {c['pvalue']:.2g} > Holm level {mk['level']:.2g})" if mk else "not the strongest change of its series"
    return out


def line(c: dict) -> str:
    iv = "" if c["low_pct"] is None or c["high_pct"] is None else f" [{c['low_pct']:+.2f}%, {c['high_pct']:+.2f}%]"
    tag = "NEW " if c["new"] else ""
    step = "step not estimable" if c["step_pct"] is None else f"{c['step_pct']:+.2f}%"
    return (f"[history] {tag}{c['status']} change in {c['series_id']}: {step}{iv} ({c['direction']}) "
            f"at night {c['night']} of the series, "
            f"p={c['pvalue']:.2g}; before {c['before']['runs']} runs to {c['last_before']['run_id']}, after {c['after']['runs']} from {c['first_after']['run_id']}")  # fmt: skip
