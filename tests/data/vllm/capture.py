"""Capture raw HTTP responses (status line, headers, chunked body: the bytes on the
socket) from a running server, for the parsers' tests.  Not part of parity: the tool
that made the files in tests/data/vllm/ and tests/data/llama_server/ (their READMEs
give each file's request).

    python tests/data/vllm/capture.py PORT METHOD PATH [JSON_BODY] > out.raw
"""

from __future__ import annotations

import json
import socket
import sys
import threading


def raw(port: int, method: str, path: str, body: dict | None = None, timeout: float = 600) -> bytes:
    data = json.dumps(body).encode() if body is not None else b""
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: */*\r\nConnection: close\r\n"
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(head.encode() + b"\r\n" + data)
        parts = []
        while chunk := s.recv(65536):
            parts.append(chunk)
    return b"".join(parts)


def concurrent(port: int, path: str, bodies: list[dict], timeout: float = 600) -> list[bytes]:
    """Send every body at once (one connection each); responses in body order."""
    out: list[bytes] = [b""] * len(bodies)

    def one(i):
        out[i] = raw(port, "POST", path, bodies[i], timeout)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def sse_events(response: bytes) -> list[dict | str]:
    """The data: events of a chunked SSE response (JSON decoded, [DONE] as a string)."""
    head, _, body = response.partition(b"\r\n\r\n")
    text = b""
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        n = int(size_line.split(b";")[0], 16)
        if n == 0:
            break
        text, body = text + rest[:n], rest[n + 2 :]
    events = []
    for block in text.decode().split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: "):
                payload = line[6:]
                events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


if __name__ == "__main__":
    port, method, path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    body = json.loads(sys.argv[4]) if len(sys.argv) > 4 else None
    sys.stdout.buffer.write(raw(port, method, path, body))
