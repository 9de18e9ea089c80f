"""Rendering of the focused op timing (`parity bench --ops`, `parity ab --ops`): the plan and the
per-op tables (parity.optime.table holds the plain data)."""


def render_ops_plan(out, doc: dict) -> None:
    import shlex

    out.info(
        f"op timing plan: {', '.join(doc['ops'])} on {doc['backend']}"
        + (f" (-p {doc['params']})" if doc.get("params") else "")
        + f"; arms {', '.join(doc['arms'])} (reference {doc['reference'] or 'none'}), order {doc['order']}"
        + f"; blocks: {doc['blocks']}"
    )
    out.info(f"output: {doc['output']}")
    for engine, cmds in doc["commands"].items():
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in (doc.get("env") or {}).get(engine, {}).items())
        for argv in cmds:
            out.info(f"  {engine}: {env + ' ' if env else ''}{' '.join(shlex.quote(x) for x in argv)}")
    if doc.get("go_no_go"):
        from parity.cli.common import render_go

        render_go(out, doc)


def render_ops(out, doc: dict) -> None:
    from parity.optime.table import case_lines, op_lines

    for op in doc["ops"]:
        what = f"A/B, reference {doc['reference']}" if doc.get("reference") else "repeats"
        head = f"test-backend-ops perf -o {op} -b {doc['backend']} ({what}, {doc['output']} output)"
        out.info(f"{head}, medians of {doc['blocks']} blocks:")
        for line in case_lines(doc, op):
            out.info(line)
    for line in op_lines(doc):
        out.info(line)
    if doc.get("reference"):
        out.info(
            "B/A: geometric mean of per-block ratios, 95 % t interval on the log ratios; outcome by the paired rule"
            " (time cells held to Holm over every case)"
        )
        out.info(f"users' rule beside: {doc['rule']}; per op KEEP when a case improved and none regressed")
    order = "; ".join(" ".join(o) for o in doc["order"])
    out.info(f"order per block: {order}; stop: {doc['stop']['rule']}: {doc['stop']['why']}")
    for p in doc["problems"]:
        out.warn(f"op timing: {p}")
    if doc.get("run_dir"):
        out.info(f"-> {doc['run_dir']}")
