"""Write runs into the store: the hook a run session calls when its run dir ends, and
`parity history ingest DIR...` for run dirs that exist already (the users' older artifacts too)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from parity.errors import ParityError, UsageError
from parity.history import cells, source, store

HOOK_WAIT_S = 20.0  # a run never waits longer than this for another writer of the store


def record_run(run_dir, artifacts_root=None, warn=None, store_path: str | None = None) -> str | None:
    """The end-of-run hook: the run's cells into the store (PARITY_HISTORY, else
    <artifacts>/history.duckdb).  Never raises: a failed write is one warning line (warn), the run
    dir stays the source of truth.  Returns the run key, or None when off or failed."""
    path = store.resolve(store_path, artifacts_root)
    if path is None:
        return None
    try:
        rows = cells.cells(source.read_run(run_dir))
        with store.connect(path, timeout_s=HOOK_WAIT_S) as con:
            return store.write_run(con, rows)
    except Exception as e:  # the store is optional: nothing in it may fail a run
        why = " ".join(str(e).split()) or type(e).__name__
        try:
            if warn:
                warn(f"history: {Path(run_dir).name} not recorded in {path} ({why}); the run dir is intact: `parity history ingest {run_dir}` adds it later")
        except Exception:  # the output is gone (a dropped SSH channel): nobody to tell
            pass
        return None


@dataclass
class IngestRequest:
    """What `parity history ingest` asks for."""

    paths: list[str] = field(default_factory=list)
    store: str | None = None


def ingest(ctx, req: IngestRequest) -> dict:
    """Every run dir under the paths into the store (a run already there is replaced)."""
    path = store.resolve(req.store, ctx.artifacts_root)
    if path is None:
        raise UsageError(f"the history store is off ({store.ENV}=off): give --store FILE")
    if not req.paths:
        raise UsageError("parity history ingest needs at least one DIR")
    t0 = time.monotonic()
    dirs, empty = source.find_run_dirs(req.paths)
    done, skipped = [], []
    with store.connect(path) as con:
        for d in dirs:
            try:
                rows = cells.cells(source.read_run(d))
            except (ParityError, OSError, ValueError) as e:
                skipped.append({"path": str(d), "why": " ".join(str(e).split())})
                continue
            store.write_run(con, rows)
            r = rows["runs"][0]
            done.append({"path": str(d), "run_key": r["run_key"], "run_id": r["run_id"], "kind": r["kind"], "origin": r["origin"], "run_at": store.plain(r["run_at"]),
                         **{t: len(rows[t]) for t in store.RUN_TABLES if t != "runs"},
                         "left_out": rows["left_out"]})  # fmt: skip
    size = path.stat().st_size if path.is_file() else 0
    return {"store": str(path), "ingested": done, "skipped": skipped, "no_runs": empty, "seconds": round(time.monotonic() - t0, 3), "store_bytes": size}
