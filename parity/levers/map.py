"""The lever map: every `parity ab` appends one row to a YAML file the users read and edit
(their verdict words, notes, comments), rendered beside it as a markdown table in the layout
of their VLLM_PARITY_LEVER_MAP.md (a master table, then "Drop / closed (do NOT pursue)").

A row is appended under the map's inter-process lock (parity.filelock.updating), keeping
what the users wrote: as text after the list when the list ends the file, else by a
round-trip edit (parity.yamledit); comments, other keys, layout and the file's mode stay.

Refusal: a lever whose latest row on the same hardware class and pin holds a closing verdict
(REJECTED, FLAT, NO-GO, DROPPED, CLOSED, SUPERSEDED) is not measured again without --reopen
REASON.  A row's hardware_class or pin `any` holds everywhere (the users' imported history,
parity.levers.seeds); an env lever's row matches the same assignments in any order, and a value
`<any>` matches every value."""

from __future__ import annotations

import datetime as _dt
import math
import os
from dataclasses import dataclass
from pathlib import Path

from parity.errors import ConfigError, UsageError
from parity.decode import read_yaml
from parity.filelock import updating
from parity.files import atomic_write_text
from parity.results import existing_file, read_lever_map
from parity.yamledit import YamlEditError, append_to_list
from parity.yamlload import safe_load

MAP_NAME = "lever_map.yaml"
HEADER = """\
# Lever map (parity ab appends one row per A/B; parity levers lists it).  Yours to edit:
# set a verdict in your words (SHIPPED, default-off, REJECTED, DROPPED, ...), add notes.
# A lever whose latest row on the same hardware_class and pin (or `any`) says REJECTED, FLAT,
# NO-GO, DROPPED, CLOSED or SUPERSEDED is not re-run without `parity ab --reopen REASON`.
levers:
"""
CLOSING = ("REJECTED", "FLAT", "NO-GO", "DROPPED", "CLOSED", "SUPERSEDED")
ANYWHERE = "any"  # a row's hardware_class / pin that holds on every class / pin
ANY_VALUE = "<any>"  # an env lever's value in a row that matches every value
COLUMNS = ["lever", "kind", "engine", "changes", "hardware_class", "pin", "series_digest", "verdict", "said", "key_number",
           "metric", "point", "ratio", "low", "high", "gates", "gate_kind", "engaged", "phase", "artifact", "report", "date",
           "source", "import", "reopen", "reopens", "problems"]  # fmt: skip


SHAPE = "a lever map is a mapping with a `levers:` list of rows"


class LeverRefused(UsageError):
    """A closed lever asked again without --reopen (exit 2, one line naming the earlier row)."""


def default_path(profile, artifacts_root) -> Path:
    return Path(profile.levers.map).expanduser() if profile.levers.map else Path(artifacts_root).expanduser() / MAP_NAME


def load(path: Path) -> list[dict]:
    """The rows of a map file (none when it does not exist); a broken file is a ConfigError."""
    return read_lever_map(path)


def _data(path: Path) -> dict:
    return read_yaml(path, str(path), not_mapping=SHAPE)


def _rows(path: Path, data: dict) -> list[dict]:
    shape = SHAPE
    if not isinstance(data.get("levers", []), (list, type(None))):
        raise ConfigError(str(path), "levers", shape)
    rows = data.get("levers") or []
    for i, r in enumerate(rows):
        if not isinstance(r, dict) or not r.get("lever"):
            raise ConfigError(str(path), f"levers[{i}]", "a row is a mapping with at least `lever:`")
    return rows


def clean_row(row: dict) -> dict:
    """The row as the map keeps it: parity's columns in order, None left out; a non-finite
    number (NaN, inf) is left out too and named in `problems` (YAML would write `.nan`, which
    no JSON reader takes and no verdict may rest on)."""
    clean, problems = {}, []
    for k in COLUMNS:
        v = row.get(k)
        if isinstance(v, float) and not math.isfinite(v):
            problems.append(f"{k} was {v} (not a finite number)")
        elif v is not None and k != "problems":
            clean[k] = v
    if problems or row.get("problems"):
        clean["problems"] = "; ".join([*filter(None, [row.get("problems")]), *problems])
    return clean


def append(path: Path, row: dict, markdown: bool = False) -> list[dict]:
    """Append one row under the map's lock, keeping everything else the file holds (comments,
    other keys, layout, mode); returns every row.  markdown: also rewrite the rendered .md
    beside it, under the same lock (so it is never older than the map)."""
    path = Path(path)
    clean = clean_row(row)
    with updating(path) as write:
        data = _data(path) if path.exists() else {}
        before = _rows(path, data)
        text = _read_exact(path) if path.exists() else ""
        try:
            write(append_to_list(text, "levers", clean, header=HEADER, before=data if data else ...))  # empty or comments only: it looks again
        except YamlEditError as e:
            raise ConfigError(str(path), "levers", f"{e}; the row was not added (it is in the run's summary.json)") from None
        rows = [*before, clean]
        if markdown:
            write_markdown(path, rows)
    return rows


