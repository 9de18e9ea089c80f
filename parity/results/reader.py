"""The one reader of run-directory files: each read says in one line what is wrong with a file
(missing, empty, truncated, not JSON or YAML, the wrong shape, NaN or inf where a number must
be, written by a newer parity) and raises BadResultFile (exit 2)."""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import msgspec
import yaml

from parity.errors import ConfigError, UsageError
from parity.results import model
from parity.yamlload import TooBig, safe_load

T = TypeVar("T")


class BadResultFile(UsageError, ValueError):
    """A run-directory file parity cannot trust: missing, truncated, the wrong shape, non-finite."""


@dataclass
class Doc(Generic[T]):
    """A file as read: its typed view (the fields parity reads, checked) and its whole content."""

    path: Path
    typed: T
    data: Any

    def filled(self) -> Any:
        """The content with every declared field present (a missing one at its default)."""
        if not isinstance(self.data, dict) or not isinstance(self.typed, msgspec.Struct):
            return self.data
        return {**{f: getattr(self.typed, f) for f in self.typed.__struct_fields__ if f not in self.data}, **self.data}


def run_dir(path, what: str = "run directory") -> Path:
    """An existing directory, or one line saying why path is not one."""
    p = Path(os.path.expanduser(str(path)))  # os.path: ~unknown-user stays as written (Path raises)
    try:
        is_dir, exists = p.is_dir(), p.exists()
    except (OSError, ValueError) as e:  # a name too long, a NUL byte
        raise BadResultFile(f"{str(path)[:200]}: not a usable path ({getattr(e, 'strerror', None) or e})") from None
    if is_dir:
        return p
    if exists:
        hint = f" (the {what} that holds it: {p.parent})" if p.name in FILES else ""
        raise BadResultFile(f"{path}: a file, not a {what}{hint}")
    raise BadResultFile(f"{path}: no such {what}")


def existing_file(path, what: str) -> Path:
    """An existing file, or one line saying why path is not one (missing, a directory, unusable)."""
    p = Path(os.path.expanduser(str(path)))
    try:
        if p.is_file():
            return p
        missing = not p.exists()
    except (OSError, ValueError) as e:
        raise BadResultFile(f"{what} {str(path)[:200]}: not a usable path ({getattr(e, 'strerror', None) or e})") from None
    raise BadResultFile(f"{what} {path}: " + ("no such file" if missing else "not a file"))


FILES = ("summary.json", "bench.json", "manifest.json", "paired.tsv", "bisect.json", "matrix.json", "lever_map.yaml")


def read_text(path) -> str:
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise BadResultFile(f"{p}: no such file") from None
    except IsADirectoryError:
        raise BadResultFile(f"{p}: a directory, not a file") from None
    except OSError as e:
        raise BadResultFile(f"{p}: unreadable ({e.strerror or type(e).__name__})") from None
    if not raw.strip():
        raise BadResultFile(f"{p}: empty (truncated, or its writer died before writing it)")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadResultFile(f"{p}: not UTF-8 text (byte {e.start}): corrupt") from None


def load_json(path) -> Any:
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        cut = " (it ends early: truncated)" if e.pos >= len(text.rstrip()) else ""
        raise BadResultFile(f"{path}: not JSON{cut}: {e.msg} at line {e.lineno} column {e.colno}") from None
    except (ValueError, RecursionError) as e:  # a 5,000-digit number, nesting deeper than the parser goes
        raise BadResultFile(f"{path}: not JSON parity can read: {str(e).splitlines()[0][:120] or type(e).__name__}") from None


_EXPECTED = re.compile(r"^Expected `([^`]+)`, got `([^`]+)`(?: - at `\$(.*)`)?$")
_AT = re.compile(r" - at `\$(.*)`$")
_WORDS = {"object": "an object", "array": "a list", "str": "a string", "int": "an integer", "float": "a number", "int | float": "a number", "bool": "true/false",
          "null": "null", "int | null": "an integer or null", "float | null": "a number or null", "str | null": "a string or null",
          "object | null": "an object or null", "array | null": "a list or null"}  # fmt: skip


def _shape_line(msg: str) -> str:
    """msgspec's 'Expected `int`, got `str` - at `$.rows[0].n`' -> 'rows[0].n is a string, expected an integer'."""
    m = _EXPECTED.match(msg)
    if m:
        want, got, at = m.groups()
        return f"{(at or '').lstrip('.') or 'the document'} is {_WORDS.get(got, got)}, expected {_WORDS.get(want, want)}"
    at = _AT.search(msg)
    where = at.group(1).lstrip(".") if at else ""
    return (f"{where}: " if where else "") + _AT.sub("", msg)[:1].lower() + _AT.sub("", msg)[1:]


def non_finite(data: Any, where: str = "") -> str | None:
    """'<path> is NaN' (or inf, -inf) for the first non-finite number in data; None when every number is finite."""
    stack = [(where, data)]
    while stack:
        at, v = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            return f"{at or 'the document'} is {'NaN' if v != v else 'inf' if v > 0 else '-inf'}"
        if isinstance(v, dict):
            stack.extend((f"{at}.{k}" if at else str(k), x) for k, x in reversed(list(v.items())))
        elif isinstance(v, list):
            stack.extend((f"{at}[{i}]", x) for i, x in reversed(list(enumerate(v))))
    return None


def problem(data: Any, cls: type) -> str | None:
    """What is wrong with data as cls (shape, schema version, non-finite numbers), or None."""
    return _typed(data, cls)[1]


