"""A fake of vLLM's OpenAI-compatible server (vLLM cannot run here: no GPU).

Faithful to the documented wire format of `vllm serve` (uvicorn, HTTP/1.1
keep-alive, chunked SSE):
- GET /health -> 200, empty body (only once the "model" is loaded; before
  that the port is not even listening, like uvicorn starting after the engine)
- GET /v1/models -> {"object": "list", "data": [{"id": served name, "object": "model", "owned_by": "vllm", "root": model, "max_model_len": L, ...}]}
- POST /tokenize {"model", "prompt", "add_special_tokens"} -> {"count", "max_model_len", "tokens", "token_strs": null}
- POST /v1/completions (stream): one `data: {...}` event per token, without a usage key
  (with stream_options.continuous_usage_stats: the usage so far),
  the last token with finish_reason "length"; with stream_options.include_usage a
  final chunk with "choices": [] and usage; then `data: [DONE]`.  A prompt + max_tokens
  over --max-model-len is clamped silently (HTTP 200, fewer tokens, finish "length"),
  as vLLM 0.32 does; a prompt alone over it is a 400.  Errors are nested:
  {"error": {"message", "type", "param", "code"}}.
- GET /metrics -> Prometheus text (vllm:* counters).
Tokenizer: one token per UTF-8 byte (id = byte + 3), so counts are exact.

Test knobs (environment, never VLLM_*): FAKE_VLLM_STARTUP_S (delay before
listening), FAKE_VLLM_TTFT_MS, FAKE_VLLM_ITL_MS, FAKE_VLLM_SHORT (emit this
many tokens fewer than asked; with FAKE_VLLM_SHORT_EVERY=k only every k-th completion), FAKE_VLLM_CRASH (exit 1 during startup),
FAKE_VLLM_RECORD (write argv + VLLM_* env as JSON to this path), FAKE_VLLM_MERGE (k
tokens per chunk, as real vLLM does under load), FAKE_VLLM_EMPTY_EVERY (every m-th token's
chunk has empty text, like a byte-fallback token), FAKE_VLLM_CLAIM (usage claims this many
completion tokens whatever was streamed: a lying server), FAKE_VLLM_SAME_TOKENS (/tokenize
answers the same ids for every text), FAKE_VLLM_SEGV_AFTER (the process dies on SIGSEGV
at the completion after this many), FAKE_VLLM_SEGV_IDLE_AFTER (after this many completions it
dies on SIGSEGV at the next request of any kind, unanswered: a server that crashed between two
probes, as an H200 llama-server did after a 32-client probe).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
import uuid

# real vLLM runtime variables (a subset of vllm/envs.py); others draw vLLM's warning
KNOWN_VLLM_ENV = {
    "VLLM_LOGGING_LEVEL", "VLLM_CONFIGURE_LOGGING", "VLLM_USE_V1", "VLLM_ATTENTION_BACKEND", "VLLM_WORKER_MULTIPROC_METHOD",
    "VLLM_CACHE_ROOT", "VLLM_HOST_IP", "VLLM_PORT", "VLLM_USE_MODELSCOPE", "VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_API_KEY",
    "VLLM_CPU_OMP_THREADS_BIND",
}  # fmt: skip


def log(msg: str, level: str = "INFO") -> None:
    stamp = time.strftime("%m-%d %H:%M:%S")
    sys.stdout.write(f"{level} {stamp} [api_server.py] {msg}\n")
    sys.stdout.flush()


def tokenize(text: str) -> list[int]:
    return [b + 3 for b in text.encode("utf-8")]


WORDS = ["the", " model", " is", " fake", ",", " but", " its", " wire", " format", " is", " real", "."]


class FakeVllm:
    def __init__(self, model: str, served: str, port: int, max_model_len: int, host: str = "127.0.0.1"):
        self.model, self.served, self.port, self.host, self.max_model_len = model, served, port, host, max_model_len
        self.ttft = float(os.environ.get("FAKE_VLLM_TTFT_MS", "5")) / 1000
        self.itl = float(os.environ.get("FAKE_VLLM_ITL_MS", "2")) / 1000
        self.short = int(os.environ.get("FAKE_VLLM_SHORT", "0"))
        self.short_every = int(os.environ.get("FAKE_VLLM_SHORT_EVERY", "1"))
        self.served_completions = 0
        self.merge = max(1, int(os.environ.get("FAKE_VLLM_MERGE", "1")))
        self.empty_every = int(os.environ.get("FAKE_VLLM_EMPTY_EVERY", "0"))
        self.claim = os.environ.get("FAKE_VLLM_CLAIM")
        self.same_tokens = bool(os.environ.get("FAKE_VLLM_SAME_TOKENS"))
        self.segv_after = int(os.environ.get("FAKE_VLLM_SEGV_AFTER", "0"))
        self.segv_idle_after = int(os.environ.get("FAKE_VLLM_SEGV_IDLE_AFTER", "0"))
        self.counters = {"prompt_tokens_total": 0, "generation_tokens_total": 0, "request_success_total": 0}
        self.running = 0

    # ------------------------------------------------------------------ http plumbing
    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
                body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
                if self.segv_idle_after and self.served_completions >= self.segv_idle_after and self.running == 0:
                    os.kill(os.getpid(), signal.SIGSEGV)
                await self.route(method, path.split("?")[0], body, writer)
                if headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    async def send(self, writer, status: int, obj=None, ctype: str = "application/json", text: bytes | None = None) -> None:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}.get(status, "Error")
        body = text if text is not None else (b"" if obj is None else json.dumps(obj).encode())
        head = f"HTTP/1.1 {status} {reason}\r\ndate: {time.strftime('%a, %d %b %Y %H:%M:%S GMT', time.gmtime())}\r\nserver: uvicorn\r\ncontent-length: {len(body)}\r\ncontent-type: {ctype}\r\n\r\n"
        writer.write(head.encode() + body)
        await writer.drain()

    async def error(self, writer, status: int, message: str, typ: str) -> None:
        await self.send(writer, status, {"error": {"message": message, "type": typ, "param": None, "code": status}})

    # ------------------------------------------------------------------ routes
    async def route(self, method: str, path: str, body: bytes, writer) -> None:
        if path == "/health" and method == "GET":
            await self.send(writer, 200, None)
        elif path == "/v1/models" and method == "GET":
            card = {"id": self.served, "object": "model", "created": int(time.time()), "owned_by": "vllm", "root": self.model, "parent": None, "max_model_len": self.max_model_len,
                    "permission": [{"id": f"modelperm-{uuid.uuid4().hex}", "object": "model_permission", "created": int(time.time()), "allow_create_engine": False, "allow_sampling": True,
                                    "allow_logprobs": True, "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False, "organization": "*", "group": None, "is_blocking": False}]}  # fmt: skip
            await self.send(writer, 200, {"object": "list", "data": [card]})
        elif path == "/metrics" and method == "GET":
            lines = []
            for k, v in self.counters.items():
                lines += [f"# HELP vllm:{k} {k.replace('_', ' ')}", f"# TYPE vllm:{k} counter", f'vllm:{k}{{model_name="{self.served}"}} {float(v)}']
            lines += ["# HELP vllm:num_requests_running Number of requests in model execution batches.", "# TYPE vllm:num_requests_running gauge",
                      f'vllm:num_requests_running{{model_name="{self.served}"}} {float(self.running)}']  # fmt: skip
            await self.send(writer, 200, ctype="text/plain; version=0.0.4; charset=utf-8", text=("\n".join(lines) + "\n").encode())
        elif path == "/tokenize" and method == "POST":
            req = json.loads(body or b"{}")
            if req.get("model", self.served) != self.served:
                return await self.error(writer, 404, f"The model `{req.get('model')}` does not exist.", "NotFoundError")
            toks = tokenize("constant") if self.same_tokens else tokenize(req.get("prompt", ""))
            await self.send(writer, 200, {"count": len(toks), "max_model_len": self.max_model_len, "tokens": toks, "token_strs": None})
        elif path == "/v1/completions" and method == "POST":
            await self.completions(json.loads(body or b"{}"), writer)
        elif path in ("/health", "/v1/models", "/tokenize", "/v1/completions", "/metrics"):
            await self.send(writer, 405, {"detail": "Method Not Allowed"})
        else:
            await self.send(writer, 404, {"detail": "Not Found"})

    async def completions(self, req: dict, writer) -> None:
        if req.get("model") != self.served:
            return await self.error(writer, 404, f"The model `{req.get('model')}` does not exist.", "NotFoundError")
        prompt = req.get("prompt", "")
        ptoks = prompt if isinstance(prompt, list) and all(isinstance(x, int) for x in prompt) else tokenize(str(prompt))
        max_tokens = int(req.get("max_tokens") or 16)
        if len(ptoks) >= self.max_model_len:
            msg = f"This model's maximum context length is {self.max_model_len} tokens. However, your request has {len(ptoks)} input tokens. Please reduce the length of the input messages."
            return await self.error(writer, 400, msg, "BadRequestError")
        max_tokens = min(max_tokens, self.max_model_len - len(ptoks))  # silently clamped
        self.served_completions += 1
        if self.segv_after and self.served_completions > self.segv_after:
            os.kill(os.getpid(), signal.SIGSEGV)  # a crashing engine: no answer, no cleanup
        n_out = max(0, max_tokens - (self.short if self.served_completions % self.short_every == 0 else 0))
        rid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        claimed = int(self.claim) if self.claim else n_out
        usage = {"prompt_tokens": len(ptoks), "total_tokens": len(ptoks) + claimed, "completion_tokens": claimed, "prompt_tokens_details": None}
        self.counters["prompt_tokens_total"] += len(ptoks)
        self.counters["generation_tokens_total"] += n_out
        self.running += 1
        try:
            if not req.get("stream"):
                await asyncio.sleep(self.ttft + self.itl * n_out)
                text = "".join(WORDS[i % len(WORDS)] for i in range(n_out))
                await self.send(writer, 200, {"id": rid, "object": "text_completion", "created": created, "model": self.served,
                                              "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": "length", "stop_reason": None, "prompt_logprobs": None}],
                                              "usage": usage})  # fmt: skip
                return
            head = f"HTTP/1.1 200 OK\r\ndate: {time.strftime('%a, %d %b %Y %H:%M:%S GMT', time.gmtime())}\r\nserver: uvicorn\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n"
            writer.write(head.encode())
            include_usage = bool((req.get("stream_options") or {}).get("include_usage"))
            continuous = include_usage and bool((req.get("stream_options") or {}).get("continuous_usage_stats"))

            async def event(obj) -> None:
                data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
                writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                await writer.drain()

            await asyncio.sleep(self.ttft)
            done = 0
            while done < n_out:
                if done:
                    await asyncio.sleep(self.itl * self.merge)
                k = min(self.merge, n_out - done)
                text = "".join("" if self.empty_every and (done + j + 1) % self.empty_every == 0 else WORDS[(done + j) % len(WORDS)] for j in range(k))
                done += k
                chunk = {"id": rid, "object": "text_completion", "created": created, "model": self.served,
                         "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": "length" if done == n_out else None, "stop_reason": None}]}  # fmt: skip
                if continuous:  # real vLLM sends no usage key at all on token chunks otherwise
                    chunk["usage"] = {"prompt_tokens": len(ptoks), "total_tokens": len(ptoks) + done, "completion_tokens": done}
                await event(chunk)
            if include_usage:
                await event({"id": rid, "object": "text_completion", "created": created, "model": self.served, "choices": [], "usage": usage})
            await event(b"[DONE]")
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            self.counters["request_success_total"] += 1
        finally:
            self.running -= 1

    async def serve(self) -> None:
        server = await asyncio.start_server(self.handle, self.host, self.port, reuse_address=True)
        log(f"Starting vLLM API server 0 on http://{self.host}:{self.port}")
        log("Application startup complete.", "INFO")
        async with server:
            await server.serve_forever()


def main(model: str, served: str, port: int, max_model_len: int, host: str = "127.0.0.1") -> int:
    record = os.environ.get("FAKE_VLLM_RECORD")
    if record:
        with open(record, "w") as f:
            json.dump({"argv": sys.argv, "env": {k: v for k, v in os.environ.items() if k.startswith("VLLM_")}}, f)
    for k in sorted(os.environ):
        if k.startswith("VLLM_") and k not in KNOWN_VLLM_ENV:
            log(f"Unknown vLLM environment variable detected: {k}", "WARNING")
    log("vLLM API server version 0.0.0-fake")
    log(f"non-default args: {{'model': {model!r}, 'served_model_name': [{served!r}], 'port': {port}, 'max_model_len': {max_model_len}}}")
    if model.startswith(("/", "~", ".")) and not os.path.exists(os.path.expanduser(model)):
        log(f"Error: model path {model} does not exist", "ERROR")
        return 1
    if os.environ.get("FAKE_VLLM_CRASH"):
        log("RuntimeError: CUDA error: no kernel image is available for execution on the device", "ERROR")
        return 1
    time.sleep(float(os.environ.get("FAKE_VLLM_STARTUP_S", "0")))  # "loading weights, compiling graphs"

    def stop(signum, frame):
        log("Shutting down FastAPI HTTP server.")
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    asyncio.run(FakeVllm(model, served, port, max_model_len, host).serve())
    return 0