def append_new(path: Path, rows: list[dict], key: str, markdown: bool = False) -> tuple[list[dict], int]:
    """Append, under the map's lock, every row whose `key` value no row of the map holds yet
    (what the users edited in the rows already there stays as they left it); nothing is written
    when every row is there.  (rows added, rows already there)."""
    path = Path(path)
    with updating(path) as write:
        data = _data(path) if path.exists() else {}
        before = _rows(path, data)
        have = {str(r.get(key)) for r in before if r.get(key) is not None}
        new, seen = [], set()
        for r in rows:
            k = str(r.get(key))
            if k not in have and k not in seen:
                new.append(clean_row(r))
                seen.add(k)
        if not new:
            return [], len(rows)
        text = _read_exact(path) if path.exists() else ""
        parsed = data if data else ...
        try:
            for i, row in enumerate(new):
                text = append_to_list(text, "levers", row, header=HEADER, before=parsed)
                parsed = {**(parsed if isinstance(parsed, dict) else {}), "levers": [*before, *new[: i + 1]]}
        except YamlEditError as e:
            raise ConfigError(str(path), "levers", f"{e}; nothing was imported") from None
        write(text)
        if markdown:
            write_markdown(path, [*before, *new])
    return new, len(rows) - len(new)


def _read_exact(path: Path) -> str:
    """The text as it is on disk (CRLF line ends stay CRLF)."""
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