def _typed(data: Any, cls: type) -> tuple[Any, str | None]:
    if isinstance(data, dict):
        version = data.get("schema_version", 0)
        if isinstance(version, int) and not isinstance(version, bool) and version > model.SCHEMA_VERSION:
            return None, f"schema_version {version}: written by a newer parity (this one reads up to {model.SCHEMA_VERSION}); upgrade parity to read it"
    try:
        typed = msgspec.convert(data, cls)
    except msgspec.ValidationError as e:
        return None, _shape_line(str(e))
    for name in getattr(cls, "FINITE", ()):
        if isinstance(data, dict) and name in data:
            at = non_finite(data[name], name)
            if at:
                return None, f"{at}: a number there must be finite (parity writes null for a value it could not compute)"
    return typed, None


def check(data: Any, cls: type[T], path, what: str) -> Doc[T]:
    """data as cls, or BadResultFile naming the file and its problem."""
    typed, bad = _typed(data, cls)
    if bad:
        raise BadResultFile(f"{path}: not a {what}: {bad}" if what and "finite" not in bad and "schema_version" not in bad else f"{path}: {bad}")
    return Doc(Path(path), typed, data)


def read_summary(path) -> Doc[model.Summary | model.LeverSummary]:
    """summary.json: a snapshot's (model.Summary, its rows, medians and ratios typed with every key:
    model.PointRow, Median, Ratio) or a lever A/B's (model.LeverSummary)."""
    data = load_json(path)
    kind = data.get("kind", "snapshot") if isinstance(data, dict) else None
    if kind == "lever-ab":
        return check(data, model.LeverSummary, path, "lever A/B summary")
    if isinstance(data, dict) and kind not in ("snapshot", None):
        raise BadResultFile(f"{path}: kind {str(kind)[:40]!r} is not a summary parity writes (snapshot, lever-ab)")
    doc = check(data, model.Summary, path, "snapshot summary (an object with rows, medians, ratios)")
    # the check's hold the declared fields only: typed again with every key
    doc.typed.rows = [model.PointRow.of(r) for r in data.get("rows") or []]
    doc.typed.medians = [model.Median.of(m) for m in data.get("medians") or []]
    doc.typed.ratios = [model.Ratio.of(r) for r in data.get("ratios") or []]
    return doc


def read_bench(path) -> Doc:
    return check(load_json(path), model.Bench, path, "bench result (an object with batched-bench rows)")


def read_manifest(path) -> Doc:
    return check(load_json(path), model.Manifest, path, "run manifest")


def read_bisect(path) -> Doc:
    return check(load_json(path), model.Bisection, path, "bisection log")


def read_matrix(path) -> Doc:
    return check(load_json(path), list[model.MatrixTarget], path, "matrix table (a list of targets)")


def read_lever_map(path) -> list[dict]:
    """The rows of a lever map (none when the file does not exist or is empty); a broken map is
    a ConfigError naming the line or row (the users edit it by hand)."""
    p = Path(path)
    try:
        if not p.exists() or (p.is_file() and not p.read_bytes().strip()):
            return []
    except (OSError, ValueError) as e:
        raise BadResultFile(f"{str(p)[:200]}: not a usable lever map path ({getattr(e, 'strerror', None) or e})") from None
    try:
        data = safe_load(read_text(p))
    except (yaml.YAMLError, RecursionError) as e:
        mark = getattr(e, "problem_mark", None)
        why = getattr(e, "problem", None) or (str(e).splitlines() or [type(e).__name__])[0]
        why = why if isinstance(e, TooBig) else f"YAML syntax error: {why}"
        raise ConfigError(str(p), f"line {mark.line + 1}" if mark else "", why) from None
    if data is None:
        return []
    if not isinstance(data, dict) or (data and "levers" not in data):
        raise ConfigError(str(p), "", "a lever map is a mapping with a `levers:` list of rows" + ("" if isinstance(data, dict) else f", not a {type(data).__name__}"))
    bad = problem(data, model.LeverMap)
    if bad:
        raise ConfigError(str(p), "", bad if "finite" in bad else f"{bad} (a lever map is a mapping with a `levers:` list of rows, each with at least `lever:`)")
    return list(data.get("levers") or [])


def read_paired_tsv(path) -> list[dict]:
    """paired.tsv rows with numbers parsed (block_ratios a list); every cell checked."""
    lines = read_text(path).splitlines()
    head = lines[0].split("\t")
    want = [c for c in model.PAIRED_COLUMNS if c != "n"]
    if not set(want) <= set(head) or not ({"n", "point"} & set(head)):
        raise BadResultFile(f"{path}: not a paired.tsv: its header is not {' '.join(model.PAIRED_COLUMNS)}")
    out = []
    for i, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        cells = line.split("\t")
        if len(cells) != len(head):
            raise BadResultFile(f"{path}: line {i}: {len(cells)} cells under a {len(head)}-column header (truncated?)")
        row: dict[str, Any] = {}
        for col, cell in zip(head, cells):
            kind = model.PAIRED_TYPES.get(col, str)
            try:
                row[col] = _cell(cell, kind)
            except ValueError:
                raise BadResultFile(f"{path}: line {i}, {col}: {cell[:40]!r} is not {'text' if kind is str else 'a finite number'}") from None
        out.append(row)
    return out


def _cell(text: str, kind):
    if text == "":
        return [] if kind is list else None
    if kind is list:
        return [_cell(x, float) for x in text.split(",")]
    if kind is int:
        return int(text)
    if kind is model.Point:
        v = float(text)
        if not math.isfinite(v):
            raise ValueError(text)
        return int(v) if v.is_integer() and "." not in text else v
    if kind is float:
        v = float(text)
        if not math.isfinite(v):
            raise ValueError(text)
        return v
    return text
