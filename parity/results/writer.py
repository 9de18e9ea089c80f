"""Writing through the model: a summary or bench document is stamped with the schema version,
its non-finite numbers become null (JSON has no NaN), and it is checked as the reader checks it,
so parity never writes a file it would refuse to read."""

from __future__ import annotations

import json
import math
from typing import Any

from parity.errors import ParityError
from parity.files import json_default
from parity.results import model
from parity.results.reader import BadResultFile, check


def plain(data: Any) -> Any:
    """data with every NaN / inf replaced by None (JSON has neither)."""
    if isinstance(data, float) and not math.isfinite(data):
        return None
    if isinstance(data, dict):
        return {k: plain(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [plain(v) for v in data]
    return data


def write(run, name: str, doc: dict, cls: type) -> dict:
    """doc stamped with the schema version, its typed records flat (model.Flat.flat: rows, medians, ratios) and its
    non-finite numbers made null (in place: the caller's document is what was written; a list of
    typed rows is replaced by a new one, so the caller's rows stay typed), written through
    run.write_json, then checked as the reader will check it (after writing: the numbers stay on
    disk when parity has a bug)."""
    _flat_in_place(doc)
    _finite_in_place(doc)
    doc["schema_version"] = model.SCHEMA_VERSION
    run.write_json(name, doc)
    try:
        check(plain(json.loads(json.dumps(doc, default=json_default))), cls, name, cls.__name__)  # the encoder that wrote it
    except BadResultFile as e:
        raise ParityError(f"parity wrote {name} in a shape its own reader refuses (a parity bug; the file is kept): {e}") from None
    return doc


def _flat_in_place(data: Any) -> None:
    """Replace each list holding a typed record (model.Flat: a row, median, ratio; at any depth) by a new
    list of flat ones."""
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for k, v in list(items):
        if isinstance(v, list) and any(isinstance(x, model.Flat) for x in v):
            for x in v:
                _finite_in_place(x.metrics if isinstance(x, model.Flat) else None)  # as a flat record's would be
            data[k] = [x.flat() if isinstance(x, model.Flat) else x for x in v]
        elif isinstance(v, (dict, list)):
            _flat_in_place(v)


def _finite_in_place(data: Any) -> None:
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for k, v in list(items):
        if isinstance(v, float) and not math.isfinite(v):
            data[k] = None
        elif isinstance(v, (dict, list)):
            _finite_in_place(v)


def write_summary(run, doc: dict) -> dict:
    """summary.json of a snapshot, workload or lever A/B."""
    return write(run, "summary.json", doc, model.LeverSummary if doc.get("kind") == "lever-ab" else model.Summary)


def write_bench(run, doc: dict) -> dict:
    """bench.json of llama-batched-bench (one run, or an A/B's blocks)."""
    return write(run, "bench.json", doc, model.Bench)
