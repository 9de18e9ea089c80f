"""The users' markdown lever documents (VLLM_PARITY_LEVER_MAP.md; the markdown PARITY_HANDOFF.md
too): pipe tables with a Lever column and a verdict column (`Verdict`, or the `Why dropped` of
"Drop / closed (do NOT pursue)", where a row without a verdict word is CLOSED), and the
`### Phase N ...` sections (their `Decision:` sentence, else their opening one).

The master "pursue list" holds statuses (NOT STARTED, IN PROGRESS), not verdicts: it is not read."""

from __future__ import annotations

import re

from parity.levers.seeds.handoff import verdict_sentence
from parity.levers.seeds.words import (
    UPPER,
    Entry,
    artifact_of,
    classify,
    clip,
    date_of_artifact,
    entries,
    key_number,
    lever_of,
    sentences,
    upper_verdict,
)

_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_PHASE = re.compile(r"^Phase\s?(\d+)\b")
_MARKUP = re.compile(r"\*\*|`")


def plain(cell: str) -> str:
    return " ".join(_MARKUP.sub("", cell).split())


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def parse_markdown(text: str, source: str = "") -> list[Entry]:
    return parse_tables(text, source) + parse_phase_sections(text, source)


def parse_tables(text: str, source: str = "") -> list[Entry]:
    out: list[Entry] = []
    lines = text.splitlines()
    heading, head, cols = "", None, {}
    for n, line in enumerate(lines, 1):
        if m := _HEADING.match(line):
            heading = plain(m.group(2))
        if not line.startswith("|"):
            head = None
            continue
        row = cells(line)
        if head is None:
            head = [plain(c).lower() for c in row]
            cols = {
                k: next((i for i, h in enumerate(head) if h.startswith(k)), None)
                for k in ("lever", "what", "verdict", "key number", "why dropped")
            }
            continue
        if (
            set("".join(row)) <= set("-: ")
            or cols["lever"] is None
            or (cols["verdict"] is None and cols["why dropped"] is None)
        ):
            continue
        out += _table_row(row, cols, heading, f"{source} table {heading!r} line {n}")
    return out


def _table_row(row: list[str], cols: dict, heading: str, where: str) -> list[Entry]:
    cell = lambda k: plain(row[cols[k]]) if cols[k] is not None and cols[k] < len(row) else ""  # noqa: E731
    name = cell("lever")
    if cols["verdict"] is not None:
        said, key = cell("verdict"), cell("key number") or None
        m = UPPER.search(said)
        verdict = upper_verdict(m.group(1)) if m else classify(said)
    else:
        said = cell("why dropped")
        key = said
        m = UPPER.search(said)
        verdict = upper_verdict(m.group(1)) if m else (classify(said) or "CLOSED")  # the table is the closed list
    if not name or not verdict:
        return []
    phase = _PHASE.match(name)
    levers = lever_of(name, bare=True) or [(name, "named", {})]
    return entries(
        levers,
        verdict=verdict,
        said=clip(said),
        what=clip(" - ".join(filter(None, [name, cell("what")]))),
        key_number=clip(key) if key else None,
        phase=phase.group(1) if phase else None,
        source=where,
    )


def sections(text: str):
    """(heading, first line number, body) of every markdown section."""
    heading, start, body = None, 0, []
    for n, line in enumerate(text.splitlines(), 1):
        if m := _HEADING.match(line):
            if heading is not None:
                yield heading, start, "\n".join(body)
            heading, start, body = plain(m.group(2)), n, []
        else:
            body.append(line)
    if heading is not None:
        yield heading, start, "\n".join(body)


def paragraphs(body: str) -> str:
    """The section's prose as the handoff parser reads it: one paragraph a line (hard-wrapped
    lines joined; a list item its own paragraph; table rows left out)."""
    out, cur = [], []
    for line in body.splitlines():
        s = line.strip()
        item = re.match(r"^(?:[-*]|\d+\.)\s+(.*)$", s)
        if not s or s.startswith(("|", "```")) or item:
            if cur:
                out.append(" ".join(cur))
            cur = [item.group(1)] if item else []
            continue
        cur.append(s)
    if cur:
        out.append(" ".join(cur))
    return "\n".join(_MARKUP.sub("", p) for p in out)


def parse_phase_sections(text: str, source: str = "") -> list[Entry]:
    out: list[Entry] = []
    for heading, n, body in sections(text):
        m = _PHASE.match(heading)
        if not m:
            continue
        prose = paragraphs(body)
        verdict, said = verdict_sentence(prose)
        if verdict is None or said is None:
            continue
        flat = sentences(prose)
        raw = _MARKUP.sub("", body)
        artifact = artifact_of(raw)
        levers = lever_of(said) or lever_of(raw) or [(f"Phase{m.group(1)}", "named", {})]
        out += entries(
            levers,
            verdict=verdict,
            said=clip(said),
            what=clip(heading),
            key_number=key_number([s for s in flat if s != said]),
            phase=m.group(1),
            artifact=artifact,
            date=date_of_artifact(artifact),
            source=f"{source} section {heading!r} line {n}",
        )
    return out
