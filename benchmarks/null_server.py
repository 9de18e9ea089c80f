"""A null streaming server speaking vLLM's /v1/completions wire format, as
cheaply as possible, for measuring the load generator's own overhead.

Raw asyncio (Protocol, no framework).  Every stream's "id" is
"cmpl-<perf_counter_ns at the moment the first chunk is written>", so the
client can compute its TTFT overhead (first-chunk arrival minus server send;
CLOCK_MONOTONIC is shared by the processes of one machine).

--batch-ms N streams like a batching engine: every N ms one chunk to every running stream,
written in one loop turn (they reach the client together), instead of each stream's own gap.

usage: python benchmarks/null_server.py --port 18555 [--itl-ms 0] [--ttft-ms 0] [--batch-ms 0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

WORD = b"tok"
DONE = b"data: [DONE]\n\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


HEAD = (
    b"HTTP/1.1 200 OK\r\nserver: uvicorn\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)


class NullProtocol(asyncio.Protocol):
    def __init__(self, server: "NullServer"):
        self.server = server
        self.buf = b""
        self.transport = None
        self.can_write = asyncio.Event()
        self.can_write.set()

    def connection_made(self, transport):
        self.transport = transport

    def pause_writing(self):
        self.can_write.clear()

    def resume_writing(self):
        self.can_write.set()

    def connection_lost(self, exc):
        self.can_write.set()
        self.transport = None

    def data_received(self, data: bytes):
        self.buf += data
        while True:
            i = self.buf.find(b"\r\n\r\n")
            if i < 0:
                return
            head = self.buf[:i].decode("latin-1")
            n = 0
            for line in head.split("\r\n")[1:]:
                if line[:15].lower() == "content-length:":
                    n = int(line[15:])
            if len(self.buf) < i + 4 + n:
                return
            body, self.buf = self.buf[i + 4 : i + 4 + n], self.buf[i + 4 + n :]
            method, path, _ = head.split(" ", 2)
            self.server.dispatch(self, method, path, body)

    def respond(self, status: int, obj) -> None:
        body = json.dumps(obj).encode()
        self.transport.write(b"HTTP/1.1 %d OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (status, len(body), body))


class NullServer:
    def __init__(self, itl_s: float, ttft_s: float, batch_s: float = 0.0):
        self.itl_s, self.ttft_s, self.batch_s = itl_s, ttft_s, batch_s
        self.created = int(time.time())
        self._step: asyncio.Future | None = None

    async def next_step(self) -> None:
        """The next batch step, shared by every stream waiting for it."""
        if self._step is None or self._step.done():
            loop = asyncio.get_running_loop()
            self._step = loop.create_future()
            loop.call_later(self.batch_s, self._step.set_result, None)
        await self._step

    def dispatch(self, proto: NullProtocol, method: str, path: str, body: bytes) -> None:
        if path == "/health":
            proto.transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
        elif path == "/v1/models":
            proto.respond(200, {"object": "list", "data": [{"id": "null", "object": "model", "owned_by": "vllm"}]})
        elif path == "/tokenize":
            toks = [b + 3 for b in json.loads(body).get("prompt", "").encode()]
            proto.respond(200, {"count": len(toks), "max_model_len": 1 << 20, "tokens": toks, "token_strs": None})
        elif path == "/v1/completions":
            req = json.loads(body)
            asyncio.get_running_loop().create_task(self.stream(proto, req))
        else:
            proto.respond(404, {"detail": "Not Found"})

    async def stream(self, proto: NullProtocol, req: dict) -> None:
        n = int(req.get("max_tokens") or 16)
        prompt_tokens = len(req.get("prompt") or [])
        if self.ttft_s:
            await asyncio.sleep(self.ttft_s)
        t = proto.transport
        if t is None:
            return
        rid = b"cmpl-%d" % time.perf_counter_ns()
        continuous = bool((req.get("stream_options") or {}).get("continuous_usage_stats"))
        pre = b'data: {"id":"' + rid + b'","object":"text_completion","created":%d,"model":"null","choices":[{"index":0,"text":"' % self.created

        def chunk(i: int) -> bytes:  # token i (0-based)
            finish = b'"length"' if i == n - 1 else b"null"
            usage = b'{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}' % (prompt_tokens, prompt_tokens + i + 1, i + 1) if continuous else b"null"
            return _chunk(pre + WORD + b'","logprobs":null,"finish_reason":' + finish + b',"stop_reason":null}],"usage":' + usage + b"}\n\n")

        framed = None if continuous else chunk(0)
        t.write(HEAD + (chunk(0) if n == 1 or continuous else framed))
        for i in range(1, n):
            if self.batch_s:
                await self.next_step()
            elif self.itl_s:
                await asyncio.sleep(self.itl_s)
            else:
                await asyncio.sleep(0)
            if not proto.can_write.is_set():
                await proto.can_write.wait()
            if proto.transport is None:
                return
            t.write(framed if framed is not None and i < n - 1 else chunk(i))
        usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + n, "completion_tokens": n, "prompt_tokens_details": None}
        tail = b'data: {"id":"' + rid + b'","object":"text_completion","created":%d,"model":"null","choices":[],"usage":%s}\n\n' % (self.created, json.dumps(usage).encode())
        if proto.transport is not None:
            t.write(_chunk(tail) + _chunk(DONE) + b"0\r\n\r\n")


async def serve(port: int, itl_s: float, ttft_s: float, batch_s: float = 0.0) -> None:
    srv = NullServer(itl_s, ttft_s, batch_s)
    server = await asyncio.get_running_loop().create_server(lambda: NullProtocol(srv), "127.0.0.1", port, reuse_address=True, backlog=4096)
    print(f"null server on 127.0.0.1:{port}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=18555)
    ap.add_argument("--itl-ms", type=float, default=0.0, help="gap between chunks of one stream (0 = yield only)")
    ap.add_argument("--ttft-ms", type=float, default=0.0)
    ap.add_argument("--batch-ms", type=float, default=0.0, help="one chunk to every running stream every N ms (0: --itl-ms per stream)")
    a = ap.parse_args()
    try:
        asyncio.run(serve(a.port, a.itl_ms / 1000, a.ttft_ms / 1000, a.batch_ms / 1000))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
