"""reports/BENCHMARK.md + BENCHMARK.csv: one row per report, append-only.

Each report has a sidecar JSON (<stem>.json) holding its ledger row, so the
ledger can be rebuilt from the reports alone (`parity report --rebuild-ledger`);
a report without a sidecar is read from its markdown front matter."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import re
from pathlib import Path

from parity import tables
from parity.files import atomic_write_text
from parity.filelock import lock_path
from parity.filelock import locked as file_locked
from parity.errors import UsageError

COLUMNS = ["date", "phase", "title", "verdict", "key_ratios", "report", "artifact"]
MD_HEADER = "# Benchmark ledger\n\nOne row per phase report (append-only; `parity report --rebuild-ledger` regenerates it).\n\n"
REPORT_NAME = re.compile(r"^\d{4}-\d{2}-\d{2}-phase(\d+)-.*\.md$")


def _md_cell(v) -> str:
    return str(v if v is not None else "").replace("|", "\\|").replace("\n", " ")


def md_row(row: dict) -> str:
    cells = [_md_cell(row.get(c)) for c in COLUMNS]
    cells[5] = f"[{cells[5]}]({cells[5]})" if cells[5] else ""
    return "| " + " | ".join(cells) + " |"


def _md_table_head() -> str:
    return "| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS) + "\n"


def _csv_line(row: dict) -> str:
    return tables.csv_text(COLUMNS, [row], header=False)


def read_rows(out_dir: Path) -> list[dict]:
    p = Path(out_dir) / "BENCHMARK.csv"
    if not p.is_file():
        return []
    try:
        return list(csv.DictReader(io.StringIO(p.read_text())))
    except (UnicodeDecodeError, csv.Error) as e:
        raise UsageError(f"{p}: a broken ledger ({e}); `parity report --rebuild-ledger --out-dir {out_dir}` regenerates it from the reports") from None


def next_phase(out_dir: Path) -> int:
    """One more than the highest phase in the ledger or among the reports."""
    seen = []
    for r in read_rows(out_dir):
        try:
            seen.append(int(r.get("phase") or 0))
        except ValueError:
            pass
    for f in Path(out_dir).glob("*.md"):
        m = REPORT_NAME.match(f.name)
        if m:
            seen.append(int(m.group(1)))
    return max(seen, default=0) + 1


def append(out_dir: Path, row: dict) -> None:
    """One row more in both files, under the ledger's lock (concurrent writers all land).
    Each file is replaced whole (a writer killed mid-write leaves the previous file), the CSV
    first; a markdown a killed writer left one row behind gets that row too.  The markdown
    rows go right after the table's last row, so notes below the table stay below it."""
    out_dir = Path(out_dir)
    csv_p, md_p = out_dir / "BENCHMARK.csv", out_dir / "BENCHMARK.md"
    with locked(out_dir):
        old_csv = csv_p.read_text() if csv_p.is_file() else ",".join(COLUMNS) + "\n"
        if old_csv and not old_csv.endswith("\n"):
            old_csv += "\n"
        earlier = list(csv.DictReader(io.StringIO(old_csv)))
        atomic_write_text(csv_p, old_csv + _csv_line(row))
        old_md = md_p.read_text() if md_p.is_file() else MD_HEADER + _md_table_head()
        behind = earlier[_md_row_count(old_md):]
        atomic_write_text(md_p, _md_with_rows(old_md, [md_row(r) for r in [*behind, row]]))


def _md_table(lines: list[str]) -> tuple[int, int] | None:
    """(index of the ledger table's head line, index after its last row)."""
    head = next((i for i, ln in enumerate(lines) if ln.strip() == _md_table_head().splitlines()[0]), None)
    if head is None:
        return None
    end = head + 1
    while end < len(lines) and lines[end].lstrip().startswith("|"):
        end += 1
    return head, end


def _md_row_count(text: str) -> int:
    span = _md_table(text.splitlines())
    return 0 if span is None else max(0, span[1] - span[0] - 2)


def _md_with_rows(text: str, row_lines: list[str]) -> str:
    lines = text.splitlines(keepends=True)
    add = "".join(r + "\n" for r in row_lines)
    span = _md_table(lines)
    if span is None:  # no ledger table (a hand-edited file): a new one at the end
        return text.rstrip("\n") + "\n\n" + _md_table_head() + add
    end = span[1]
    if end == len(lines) and lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    return "".join(lines[:end]) + add + "".join(lines[end:])


@contextlib.contextmanager
def locked(out_dir: Path):
    """The ledger's lock (one for both files; re-entrant in one thread): hold it from choosing
    a phase number to appending its row, and no two writers take the same number."""
    with file_locked(lock_path(Path(out_dir) / "BENCHMARK.csv")):
        yield


def front_matter(text: str) -> dict:
    """The `---` JSON-valued front matter a report starts with (key: json-value)."""
    if not text.startswith("---\n"):
        return {}
    end = text.find("\n---", 4)
    if end < 0:
        return {}
    out = {}
    for line in text[4:end].splitlines():
        key, sep, val = line.partition(":")
        if not sep:
            continue
        try:
            out[key.strip()] = json.loads(val.strip())
        except ValueError:
            out[key.strip()] = val.strip()
    return out


def rebuild(out_dir: Path) -> list[dict]:
    """Regenerate both ledger files from the reports' sidecars/front matter.  Rows of a running
    ledger whose report lives elsewhere (a campaign's, in its run dir) are kept while that
    report still exists."""
    out_dir = Path(out_dir)
    with locked(out_dir):
        return _rebuild(out_dir)


def _rebuild(out_dir: Path) -> list[dict]:
    try:
        kept = read_rows(out_dir)
    except UsageError:  # a broken ledger is what a rebuild is for
        kept = []
    rows = [r for r in kept if "/" in (r.get("report") or "") and (out_dir / r["report"]).is_file()]
    for md in sorted(out_dir.glob("*.md")):
        if not REPORT_NAME.match(md.name):
            continue
        side = md.with_suffix(".json")
        data = None
        if side.is_file():
            try:
                data = json.loads(side.read_text()).get("ledger")
            except (ValueError, AttributeError):  # not JSON, or not an object: the front matter says it
                data = None
        if not isinstance(data, dict) or not data:
            data = front_matter(md.read_text(errors="replace"))
            data.setdefault("artifact", data.get("run", ""))
        if _int(data.get("phase")) <= 0:
            continue
        data.setdefault("report", md.name)
        rows.append({c: data.get(c, "") for c in COLUMNS})
    rows.sort(key=lambda r: (_int(r["phase"]), str(r["date"]), str(r["report"])))
    atomic_write_text(out_dir / "BENCHMARK.csv", tables.csv_text(COLUMNS, rows))
    atomic_write_text(out_dir / "BENCHMARK.md", MD_HEADER + _md_table_head() + "".join(md_row(r) + "\n" for r in rows))
    return rows


def _int(v) -> int:
    try:
        return int(v or 0)
    except (TypeError, ValueError):
        return 0