def check_writable(path: Path) -> None:
    """UsageError unless a row could be appended to the map at path (its directory takes the
    lock and the temporary; the file, when there, is writable)."""
    path = Path(os.path.realpath(path))
    d = next((p for p in [path.parent, *path.parent.parents] if p.exists()), None)
    if d is None or not d.is_dir() or not os.access(d, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UsageError(f"lever map {path}: not writable (the A/B's row could not land; --map FILE or levers.map elsewhere)")


def load_text(text: str) -> list[dict]:
    data = safe_load(text) or {}
    return list(data.get("levers") or [])


def _here(value, want) -> bool:
    return str(value) in (str(want), ANYWHERE)


def env_of(lever: str) -> dict[str, str] | None:
    """A lever name that is only NAME=VALUE assignments, as a dict (else None)."""
    env = {}
    for part in str(lever).split():
        name, sep, value = part.partition("=")
        if not sep or not name or not (name[0].isalpha() or name[0] == "_") or not name.replace("_", "").isalnum():
            return None
        env[name] = value
    return env or None


def same_lever(row_lever, lever: str) -> bool:
    """row_lever names this lever: the same text, or (env levers) the same assignments in any
    order, a row value `<any>` matching every value."""
    if str(row_lever) == lever:
        return True
    mine, theirs = env_of(lever), env_of(str(row_lever))
    if mine is None or theirs is None or set(mine) != set(theirs):
        return False
    return all(v == ANY_VALUE or v == mine[k] for k, v in theirs.items())


def matching(rows: list[dict], lever: str, hardware_class: str | None, pin: str | None) -> list[dict]:
    return [r for r in rows if same_lever(r.get("lever"), lever) and _here(r.get("hardware_class"), hardware_class)
            and _here(r.get("pin"), pin)]


def closing_row(rows: list[dict], lever: str, hardware_class: str | None, pin: str | None) -> dict | None:
    """The latest row of this lever on this hardware class and pin when its verdict closes it."""
    same = matching(rows, lever, hardware_class, pin)
    if not same:
        return None
    last = same[-1]
    return last if str(last.get("verdict", "")).strip().upper() in CLOSING else None


def describe(row: dict) -> str:
    key = row.get("key_number") or "no key number"
    gates = f"; gates: {row['gates']}" if row.get("gates") else ""
    phase = f"{row['phase']} " if row.get("phase") else ""
    where = row.get("artifact") or row.get("source") or "?"
    return f"{phase}{row.get('date') or '?'} {row.get('verdict')} ({key}{gates}) -> {where}"


def refuse_if_closed(rows: list[dict], lever: str, hardware_class: str | None, pin: str | None, reopen: str | None, where: Path) -> dict | None:
    """Raise LeverRefused when the map closed this lever here and no --reopen is given; the
    closing row (or None) otherwise."""
    row = closing_row(rows, lever, hardware_class, pin)
    if row is not None and not (reopen and reopen.strip()):
        raise LeverRefused(f"lever {lever!r} is closed on {hardware_class} at pin {str(pin)[:12]} by the lever map {where}: {describe(row)}; "
                           "run it again only with --reopen REASON")  # fmt: skip
    return row


def filter_rows(rows: list[dict], verdict: str | None = None, hardware: str | None = None, lever: str | None = None) -> list[dict]:
    out = rows
    if verdict:
        want = {v.strip().upper() for v in verdict.split(",") if v.strip()}
        out = [r for r in out if str(r.get("verdict", "")).strip().upper() in want]
    if hardware:
        out = [r for r in out if str(r.get("hardware_class")) == hardware]
    if lever:
        out = [r for r in out if lever.lower() in str(r.get("lever", "")).lower()]
    return out


def _cell(v) -> str:
    return str("" if v is None else v).replace("|", "\\|").replace("\n", " ")


def _gate_cell(r: dict) -> str:
    kind, gates = str(r.get("gate_kind") or ""), str(r.get("gates") or "")
    return gates if not kind or gates.startswith(kind) else f"{kind}: {gates}"


def render_markdown(rows: list[dict], source: str = MAP_NAME) -> str:
    """The users' layout: a master table (every row, numbered) and the closed ones with why."""
    lines = ["# Lever map", "", f"Rendered by parity from `{source}` (edit the YAML, not this file). Gate key: BE = bit-exact (greedy md5 per path equal in both arms); "
             "KL = KL band (KLD(B||ref) <= KLD(A||ref)).", "", "## Master lever table", "",
             "| # | Lever | What it changes | Hardware | Pin / series | Gate | Key number [95 % interval] | Verdict | Artifact | Date |",
             "|---|-------|-----------------|----------|--------------|------|----------------------------|---------|----------|------|"]  # fmt: skip
    for i, r in enumerate(rows, 1):
        pin = f"{str(r.get('pin') or '-')[:8]} / {str(r.get('series_digest') or '-')[:8]}"
        reopen = f" (reopened: {r['reopen']})" if r.get("reopen") else ""
        phase = f" ({r['phase']})" if r.get("phase") else ""
        lines.append("| " + " | ".join(_cell(c) for c in [i, f"**{r.get('lever')}**{phase}", r.get("changes"), r.get("hardware_class"), pin,
                                                                _gate_cell(r), r.get("key_number"),
                                                                f"**{r.get('verdict')}**{reopen}", r.get("artifact"), r.get("date")]) + " |")  # fmt: skip
    closed = [r for r in rows if str(r.get("verdict", "")).strip().upper() in CLOSING]
    lines += ["", "## Drop / closed (do NOT pursue)", "", "| Lever | Why dropped |", "|-------|-------------|"]
    for r in closed:
        lines.append(f"| {_cell(r.get('lever'))} | **{_cell(r.get('verdict'))}** - {_cell(r.get('key_number'))}; {_cell(r.get('gates'))} "
                     f"({_cell(r.get('hardware_class'))}, pin {_cell(str(r.get('pin') or '-')[:8])}, {_cell(r.get('date'))}; reopen with `parity ab --reopen REASON`) |")  # fmt: skip
    return "\n".join(lines) + "\n"


def markdown_path(path: Path) -> Path:
    return Path(path).with_suffix(".md")


def write_markdown(path: Path, rows: list[dict]) -> Path:

    md = markdown_path(path)
    atomic_write_text(md, render_markdown(rows, Path(path).name))
    return md


@dataclass
class LeversRequest:
    """What `parity levers` asks for."""

    map: str | None = None  # None: levers.map, else <artifacts>/lever_map.yaml
    verdict: str | None = None
    hardware: str | None = None
    lever: str | None = None


def listing(ctx, req: LeversRequest) -> dict:
    """`parity levers`: the map's rows, filtered, and their markdown table."""
    path = existing_file(req.map, "--map") if req.map else default_path(ctx.profile, ctx.artifacts_root)
    rows, problems = plain_rows(filter_rows(load(path), req.verdict, req.hardware, req.lever))
    return {"map": str(path), "rows": rows, "count": len(rows), "problems": problems, "markdown": render_markdown(rows, path.name)}


def plain_rows(rows: list[dict]) -> tuple[list[dict], list[str]]:
    """Rows as JSON can carry them, and what had to change: a NaN or inf (a hand edit, or a row
    written before parity refused them) becomes null, named in the row's `problems` and in the
    list returned; a YAML date becomes its ISO text."""
    out, problems = [], []
    for i, row in enumerate(rows, 1):
        found: list[str] = []
        clean = {k: _plain(v, str(k), found) for k, v in row.items()}
        if found:
            clean["problems"] = "; ".join(filter(None, [str(row.get("problems") or ""), *found]))
            problems.append(f"row {i} (lever {row.get('lever')!r}): {'; '.join(found)}")
        out.append(clean)
    return out, problems


def _plain(v, where: str, found: list[str]):
    if isinstance(v, float) and not math.isfinite(v):
        found.append(f"{where} is {v} (not a finite number)")
        return None
    if isinstance(v, (_dt.date, _dt.datetime)):
        return v.isoformat()
    if isinstance(v, dict):
        return {k: _plain(x, f"{where}.{k}", found) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x, f"{where}[{j}]", found) for j, x in enumerate(v)]
    return v


def today() -> str:
    return _dt.date.today().isoformat()
