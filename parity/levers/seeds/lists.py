"""Verdict lists: SPEEDUP_HUNT's ranked levers (`4. M-tile / MINBLOCKS occupancy: EXHAUSTED
(measured neutral-to-negative). Do not pursue.`, `- W4A16: REJECT (...)`, `1. B re-graph (patch
0025) - LAND NOW.`), the README's "Rejected / flat levers" (`- **Lever 3 - act-quant fusion:
FLAT.**`), a series trim's `KEEP - ...` / `DROP - ...`.  An item (numbered, bulleted, or a line
opening in bold) is an entry when an upper-case verdict word comes within its first words: the
text before it names the lever, the rest is its key number."""

from __future__ import annotations

import re

from parity.levers.seeds.words import UPPER, Entry, clip, entries, lever_of, upper_verdict

_ITEM = re.compile(r"^\s*(?:\d+\.|[•*-])\s+(.*)$|^\s*(\*\*.*)$")
_LEAD = 140  # the verdict word must come this early: later it is prose about something else


def items(text: str):
    """(line number, item text) of every list item, its wrapped lines joined."""
    cur = None
    for n, line in enumerate(text.splitlines(), 1):
        m = _ITEM.match(line)
        if m:
            if cur:
                yield cur
            cur = (n, (m.group(1) or m.group(2)).strip())
        elif cur and line.strip() and not line.startswith(("#", "|")):
            cur = (cur[0], cur[1] + " " + line.strip())
        else:
            if cur:
                yield cur
            cur = None
    if cur:
        yield cur


def parse_lists(text: str, source: str = "") -> list[Entry]:
    out: list[Entry] = []
    for n, raw in items(text):
        item = " ".join(raw.replace("**", "").replace("`", "").split())
        m = UPPER.search(item[:_LEAD])
        if not m or m.group(1) == "GO":
            continue
        name = item[: m.start()].strip(" :-–(")
        rest = item[m.end() :].strip(" .:-–")
        if not name and m.group(1) in ("KEEP", "DROP"):  # a series trim's `KEEP - test sentinels (...): ...`
            name, _, rest = rest.partition(":")
            name = name.strip()
        if (
            len(name) < 3 or ":" in name or '"' in name
        ):  # a colon or quote before it: prose quoting a verdict, not an item naming one
            continue
        levers = lever_of(name, bare=True) or [(clip(name, 120), "named", {})]
        out += entries(
            levers,
            verdict=upper_verdict(m.group(1)),
            said=clip(item[m.start() : m.end() + 60]),
            what=clip(name),
            key_number=clip(rest) or None,
            source=f"{source} line {n}",
        )
    return out
