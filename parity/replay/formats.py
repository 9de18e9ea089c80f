"""The published request-trace formats, one pure parse_*() each (text in, Trace out), and the
format told from a file's first line.  A row the publisher marks as failed (no input or no
output tokens) is left out and counted; anything else a parser cannot read is a TraceError
naming the file, the line and the problem (exit 2).

- azure: Azure LLM inference trace 2023 CSV: TIMESTAMP (wall clock, 7 fractional digits),
  ContextTokens, GeneratedTokens.  No prefix identity, no sessions.
- burstgpt: BurstGPT CSV: Timestamp (s), Model, Request tokens, Response tokens, Total tokens,
  Log Type; BurstGPT_3 inserts Session ID and Elapsed time (read by name, not position).
- mooncake: Mooncake FAST'25 JSONL: timestamp (ms), input_length, output_length, hash_ids of
  512-token blocks (ids chained: an id stands for its whole prefix).
- bailian: Qwen-Bailian JSONL: chat_id, parent_chat_id (-1: a root), timestamp (s),
  input_length, output_length, type, turn, hash_ids of 16-token blocks."""

from __future__ import annotations

import csv
import io
import json
import math
from datetime import datetime

import msgspec
from pathlib import Path
from typing import Callable

from parity.errors import UsageError
from parity.replay.record import Trace, TraceRequest

BLOCK_SIZE = {"mooncake": 512, "bailian": 16}  # tokens per hash id, as each publisher says
AZURE_HEADER = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")


class TraceError(UsageError):
    """A trace file parity cannot read: one line, exit 2."""


