"""The users' tables and parity's own as pandas DataFrames, in and out.  The one module that
imports pandas, inside its functions (a command that reads no table does not pay for it).

In: the users' final_benchmark.csv (model engine npl decode_agg_tps prefill_tps), the summary.tsv
of their serving harness (the arm table, a blank line, the ratio block), gate_summary.tsv in their
layout or parity's gate_checks.tsv, each into a typed frame.  A row longer or shorter than its
header, a number that is not finite, an N that is not an integer: a ValueError of one line that
names the file and the row.
Out: one TSV writer (a cell is str(value), None is empty, a tab or line break inside a cell is a
space, nothing is quoted: the users' tools split on tabs) and one CSV writer (the ledger).
Joins: each engine's value over a reference engine's at the same N (`over`): the ratio block of
summary.tsv and the report's headline ("% of vLLM" beside "x over stock")."""

from __future__ import annotations

import math
import re

FINAL_BENCHMARK_COLUMNS = ["model", "engine", "npl", "decode_agg_tps", "prefill_tps"]


# --------------------------------------------------------------------------- in


def read_tsv(text: str, what: str, sep: str = "\t"):
    """Every cell as text (blank lines skipped, a quote is data); a row that does not fit the
    header's columns is a ValueError naming it."""
    import csv
    import io

    import pandas as pd

    if not text.strip():
        return pd.DataFrame()
    try:  # header=None: pandas neither takes a first column as the index nor drops cells to fit the header
        cells = pd.read_csv(io.StringIO(text), sep=sep, header=None, dtype=str, keep_default_na=False,
                            quoting=csv.QUOTE_NONE, engine="python", skip_blank_lines=True)
    except (pd.errors.ParserError, csv.Error) as e:  # a row longer than the header, or a byte csv refuses
        line = re.search(r"line (\d+)", str(e))
        if line is None:
            raise ValueError(f"{what}: {' '.join(str(e).split())[:200]}") from None
        raise ValueError(f"{what}: line {line.group(1)} {MISFIT}") from None
    short = cells.isna().any(axis=1)  # a row shorter than the header: its last cells are absent
    if short.any():
        raise ValueError(f"{what}: row {int(short.to_numpy().argmax()) + 1} {MISFIT}")
    return pd.DataFrame(cells.iloc[1:].to_numpy(), columns=list(cells.iloc[0]), dtype=str).reset_index(drop=True)


MISFIT = "does not fit its header's columns (truncated or edited?)"
INTEGER = re.compile(r"\s*[+-]?\d+\s*")


def typed(frame, what: str, text: tuple[str, ...] = (), ints: tuple[str, ...] = (), strict: bool = False):
    """Text columns kept; every other column numbers: int64 where every cell is an integer
    literal, else float64.  A cell that is not a number is missing (NaN), or a ValueError when
    strict; a non-finite number is always a ValueError; a column of `ints` holds integers only."""
    import pandas as pd

    out = frame.copy()
    for col in frame.columns:
        if col in text:
            continue
        cells = list(frame[col].astype(str))
        nums = [_number(c, what, col, strict) for c in cells]
        not_int = [c for v, c in zip(nums, cells) if v is None or not INTEGER.fullmatch(c)]
        if col in ints and not_int:
            raise ValueError(f"{what}: {col} is {not_int[0][:40]!r}, not an integer")
        if cells and not not_int:
            out[col] = pd.Series([int(c) for c in cells], index=frame.index, dtype="int64")
        else:
            out[col] = pd.Series([math.nan if v is None else v for v in nums], index=frame.index, dtype="float64")
    return out


def _number(cell: str, what: str, col: str, strict: bool) -> float | None:
    try:
        v = float(cell)
    except ValueError:
        if strict:
            raise ValueError(f"{what}: {col} is {cell[:40]!r}, not a number") from None
        return None
    if not math.isfinite(v):
        raise ValueError(f"{what}: {cell[:40]!r} where a number must be finite")
    return v


def records(frame) -> list[dict]:
    """A frame as plain dicts of Python values (NaN as None): what JSON and the report read."""
    if frame.empty:
        return []
    plain = frame.astype(object).where(frame.notna(), None)
    return [{k: _plain(v) for k, v in r.items()} for r in plain.to_dict("records")]


def _plain(v):
    item = getattr(v, "item", None)  # a numpy scalar
    return item() if callable(item) else v


