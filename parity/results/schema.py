"""The JSON Schemas of summary.json and bench.json, generated from the result model (the files
under docs/schemas/ are these, written by `python -m parity.results.schema`; a test keeps them equal)."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import msgspec

from parity.results import model

DOCS = Path(__file__).resolve().parents[2] / "docs" / "schemas"
FILES = {"summary.json": (model.Summary, model.LeverSummary), "bench.json": (model.Bench,)}


def schema(name: str) -> dict:
    """JSON Schema (draft 2020-12) of one run-dir file: one of its model's documents."""
    (refs, defs) = msgspec.json.schema_components(FILES[name], ref_template="#/$defs/{name}")
    for flat in ("PointRow", "Median", "Ratio"):  # in memory only: such a record is flat in the file
        for carried in model.Flat.CARRIED if flat in defs else ():
            defs[flat]["properties"].pop(carried)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": name,
        "description": f"parity's {name} (schema_version {model.SCHEMA_VERSION}; a file without schema_version was written before it was versioned). "
        "Objects may hold more keys than listed (a row's metrics, provenance). Generated from parity/results/model.py.",
        **({"$ref": refs[0]["$ref"]} if len(refs) == 1 else {"anyOf": list(refs)}),
        "$defs": cleaned(defs),
    }


def cleaned(node):
    """Descriptions as inspect.cleandoc gives them: msgspec 0.23 cleans class docstrings and 0.22
    did not, and a fresh install must write the same schema as the one in docs/."""
    if isinstance(node, dict):
        return {k: inspect.cleandoc(v) if k == "description" and isinstance(v, str) else cleaned(v)
                for k, v in node.items()}
    if isinstance(node, list):
        return [cleaned(v) for v in node]
    return node


def text(name: str) -> str:
    return json.dumps(schema(name), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":  # regenerate docs/schemas/
    DOCS.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        (DOCS / name.replace(".json", ".schema.json")).write_text(text(name))
