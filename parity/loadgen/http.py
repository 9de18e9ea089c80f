"""A lean asyncio HTTP/1.1 client: JSON requests and SSE streams.

Written for the load generator: keep-alive connections (one per worker),
chunked or content-length bodies, incremental SSE parsing, and one timestamp
per socket read (every event parsed from that read shares it).  Responses are
parsed inside an asyncio Protocol's data_received rather than through
StreamReader: that removes a future and a task switch per socket read, which
is most of the client's cost per streamed token.  No dependencies; the
parsers are pure and tested on captured server bytes."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Callable

MAX_HEAD = 64 * 1024
RECV_BUFFER = 64 * 1024


class HttpError(Exception):
    pass


# --------------------------------------------------------------------------- pure parsers


def parse_head(raw: bytes) -> tuple[int, dict[str, str]]:
    """Status line + headers (without the blank line) -> (status, lower-cased headers)."""
    lines = raw.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise HttpError(f"bad status line {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
    return int(parts[1]), headers


class BodyDecoder:
    """Incremental HTTP body decoder: chunked, content-length, or until close.
    feed(data) -> decoded bytes; .done once the body is complete."""

    def __init__(self, headers: dict[str, str]):
        self.chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        self.remaining = -1 if self.chunked else int(headers.get("content-length", -1))
        self.until_close = not self.chunked and self.remaining < 0
        self.done = not self.chunked and self.remaining == 0
        self._pending = b""  # chunked: an incomplete size line, CRLF or trailer
        self._need = -1  # chunked: >0 data bytes left in the chunk, 0 = CRLF after data, -1 = size line
        self._trailer = False
        self.leftover = b""  # bytes after the body (a pipelined response: connection not reusable)

    def at_chunk_boundary(self) -> bool:
        return self.chunked and self._need == -1 and not self._pending and not self._trailer and not self.done

    def feed(self, data: bytes) -> bytes:
        if self.done:
            self.leftover += data
            return b""
        if not self.chunked:
            if self.until_close:
                return data
            take = data[: self.remaining]
            self.remaining -= len(take)
            if self.remaining == 0:
                self.done = True
                self.leftover = data[len(take) :]
            return take
        buf = self._pending + data if self._pending else data
        n, pos, out = len(buf), 0, []
        while pos < n:
            need = self._need
            if need > 0:
                take = min(need, n - pos)
                out.append(buf[pos : pos + take])
                pos += take
                self._need = need - take
                continue
            if need == 0:
                if n - pos < 2:
                    break
                if buf[pos : pos + 2] != b"\r\n":
                    raise HttpError("chunk not followed by CRLF")
                pos += 2
                self._need = -1
                continue
            i = buf.find(b"\r\n", pos)
            if i < 0:
                break
            line, pos = buf[pos:i], i + 2
            if self._trailer:  # after the 0-size chunk: trailer lines until an empty one
                if not line:
                    self.done = True
                    self.leftover = buf[pos:]
                    pos = n
                continue
            try:
                size = int(line.split(b";", 1)[0], 16)
            except ValueError:
                raise HttpError(f"bad chunk size {line[:20]!r}") from None
            if size == 0:
                self._trailer = True
            else:
                self._need = size
        self._pending = buf[pos:]
        return out[0] if len(out) == 1 else b"".join(out)


class SSEParser:
    """Incremental text/event-stream parser: feed(bytes) -> list of event data
    (bytes; multi-line data joined with \\n).  Comments and other fields
    (event:, id:, retry:) are ignored."""

    def __init__(self):
        self._buf = b""

    def empty(self) -> bool:
        return not self._buf

    @staticmethod
    def _block(block: bytes) -> bytes | None:
        if block.startswith(b"data: ") and b"\n" not in block:
            return block[6:]  # the common case: one data line per event
        data = [ln[6:] if ln.startswith(b"data: ") else ln[5:] for ln in block.split(b"\n") if ln.startswith(b"data:")]
        return b"\n".join(data) if data else None

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buf + data if self._buf else data
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        blocks = buf.split(b"\n\n")
        self._buf = blocks.pop()
        events = []
        for block in blocks:
            ev = self._block(block)
            if ev is not None:
                events.append(ev)
        return events

    def close(self) -> list[bytes]:
        """End of stream: dispatch an event not terminated by a blank line."""
        buf, self._buf = self._buf.rstrip(b"\r\n"), b""
        ev = self._block(buf.replace(b"\r\n", b"\n")) if buf else None
        return [ev] if ev is not None else []


def simple_sse_chunks(data: bytes) -> tuple[list[bytes], int]:
    """Fast path for the common stream shape: complete HTTP chunks each holding
    exactly one `data: X\\n\\n` event.  Returns (events, bytes consumed); the
    rest (anything else, or a partial chunk) goes through BodyDecoder + SSEParser."""
    pos, n, events = 0, len(data), []
    find = data.find
    while pos < n:
        i = find(b"\r\n", pos)
        if i < 0:
            break
        try:
            size = int(data[pos:i], 16)
        except ValueError:
            break
        start, end = i + 2, i + 2 + size
        if size < 8 or end + 2 > n or data[end : end + 2] != b"\r\n" or data[start : start + 6] != b"data: " or find(b"\n", start) != end - 2 or data[end - 1 : end] != b"\n":
            break
        events.append(data[start + 6 : end - 2])
        pos = end + 2
    return events, pos


def request_bytes(method: str, host: str, port: int, path: str, body: bytes | None, accept: str = "application/json", keep_alive: bool = True) -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: {accept}\r\n"
    if not keep_alive:
        head += "Connection: close\r\n"
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + (body or b"")


def stream_request(host: str, port: int, path: str, body: bytes) -> bytes:
    """A streamed POST as written (the open loop builds them ahead of their due times)."""
    return request_bytes("POST", host, port, path, body, "text/event-stream")


# --------------------------------------------------------------------------- connections


class _Response:
    """The response being read on a connection (parsed inside data_received)."""

    __slots__ = ("on_event", "future", "head", "status", "headers", "dec", "sse", "parts", "got_bytes", "first_byte")

    def __init__(self, on_event, future):
        self.on_event, self.future = on_event, future
        self.head = b""
        self.status, self.headers = 0, {}
        self.dec: BodyDecoder | None = None
        self.sse: SSEParser | None = None
        self.parts: list[bytes] = []
        self.got_bytes = False
        self.first_byte: float | None = None  # perf_counter of the first bytes read


class _Protocol(asyncio.BufferedProtocol):
    """HTTP/1.1 response parsing straight in data_received: no StreamReader
    buffer, no task switch per socket read (the load generator's hot path).
    Reads go into one preallocated buffer (recv_into): a plain Protocol makes
    asyncio allocate 256 KiB per recv, which costs more than the parsing.
    due: sends falling due (the open loop's client._Armed: .at, a perf_counter time, and .fire()),
    written ahead of this read's parsing once .at has passed."""

    def __init__(self, due=None):
        self.transport = None
        self.resp: _Response | None = None
        self.closed = False
        self.due = due
        self._view = memoryview(bytearray(RECV_BUFFER))

    def get_buffer(self, sizehint: int):
        return self._view

    def buffer_updated(self, nbytes: int) -> None:
        now, due = time.perf_counter(), self.due
        if due is not None and due.at <= now:
            due.fire()
        self._received(now, self._view[:nbytes].tobytes())

    def connection_made(self, transport):
        self.transport = transport

    def connection_lost(self, exc):
        self.closed = True
        r, self.resp = self.resp, None
        if r is not None and not r.future.done():
            if r.dec is not None and r.dec.until_close:
                self._finish(r, time.perf_counter(), reusable=False)
            elif not r.got_bytes:
                r.future.set_exception(ConnectionResetError("connection closed before a response"))
            else:
                r.future.set_exception(HttpError("connection closed mid-response"))

    def data_received(self, data: bytes) -> None:
        self._received(time.perf_counter(), data)

    def _received(self, now: float, data: bytes) -> None:
        r = self.resp
        if r is None:
            return  # bytes nobody asked for: the connection is dropped after this response
        if not r.got_bytes:
            r.got_bytes, r.first_byte = True, now
        try:
            if r.dec is None:
                r.head += data
                i = r.head.find(b"\r\n\r\n")
                if i < 0:
                    if len(r.head) > MAX_HEAD:
                        raise HttpError("response head too large")
                    return
                r.status, r.headers = parse_head(r.head[:i])
                data, r.head = r.head[i + 4 :], b""
                r.dec = BodyDecoder(r.headers)
                if r.on_event is not None and r.status == 200 and r.headers.get("content-type", "").startswith("text/event-stream"):
                    r.sse = SSEParser()
            if r.sse is not None and r.dec.at_chunk_boundary() and r.sse.empty():
                events, used = simple_sse_chunks(data)
                if used:
                    on_event = r.on_event
                    for ev in events:
                        on_event(now, ev)
                    data = data[used:]
            body = r.dec.feed(data) if data else b""
            if body:
                if r.sse is not None:
                    on_event = r.on_event
                    for ev in r.sse.feed(body):
                        on_event(now, ev)
                else:
                    r.parts.append(body)
            if r.dec.done:
                self._finish(r, now, reusable=not r.dec.leftover and r.headers.get("connection", "").lower() != "close")
        except Exception as e:  # a parse error, or the event handler failed
            self.resp = None
            if not r.future.done():
                r.future.set_exception(e)
            self.transport.close()

    def _finish(self, r: _Response, now: float, reusable: bool) -> None:
        if r.sse is not None:
            for ev in r.sse.close():
                r.on_event(now, ev)
        self.resp = None
        if not reusable:
            self.closed = True
            self.transport.close()
        if not r.future.done():
            r.future.set_result((r.status, r.headers, b"".join(r.parts)))


class Connection:
    """One keep-alive HTTP/1.1 connection, reopened when the server closed it."""

    def __init__(self, host: str, port: int, connect_timeout: float = 10.0, due=None):
        self.host, self.port, self.connect_timeout = host, port, connect_timeout
        self.due = due  # the open loop's sends falling due, written by this connection's reads (_Protocol)
        self.proto: _Protocol | None = None
        self.opened = 0  # connections opened (keep-alive reuse shows as opened < requests)
        self.connect_s: float | None = None  # the last exchange's TCP connect (None: it reused the connection)
        self.first_byte: float | None = None  # the last exchange's first response bytes (perf_counter)
        self.sent_at: float | None = None  # when the last request was written (perf_counter)

    @property
    def is_open(self) -> bool:
        p = self.proto
        return p is not None and not p.closed and p.transport is not None and not p.transport.is_closing()

    def close(self) -> None:
        if self.proto is not None and self.proto.transport is not None:
            self.proto.transport.close()
        self.proto = None

    async def open(self) -> None:
        """Connect now (a closed connection is reopened); its time adds to connect_s."""
        self.close()
        t0 = time.perf_counter()
        loop = asyncio.get_running_loop()
        connect = loop.create_connection(lambda: _Protocol(self.due), self.host, self.port)
        _, self.proto = await asyncio.wait_for(connect, self.connect_timeout)
        self.connect_s = (self.connect_s or 0.0) + time.perf_counter() - t0
        self.opened += 1

    def begin(self, data: bytes, on_event) -> _Response:
        """Write a request on this open connection now, awaiting nothing (the open loop writes at the due
        time itself); pass what it returns to stream()/_exchange to read the response."""
        resp = _Response(on_event, asyncio.get_running_loop().create_future())
        self.proto.resp = resp
        self.sent_at = time.perf_counter()
        self.proto.transport.write(data)
        return resp

    async def _exchange(self, data: bytes, on_event, begun: _Response | None = None) -> tuple[int, dict, bytes]:
        """Write a request (unless begun already wrote it), wait for the whole response.  One retry on a
        fresh connection when a reused one turns out closed (keep-alive race)."""
        self.connect_s = self.first_byte = None
        for attempt in (0, 1):
            resp, begun = begun, None
            reused = resp is not None or self.is_open
            if resp is None:
                if not reused:
                    await self.open()
                resp = self.begin(data, on_event)
            try:
                out = await resp.future
                self.first_byte = resp.first_byte
                return out
            except ConnectionResetError:
                self.close()
                if attempt or not reused:
                    raise
            except BaseException:
                self.close()  # timeout/cancel mid-response: the connection is not reusable
                raise
        raise AssertionError("unreachable")

    async def request(self, method: str, path: str, payload=None) -> tuple[int, object]:
        body = json.dumps(payload).encode() if payload is not None else None
        status, _, raw = await self._exchange(request_bytes(method, self.host, self.port, path, body), None)
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw.decode("utf-8", "replace")

    async def stream(self, path: str, body: bytes, on_event: Callable[[float, bytes], None]) -> tuple[int, bytes]:
        """POST body; on_event(arrival_time, data) for every SSE event, called
        as the bytes arrive.  Returns (status, raw body): the body is kept only
        for non-SSE answers (an error JSON)."""
        return await self.send_stream(stream_request(self.host, self.port, path, body), on_event)

    async def send_stream(self, data: bytes, on_event, begun: _Response | None = None) -> tuple[int, bytes]:
        """stream() of a request built already (stream_request); begun: begin(data) wrote it."""
        status, _, raw = await self._exchange(data, on_event, begun)
        return status, raw


async def request_json(host: str, port: int, method: str, path: str, payload=None, timeout: float = 30.0) -> tuple[int, object]:
    """One request on a fresh connection, bounded by timeout."""
    conn = Connection(host, port, timeout)
    try:
        return await asyncio.wait_for(conn.request(method, path, payload), timeout)
    finally:
        conn.close()


async def request_text(host: str, port: int, path: str, timeout: float = 30.0) -> tuple[int, str]:
    conn = Connection(host, port, timeout)
    try:
        status, body = await asyncio.wait_for(conn.request("GET", path), timeout)
        return status, body if isinstance(body, str) else json.dumps(body)
    finally:
        conn.close()
