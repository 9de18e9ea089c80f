"""The rendered PARITY_HANDOFF seed (a web view's text: tables lost their pipes, one row a line,
cells joined by spaces): the lever tables of section 4 ("Lever What Verdict Key number") and the
Phase records (`2026-07-02 Phase118 update: reject ...`, paragraphs opening `Phase 19 ...`,
sections `8. PHASE63 RESULT: ...` with their `Decision:` lines).

A table row is split at its first upper-case verdict word: before it the lever and what it
changes (one text: the split between those two cells is lost), after it the key number.  A Phase
record's verdict is its `Decision:` sentence's, else its opening sentence's; a record with no
verdict word (a measurement, a harness change) is not an entry."""

from __future__ import annotations

import re

from parity.levers.seeds.words import (
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

TABLE_HEADER = "Lever What Verdict Key number"
_SECTION = re.compile(r"^(\d+\.\d+) \S")
_TABLE_VERDICT = re.compile(r"\b(REJECTED|SHIPPED|DROPPED|SUPERSEDED|superseded|CLOSED|FLAT|GO)\b(\s*\([^)]*\))?")
_DATED = re.compile(r"^(20\d{2}-\d{2}-\d{2}) Phase\s?(\d+(?:-\d+)?)\b[^:]*:\s*(.*)$")
_RECORD = re.compile(r"^(?:\d+\. PHASE\s?(\d+) RESULT\b.*|Phase\s?(\d+)\b.*)$")
_HEADING = re.compile(r"^(?:\d+\.\d*\s+[A-Z][A-Z0-9 /:&()+.,'-]+$|\d+\. [A-Z]{3,}|[A-Z][A-Za-z ]+ \(.*\)$)")
_DECISION = re.compile(r"\bDecision:\s*([^\n]*(?:\n(?!\n)[^\n]*)*)")


def parse_handoff(text: str, source: str = "") -> list[Entry]:
    """Every verdict the rendered handoff holds: its lever tables' rows, then its Phase records."""
    return parse_tables(text, source) + parse_records(text, source)


def parse_tables(text: str, source: str = "") -> list[Entry]:
    lines = text.splitlines()
    out: list[Entry] = []
    for n, section in sorted(table_rows(lines).items()):
        out += _row(lines[n - 1].strip(), f"{source} section {section} line {n}")
    return out


def table_rows(lines: list[str]) -> dict[int, str]:
    """{line number (1-based): its section} of every row of a `Lever What Verdict Key number` table."""
    rows, section, in_table = {}, "?", False
    for n, raw in enumerate(lines, 1):
        line = raw.strip()
        if m := _SECTION.match(line):
            section = m.group(1)
        if line == TABLE_HEADER:
            in_table = True
        elif not line:
            in_table = False
        elif in_table:
            rows[n] = section
    return rows


def _row(line: str, where: str) -> list[Entry]:
    m = _TABLE_VERDICT.search(line)
    if not m:
        return []
    head, said, rest = line[: m.start()].strip(), m.group(0).strip(), line[m.end() :].strip(" ,;")
    phase = re.match(r"^Phase\s?(\d+)\b", head)
    levers = lever_of(head, bare=True) or [(head, "named", {})]
    return entries(
        levers,
        verdict=upper_verdict(m.group(1)),
        said=said,
        what=clip(head),
        key_number=clip(rest) or None,
        phase=phase.group(1) if phase else None,
        source=where,
    )


def _blocks(lines: list[str], skip: set[int]):
    """(phase, date, first line number, text) of each Phase record; lines in skip (table rows)
    end a record and start none."""
    cur = None
    for n, raw in enumerate(lines, 1):
        line = raw.strip()
        if n in skip:
            if cur:
                yield cur
            cur = None
            continue
        if m := _DATED.match(line):
            if cur:
                yield cur
            yield (m.group(2), m.group(1), n, m.group(3))
            cur = None
            continue
        m = _RECORD.match(line)
        phase = (m.group(1) or m.group(2)) if m else None
        if phase and not (cur and cur[0] == phase):
            if cur:
                yield cur
            cur = (phase, None, n, line)
        elif cur and (_HEADING.match(line) or line.startswith(("Lever What", "Series trim"))):
            yield cur
            cur = None
        elif cur:
            cur = (cur[0], cur[1], cur[2], cur[3] + "\n" + line)
    if cur:
        yield cur


def parse_records(text: str, source: str = "") -> list[Entry]:
    lines = text.splitlines()
    out: list[Entry] = []
    for phase, date, n, body in _blocks(lines, set(table_rows(lines))):
        out += record(phase, date, body, f"{source} line {n}")
    return out


_IMPERATIVE = re.compile(r"^(?:Do not promote|Reject|Keep|Drop)\b")


def verdict_sentence(body: str) -> tuple[str | None, str | None]:
    """(verdict, the sentence that says it): a `Decision:` sentence first, then the opening sentence
    of each paragraph that starts with the Phase (the latest first), then an imperative one."""
    said_in = [sentences(d)[0] for d in _DECISION.findall(body) if sentences(d)]
    paras = body.split("\n")
    leads = [sentences(p)[0] for i, p in enumerate(paras) if (i == 0 or p.startswith("Phase")) and sentences(p)]
    said_in += leads[::-1]
    said_in += [s for s in sentences(body) if _IMPERATIVE.match(s)]
    for s in said_in:
        if v := classify(s):
            return v, s
    return None, None


def record(phase: str, date: str | None, body: str, where: str) -> list[Entry]:
    """One Phase record's entries (none when it states no verdict)."""
    verdict, said = verdict_sentence(body)
    if verdict is None or said is None:
        return []
    flat = sentences(body)
    artifact = artifact_of(body)
    key = key_number([s for s in flat if s != said]) or key_number([said])
    levers = lever_of(said) or lever_of(body) or [(f"Phase{phase}", "named", {})]
    return entries(
        levers,
        verdict=verdict,
        said=clip(said),
        what=clip(flat[0] if flat else said),
        key_number=key,
        phase=phase,
        artifact=artifact,
        date=date or date_of_artifact(artifact),
        source=where,
    )
