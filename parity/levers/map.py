"""The lever map: every `parity ab` appends one row to a YAML file the users read and edit
(their verdict words, notes, comments), rendered beside it as a markdown table in the layout
of their VLLM_PARITY_LEVER_MAP.md (a master table, then "Drop / closed (do NOT pursue)").

A row is appended as text at the end of the file, so comments and hand edits above it stay
as they are; a file that no longer ends in its `levers:` list is rewritten whole.

Refusal: a lever whose latest row on the same hardware class and pin holds a closing verdict
(REJECTED, FLAT, NO-GO, DROPPED) is not measured again without --reopen REASON."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from pathlib import Path

from parity.errors import UsageError

MAP_NAME = "lever_map.yaml"
HEADER = """\
# Lever map (parity ab appends one row per A/B; parity levers lists it).  Yours to edit:
# set a verdict in your words (SHIPPED, default-off, REJECTED, DROPPED, ...), add notes.
# A lever whose latest row on the same hardware_class and pin says REJECTED, FLAT, NO-GO or
# DROPPED is not re-run without `parity ab --reopen REASON`.
levers:
"""
CLOSING = ("REJECTED", "FLAT", "NO-GO", "DROPPED")
COLUMNS = ["lever", "kind", "engine", "changes", "hardware_class", "pin", "series_digest", "verdict", "key_number", "metric", "point",
           "ratio", "low", "high", "gates", "gate_kind", "artifact", "report", "date", "reopen", "reopens"]  # fmt: skip


class LeverRefused(UsageError):
    """A closed lever asked again without --reopen (exit 2, one line naming the earlier row)."""


def default_path(profile, artifacts_root) -> Path:
    return Path(profile.levers.map).expanduser() if profile.levers.map else Path(artifacts_root).expanduser() / MAP_NAME


def load(path: Path) -> list[dict]:
    """The rows of a map file (none when it does not exist); a broken file is a ConfigError."""
    from parity.results import read_lever_map

    return read_lever_map(path)


def append(path: Path, row: dict) -> list[dict]:
    """Append one row (as text, keeping the file's comments); returns every row."""
    import yaml

    from parity.artifacts import atomic_write_text

    path = Path(path)
    before = load(path)
    clean = {k: row.get(k) for k in COLUMNS if row.get(k) is not None}
    item = yaml.safe_dump([clean], sort_keys=False, allow_unicode=True, width=1000)
    text = path.read_text() if path.exists() else HEADER
    if not text.endswith("\n"):
        text += "\n"
    candidate = text + item
    try:
        ok = len(load_text(candidate)) == len(before) + 1
    except Exception:  # noqa: BLE001 - any parse problem: rewrite the whole file below
        ok = False
    if not ok:  # the file no longer ends in its list: rewrite it (comments are lost)
        candidate = HEADER + "".join(yaml.safe_dump([r], sort_keys=False, allow_unicode=True, width=1000) for r in [*before, clean])
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, candidate)
    return [*before, clean]


def load_text(text: str) -> list[dict]:
    from parity.yamlload import safe_load

    data = safe_load(text) or {}
    return list(data.get("levers") or [])


def matching(rows: list[dict], lever: str, hardware_class: str | None, pin: str | None) -> list[dict]:
    return [r for r in rows if str(r.get("lever")) == lever and str(r.get("hardware_class")) == str(hardware_class) and str(r.get("pin")) == str(pin)]


def closing_row(rows: list[dict], lever: str, hardware_class: str | None, pin: str | None) -> dict | None:
    """The latest row of this lever on this hardware class and pin when its verdict closes it."""
    same = matching(rows, lever, hardware_class, pin)
    if not same:
        return None
    last = same[-1]
    return last if str(last.get("verdict", "")).strip().upper() in CLOSING else None


def describe(row: dict) -> str:
    key = row.get("key_number") or "no key number"
    return f"{row.get('date', '?')} {row.get('verdict')} ({key}; gates: {row.get('gates', '?')}) -> {row.get('artifact', '?')}"


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
        lines.append("| " + " | ".join(_cell(c) for c in [i, f"**{r.get('lever')}**", r.get("changes"), r.get("hardware_class"), pin,
                                                                _gate_cell(r), r.get("key_number"),
                                                                f"**{r.get('verdict')}**{reopen}", r.get("artifact"), r.get("date")]) + " |")  # fmt: skip
    closed = [r for r in rows if str(r.get("verdict", "")).strip().upper() in CLOSING]
    lines += ["", "## Drop / closed (do NOT pursue)", "", "| Lever | Why dropped |", "|-------|-------------|"]
    for r in closed:
        lines.append(f"| {_cell(r.get('lever'))} | **{_cell(r.get('verdict'))}** - {_cell(r.get('key_number'))}; {_cell(r.get('gates'))} "
                     f"({_cell(r.get('hardware_class'))}, pin {_cell(str(r.get('pin') or '-')[:8])}, {_cell(r.get('date'))}; reopen with `parity ab --reopen REASON`) |")  # fmt: skip
    return "\n".join(lines) + "\n"


def write_markdown(path: Path, rows: list[dict]) -> Path:
    from parity.artifacts import atomic_write_text

    md = Path(path).with_suffix(".md")
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
    from parity.results import existing_file

    path = existing_file(req.map, "--map") if req.map else default_path(ctx.profile, ctx.artifacts_root)
    rows = filter_rows(load(path), req.verdict, req.hardware, req.lever)
    return {"map": str(path), "rows": rows, "count": len(rows), "markdown": render_markdown(rows, path.name)}


def today() -> str:
    return _dt.date.today().isoformat()
