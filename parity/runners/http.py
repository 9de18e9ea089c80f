"""A lean asyncio HTTP/1.1 client: JSON requests and SSE streams (chunked or not).

Written for the load generator: one connection per request, no dependencies,
timestamps taken as each SSE event is parsed."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Callable


class HttpError(Exception):
    pass


async def _open(host: str, port: int, timeout: float):
    return await asyncio.wait_for(asyncio.open_connection(host, port, limit=1 << 20), timeout)


def _request_bytes(method: str, host: str, port: int, path: str, body: bytes | None, accept: str = "application/json") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: {accept}\r\nConnection: close\r\n"
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + (body or b"")


async def _read_head(reader) -> tuple[int, dict]:
    status_line = await reader.readline()
    if not status_line:
        raise HttpError("connection closed before a response")
    parts = status_line.decode("latin-1").split(" ", 2)
    status = int(parts[1])
    headers = {}
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        k, _, v = line.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()
    return status, headers


async def _body_chunks(reader, headers):
    """Yield raw body pieces as they arrive (chunked, content-length or until EOF)."""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size_line = await reader.readline()
            if not size_line:
                return
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                await reader.readline()
                return
            data = await reader.readexactly(size)
            await reader.readexactly(2)
            yield data
    elif "content-length" in headers:
        n = int(headers["content-length"])
        if n:
            yield await reader.readexactly(n)
    else:
        while True:
            data = await reader.read(65536)
            if not data:
                return
            yield data


async def request_json(host: str, port: int, method: str, path: str, payload=None, timeout: float = 30.0) -> tuple[int, object]:
    async def go():
        reader, writer = await _open(host, port, timeout)
        try:
            writer.write(_request_bytes(method, host, port, path, json.dumps(payload).encode() if payload is not None else None))
            await writer.drain()
            status, headers = await _read_head(reader)
            body = b"".join([c async for c in _body_chunks(reader, headers)])
        finally:
            writer.close()
        try:
            return status, json.loads(body) if body else None
        except ValueError:
            return status, body.decode("utf-8", "replace")

    return await asyncio.wait_for(go(), timeout)


async def stream_sse(host: str, port: int, path: str, payload: dict, on_event: Callable[[float, str], None], timeout: float) -> int:
    """POST and call on_event(arrival_time, data) for every SSE `data:` line."""

    async def go():
        reader, writer = await _open(host, port, timeout)
        try:
            writer.write(_request_bytes("POST", host, port, path, json.dumps(payload).encode(), "text/event-stream"))
            await writer.drain()
            status, headers = await _read_head(reader)
            buf = b""
            async for chunk in _body_chunks(reader, headers):
                now = time.perf_counter()
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    line = line.rstrip(b"\r")
                    if line.startswith(b"data:"):
                        on_event(now, line[5:].strip().decode("utf-8", "replace"))
                    elif status >= 400 and line.strip():
                        on_event(now, line.decode("utf-8", "replace"))
            if buf.strip().startswith(b"data:"):
                on_event(time.perf_counter(), buf.strip()[5:].strip().decode("utf-8", "replace"))
            return status
        finally:
            writer.close()

    return await asyncio.wait_for(go(), timeout)
