"""`parity levers import`: the users' recorded verdicts into the lever map.

Sources: every file of the seeds directory (a README left out), plus the lever map document
beside it (`<seeds>/../localai-paged/docs/VLLM_PARITY_LEVER_MAP.md`) when the directory has none
of that name, plus any --doc FILE.  A markdown file (headings and pipe tables) is read by
markdown.py, any other by handoff.py (the rendered seeds); lists.py reads every file.  An entry
seen twice (the same Phase and lever in two documents) is imported once, from the first source.

Each entry becomes a map row: lever (env levers as typed, `NAME=VALUE`; patch levers by
number), changes (what), verdict (REJECTED, DROPPED, FLAT, CLOSED, SUPERSEDED close it; SHIPPED,
KEPT, GO do not), said (the source's words), key_number, phase, artifact, date, source, pin `any`,
hardware_class (the seeds' GB10 class unless --hardware) and `import`, the entry's identity.
Rows are appended in Phase order (the tables and lists, which carry no Phase, first), so a
lever's latest row is its latest verdict, under the map's lock (parity.levers.map.append_new): a row whose `import` is
already there is left as the users keep it, so a second import changes nothing."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from parity.errors import UsageError
from parity.levers import map as levermap
from parity.levers.seeds.handoff import parse_handoff
from parity.levers.seeds.lists import parse_lists
from parity.levers.seeds.markdown import parse_markdown
from parity.levers.seeds.words import Entry
from parity.paths import PARITY_ROOT

DEFAULT_SEEDS = PARITY_ROOT.parent / "shared" / "seeds"
LEVER_MAP_DOC = "VLLM_PARITY_LEVER_MAP.md"
SEEDS_HARDWARE = "gb10_or_workstation_blackwell"  # every verdict of the seeds was measured on the GB10
KINDS = {"env": "runtime", "patch": "build", "named": "recorded"}


@dataclass
class ImportRequest:
    seeds: str | None = None  # None: ../shared/seeds beside the checkout
    docs: list[str] = field(default_factory=list)
    map: str | None = None  # None: levers.map, else <artifacts>/lever_map.yaml
    hardware: str = SEEDS_HARDWARE  # or `any`
    dry_run: bool = False


def is_markdown(text: str) -> bool:
    return bool(re.search(r"^#{1,6} \S", text, re.M) and re.search(r"^\|.*\|\s*$", text, re.M))


def parse_source(text: str, name: str) -> list[Entry]:
    """Every entry one document holds, by its format."""
    body = parse_markdown(text, name) if is_markdown(text) else parse_handoff(text, name)
    return body + parse_lists(text, name)


def source_files(seeds: Path, docs: list[Path]) -> list[Path]:
    if not seeds.is_dir():
        raise UsageError(f"--seeds {seeds}: not a directory (the users' seed documents; default {DEFAULT_SEEDS})")
    files = sorted(p for p in seeds.iterdir() if p.is_file() and not p.name.upper().startswith("README"))
    beside = seeds.parent / "localai-paged" / "docs" / LEVER_MAP_DOC
    if beside.is_file() and LEVER_MAP_DOC not in {p.name for p in files}:
        files.append(beside)
    for d in docs:
        if not d.is_file():
            raise UsageError(f"--doc {d}: no such file")
        files.append(d)
    if not files:
        raise UsageError(f"--seeds {seeds}: no document in it")
    return files


def collect(files: list[Path]) -> tuple[list[Entry], list[dict]]:
    """(the entries, first source wins on a repeat; per file: its entries and repeats)."""
    out: dict[str, Entry] = {}
    per = []
    for f in files:
        try:
            text = f.read_text(encoding="utf-8", errors="replace")
        except OSError as e:
            raise UsageError(f"{f}: cannot read it ({e.strerror})") from None
        got = parse_source(text, f.name)
        fresh = [e for e in got if e.key not in out]
        for e in fresh:
            out.setdefault(e.key, e)
        per.append(
            {
                "file": str(f),
                "entries": len({e.key for e in fresh}),
                "repeats": len(got) - len(fresh),
                "format": "markdown" if is_markdown(text) else "text",
            }
        )
    return list(out.values()), per


def phase_order(e: Entry) -> int:
    """Where an entry falls in the users' history: its Phase number (`104-108`: 104); the lever
    tables and lists, which carry none, first.  The map's latest row of a lever is its verdict."""
    m = re.match(r"\d+", e.phase or "")
    return int(m.group(0)) if m else -1


def row_of(e: Entry, hardware: str) -> dict:
    return {
        "lever": e.lever,
        "kind": KINDS[e.kind],
        "changes": e.what,
        "hardware_class": hardware,
        "pin": levermap.ANYWHERE,
        "verdict": e.verdict,
        "said": e.said,
        "key_number": e.key_number,
        "phase": f"Phase{e.phase}" if e.phase else None,
        "artifact": e.artifact,
        "date": e.date,
        "source": e.source,
        "import": e.key,
    }


def import_history(req: ImportRequest, map_path: Path) -> dict:
    """Read the sources, append the entries the map lacks; the counts by verdict and source."""
    if not str(req.hardware or "").strip():
        raise UsageError("--hardware: give a hardware class (e.g. gb10_or_workstation_blackwell) or `any`")
    seeds = Path(req.seeds).expanduser() if req.seeds else DEFAULT_SEEDS
    files = source_files(seeds, [Path(d).expanduser() for d in req.docs])
    if not req.dry_run:
        levermap.check_writable(map_path)
    entries, per = collect(files)
    entries.sort(key=phase_order)  # stable: a document's order within one Phase
    rows = [row_of(e, req.hardware) for e in entries]
    if req.dry_run:  # what a real import would add to the map as it is now
        have = {str(r.get("import")) for r in levermap.load(map_path)}
        added, present = [r for r in rows if str(r["import"]) not in have], sum(str(r["import"]) in have for r in rows)
    else:
        added, present = levermap.append_new(map_path, rows, "import", markdown=True)
    verdicts = Counter(e.verdict for e in entries)
    latest = {e.lever: e for e in entries if e.kind == "env"}
    return {
        "map": str(map_path),
        "dry_run": req.dry_run,
        "hardware_class": req.hardware,
        "sources": per,
        "entries": len(entries),
        "verdicts": dict(sorted(verdicts.items(), key=lambda kv: (-kv[1], kv[0]))),
        "kinds": dict(Counter(e.kind for e in entries)),
        "closing_env_levers": sorted(lv for lv, e in latest.items() if e.verdict in levermap.CLOSING),
        "added": len(added),
        "already": present,
        "markdown": None if req.dry_run or not added else str(levermap.markdown_path(map_path)),
    }