def final_benchmark(text: str, what: str = "final_benchmark.csv"):
    """The users' final_benchmark.csv: one row per model x engine x npl, every number present
    and finite, npl an integer, no (model, engine, npl) twice."""
    frame = read_tsv(text, what, sep=",")
    missing = [c for c in FINAL_BENCHMARK_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{what}: no column {', '.join(missing)} (expected {','.join(FINAL_BENCHMARK_COLUMNS)})")
    if frame.empty:
        raise ValueError(f"{what}: no rows")
    frame = typed(frame, what, text=("model", "engine"), ints=("npl",), strict=True)
    twice = frame.duplicated(["model", "engine", "npl"])
    if twice.any():
        r = frame[twice].iloc[0]
        raise ValueError(f"{what}: {r['model']} {r['engine']} npl {r['npl']} twice")
    return frame


def users_summary(text: str, what: str = "summary.tsv", columns: list[str] | None = None):
    """The users' summary.tsv (their write_summary): (the arm table, [one frame per ratio block]).
    A block starts at a header line `arm n ...` or `ratio n ...`; the arm table must hold
    `columns` when it has rows."""
    import pandas as pd

    blocks: list[list[str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = line.split("\t")
        if cells[0] in ("arm", "ratio") and len(cells) > 1 and cells[1] == "n":
            blocks.append([line])
        elif not blocks:
            raise ValueError(f"{what}: a row before any header: {line[:60]!r}")
        else:
            blocks[-1].append(line)
    arms, ratios = [], []
    for b in blocks:
        table = typed(read_tsv("\n".join(b) + "\n", what), what, text=("arm", "ratio"), ints=("n",))
        (ratios if b[0].startswith("ratio") else arms).append(table)
    arm_table = pd.concat(arms, ignore_index=True) if arms else pd.DataFrame(columns=["arm", "n"])
    missing = [c for c in columns or [] if not arm_table.empty and c not in arm_table.columns]
    if missing:
        raise ValueError(f"{what}: no column {', '.join(missing)} (expected {' '.join(columns or [])})")
    return arm_table, ratios


GATE_COLUMNS = {"parity": ["phase", "check", "expected", "got", "status"],
                "users": ["phase", "check", "status", "actual", "expected", "details"]}


def gate_table(text: str, what: str = "gate table"):
    """gate_checks.tsv (parity's layout) or gate_summary.tsv (the users'): (layout, frame of text);
    layout None for a table without rows."""
    table = read_tsv(text, what)
    if table.empty:
        return None, table
    for layout, cols in GATE_COLUMNS.items():
        if set(cols) <= set(table.columns):
            return layout, table
    want = " or ".join(" ".join(c) for c in GATE_COLUMNS.values())
    raise ValueError(f"{what}: expected the columns {want}; got {' '.join(map(str, table.columns))}")


# --------------------------------------------------------------------------- out


def tsv(columns: list[str], rows) -> str:
    """The one TSV writer: a header line, then one line per row (list of cells or dict by column)."""
    import csv

    import pandas as pd

    rows = [[r.get(c) for c in columns] if isinstance(r, dict) else list(r) for r in rows]
    frame = pd.DataFrame(rows, columns=list(columns), dtype=object)
    return frame.map(_tsv_cell).to_csv(sep="\t", index=False, lineterminator="\n", quoting=csv.QUOTE_NONE)


def _tsv_cell(v) -> str:
    return "" if v is None else str(v).replace("\t", " ").replace("\r", " ").replace("\n", " ")


def csv_text(columns: list[str], rows, header: bool = True) -> str:
    """The one CSV writer (the ledger): quoted where the csv module quotes, None as empty."""
    import pandas as pd

    frame = pd.DataFrame([[r.get(c, "") for c in columns] for r in rows], columns=list(columns), dtype=object)
    return frame.to_csv(index=False, header=header, lineterminator="\n")


def csv_of(frame) -> str:
    """A frame as CSV text (a file's or stdout's): values as pandas writes them, missing as empty."""
    return frame.to_csv(index=False, lineterminator="\n")


def frame(columns: list[str], rows: list[list]):
    """A query result (columns, rows of plain values) as a frame, each column its best dtype
    (nullable integers stay integers)."""
    import pandas as pd

    return pd.DataFrame(rows, columns=columns, dtype=object).convert_dtypes() if columns else pd.DataFrame()


# --------------------------------------------------------------------------- joins


def over(rows: list[dict], reference: str, metrics: list[str], key: str = "n"):
    """Each engine's values over the reference's at the same key (N): one row per engine x key
    where both have a row (the reference's own rows left out), sorted; per metric m the columns
    m (the engine's value), `m ref` and `m over` (their ratio, NaN where either is missing or 0)."""
    import pandas as pd

    wide, have = _wide(rows, metrics, key)
    ref = wide[wide["engine"] == reference].drop(columns="engine")
    try:
        out = wide[wide["engine"] != reference].merge(ref, on=key, suffixes=("", " ref"), validate="many_to_one")
    except pd.errors.MergeError:
        raise ValueError(f"{reference}: more than one row at one {key}") from None
    for m in have:
        a, b = out[m], out[f"{m} ref"]
        out[f"{m} over"] = (a / b).where(a.notna() & b.notna() & (a != 0) & (b != 0))
    return out.sort_values(["engine", key], kind="stable").reset_index(drop=True)


def _wide(rows: list[dict], metrics: list[str], key: str):
    """(frame engine, key, one column per metric some row holds (finite numbers, else NaN), those metrics)."""
    import pandas as pd

    have = [m for m in metrics if any(m in r for r in rows)]
    data = [{"engine": r["engine"], key: r[key], **{m: _num(r.get(m)) for m in have}} for r in rows]
    return pd.DataFrame(data, columns=["engine", key, *have]), have


def _num(v):
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else math.nan


def against(rows: list[dict], references: list[str], metrics: list[str], key: str = "n") -> list[dict]:
    """Every engine x key x metric with its value and, per reference, value / the reference's
    ({"over": {ref: ratio or None}}; None on the reference's own row and where either is
    missing or 0), in the rows' engine order, then key, then metrics' order."""
    table, have = _wide(rows, metrics, key)
    for ref in references:
        ratios = over(rows, ref, have, key)[["engine", key, *(f"{m} over" for m in have)]]
        ratios = ratios.rename(columns={f"{m} over": f"{m} over {ref}" for m in have})
        table = table.merge(ratios, on=["engine", key], how="left")
    order = {e: i for i, e in enumerate(dict.fromkeys(r["engine"] for r in rows))}
    table = table.sort_values(key, kind="stable").sort_values("engine", key=lambda s: s.map(order), kind="stable")
    return [{"engine": r["engine"], key: r[key], "metric": m, "value": r[m],
             "over": {ref: r[f"{m} over {ref}"] for ref in references}} for r in records(table) for m in have]