def _count(value, where: str, name: str) -> int:
    """A token count: a whole number >= 0 (JSON int or CSV digits)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TraceError(f"{where}: {name} {value!r} is not a whole number")
    try:
        n = int(value)
    except ValueError:
        raise TraceError(f"{where}: {name} {value!r} is not a whole number") from None
    if n < 0:
        raise TraceError(f"{where}: {name} {n} is negative")
    return n


def _seconds(value, where: str, name: str) -> float:
    if isinstance(value, bool):
        raise TraceError(f"{where}: {name} {value!r} is not a number")
    try:
        t = float(value)
    except (TypeError, ValueError):
        raise TraceError(f"{where}: {name} {value!r} is not a number") from None
    if not math.isfinite(t) or t < 0:
        raise TraceError(f"{where}: {name} {value!r} is not a time >= 0")
    return t


def _wall_clock(text: str, where: str) -> float:
    """'2023-11-16 18:17:03.9799600' -> seconds since the epoch (any number of fractional digits)."""
    head, _, frac = text.strip().partition(".")
    try:
        whole = datetime.strptime(head, "%Y-%m-%d %H:%M:%S").timestamp()
        return whole + (float(f"0.{frac}") if frac else 0.0)
    except ValueError:
        raise TraceError(f"{where}: TIMESTAMP {text!r} is not 'YYYY-MM-DD HH:MM:SS.fraction'") from None


def _finish(fmt: str, source: str, rows: list[TraceRequest], dropped: dict[str, int]) -> Trace:
    """Requests in arrival order (stable), times from the first one."""
    if not rows:
        raise TraceError(f"{source}: no request to replay ({fmt} trace; left out: {dropped or 'none'})")
    rows.sort(key=lambda r: r.at_s)
    t0 = rows[0].at_s
    reqs = tuple(msgspec.structs.replace(r, at_s=round(r.at_s - t0, 6)) for r in rows)
    return Trace(fmt, reqs, BLOCK_SIZE.get(fmt), dict(dropped), source)


def _kept(n_in: int, n_out: int, dropped: dict[str, int]) -> bool:
    """A row the trace marks as failed (no input or no output tokens) is left out, counted."""
    why = "no input tokens" if n_in == 0 else "no output tokens (a failed request)" if n_out == 0 else None
    if why:
        dropped[why] = dropped.get(why, 0) + 1
    return why is None


def _csv_rows(text: str, source: str) -> tuple[list[str], list[tuple[int, list[str]]]]:
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
    except StopIteration:
        raise TraceError(f"{source}: empty file") from None
    rows = [(reader.line_num, row) for row in reader if row]
    return [h.strip() for h in header], rows


def parse_azure(text: str, source: str = "trace") -> Trace:
    header, rows = _csv_rows(text, source)
    if header != AZURE_HEADER:
        raise TraceError(f"{source} line 1: expected the Azure LLM header {','.join(AZURE_HEADER)}, "
                         f"got {','.join(header)}")
    out, dropped = [], {}
    for line, row in rows:
        where = f"{source} line {line}"
        if len(row) != 3:
            raise TraceError(f"{where}: {len(row)} fields, expected 3 ({','.join(AZURE_HEADER)})")
        n_in, n_out = _count(row[1], where, "ContextTokens"), _count(row[2], where, "GeneratedTokens")
        if _kept(n_in, n_out, dropped):
            out.append(TraceRequest(_wall_clock(row[0], where), n_in, n_out, line=line))
    return _finish("azure", source, out, dropped)


def parse_burstgpt(text: str, source: str = "trace") -> Trace:
    header, rows = _csv_rows(text, source)
    missing = [c for c in BURSTGPT_COLUMNS if c not in header]
    if missing:
        raise TraceError(f"{source} line 1: a BurstGPT header needs {', '.join(BURSTGPT_COLUMNS)}; "
                         f"missing {', '.join(missing)}")
    col = {name: i for i, name in enumerate(header)}
    session = col.get("Session ID")
    out, dropped = [], {}
    for line, row in rows:
        where = f"{source} line {line}"
        if len(row) != len(header):
            raise TraceError(f"{where}: {len(row)} fields, the header has {len(header)}")
        n_in = _count(row[col["Request tokens"]], where, "Request tokens")
        n_out = _count(row[col["Response tokens"]], where, "Response tokens")
        if _kept(n_in, n_out, dropped):
            sid = row[session].strip() if session is not None else ""
            at = _seconds(row[col["Timestamp"]], where, "Timestamp")
            out.append(TraceRequest(at, n_in, n_out, session=sid or None, line=line))
    return _finish("burstgpt", source, out, dropped)


def _json_lines(text: str, source: str):
    for line, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError as e:
            raise TraceError(f"{source} line {line}: not JSON ({e})") from None
        if not isinstance(obj, dict):
            raise TraceError(f"{source} line {line}: a JSON {type(obj).__name__}, expected an object")
        yield line, obj


def _hash_ids(obj: dict, n_in: int, block: int, where: str) -> tuple[int, ...] | None:
    ids = obj.get("hash_ids")
    if ids is None:
        return None
    if not isinstance(ids, list) or any(isinstance(h, bool) or not isinstance(h, int) for h in ids):
        raise TraceError(f"{where}: hash_ids must be a list of whole numbers")
    need = -(-n_in // block)
    if len(ids) != need:
        raise TraceError(f"{where}: {len(ids)} hash ids for input_length {n_in} at {block} tokens a block "
                         f"({need} needed): is the block size right? (block_size)")
    return tuple(ids)


def _lengths(obj: dict, where: str) -> tuple[int, int]:
    return _count(obj["input_length"], where, "input_length"), _count(obj["output_length"], where, "output_length")


def _required(obj: dict, where: str, keys: tuple[str, ...]) -> None:
    missing = [k for k in keys if k not in obj]
    if missing:
        raise TraceError(f"{where}: missing {', '.join(missing)}")


def parse_mooncake(text: str, source: str = "trace", block_size: int = BLOCK_SIZE["mooncake"]) -> Trace:
    out, dropped = [], {}
    for line, obj in _json_lines(text, source):
        where = f"{source} line {line}"
        _required(obj, where, ("timestamp", "input_length", "output_length"))
        n_in, n_out = _lengths(obj, where)
        at = _seconds(obj["timestamp"], where, "timestamp") / 1000.0  # milliseconds
        ids = _hash_ids(obj, n_in, block_size, where)
        if _kept(n_in, n_out, dropped):
            out.append(TraceRequest(at, n_in, n_out, ids, block_size if ids is not None else None, line=line))
    return _finish("mooncake", source, out, dropped)


def parse_bailian(text: str, source: str = "trace", block_size: int = BLOCK_SIZE["bailian"]) -> Trace:
    out, dropped, root = [], {}, {}
    for line, obj in _json_lines(text, source):
        where = f"{source} line {line}"
        _required(obj, where, ("chat_id", "parent_chat_id", "timestamp", "input_length", "output_length"))
        chat, parent = obj["chat_id"], obj["parent_chat_id"]
        root[chat] = chat if parent == -1 else root.get(parent, parent)  # a session: the chats under one root
        n_in, n_out = _lengths(obj, where)
        ids = _hash_ids(obj, n_in, block_size, where)
        if _kept(n_in, n_out, dropped):
            at = _seconds(obj["timestamp"], where, "timestamp")
            size = block_size if ids is not None else None
            out.append(TraceRequest(at, n_in, n_out, ids, size, session=str(root[chat]), line=line))
    return _finish("bailian", source, out, dropped)


PARSERS: dict[str, Callable[..., Trace]] = {
    "azure": parse_azure, "burstgpt": parse_burstgpt, "mooncake": parse_mooncake, "bailian": parse_bailian,
}
KNOWN = "Azure LLM CSV (TIMESTAMP,ContextTokens,GeneratedTokens), BurstGPT CSV, Mooncake JSONL or Bailian JSONL"


def detect(text: str, source: str = "trace") -> str:
    """The format, from the first non-empty line; a file that is none of them is a TraceError."""
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if first.startswith("{"):
        try:
            obj = json.loads(first)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and "chat_id" in obj:
            return "bailian"
        if isinstance(obj, dict) and "input_length" in obj:
            return "mooncake"
    else:
        header = [h.strip() for h in first.split(",")]
        if header == AZURE_HEADER:
            return "azure"
        if all(c in header for c in BURSTGPT_COLUMNS):
            return "burstgpt"
    raise TraceError(f"{source}: not a request trace parity reads ({KNOWN}); its first line: {first[:80]!r}")


def parse(text: str, source: str = "trace", block_size: int | None = None) -> Trace:
    """Any of the formats, told from the text; block_size overrides the publisher's tokens per hash id."""
    fmt = detect(text, source)
    if block_size is not None and fmt in BLOCK_SIZE:
        return PARSERS[fmt](text, source, block_size)
    return PARSERS[fmt](text, source)


def read_trace(path: str | Path, block_size: int | None = None) -> Trace:
    p = Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TraceError(f"{path}: no such trace file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise TraceError(f"{path}: cannot read the trace ({type(e).__name__}: {e})") from None
    return parse(text.lstrip("\ufeff"), str(path), block_size)
