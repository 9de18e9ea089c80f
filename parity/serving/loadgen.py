"""Streaming load generator for OpenAI /v1/completions (llama-server and vLLM).

Prompts are exactly PTOK token ids: a fresh nonce's tokens first (defeats
prefix caching), then filler tokens, both tokenized by the server's own
/tokenize.  Requests go out with ignore_eos, max_tokens=GEN and
stream_options.include_usage; every text chunk's arrival is recorded, and a
request is valid only when usage.completion_tokens == GEN.

One asyncio process, `concurrency` workers, each on its own keep-alive
connection, pulling requests from a shared list (N requests at concurrency N
is the snapshot's "N concurrent requests")."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass
from typing import Callable

from parity.errors import InfraError
from parity.serving.metrics import RequestRecord
from parity.serving.http import Connection, HttpError, request_json

FILLER = (
    "The paged engine schedules decode first, then admits prefill within a budget, "
    "so a long prompt never freezes the batch. "
)


@dataclass
class Target:
    host: str
    port: int
    model: str  # served model name
    tokenize: str = "llama"  # "llama": {"content"} -> {"tokens"}; "vllm": {"model","prompt"} -> {"tokens"}
    path: str = "/v1/completions"


@dataclass
class Progress:
    """Live counters the caller may poll (the hot path only increments)."""

    requests: int = 0
    done: int = 0
    tokens: int = 0  # text chunks received so far
    started: float = 0.0

    def tps(self) -> float:
        dt = time.perf_counter() - self.started if self.started else 0
        return self.tokens / dt if dt > 0 else 0.0


async def tokenize(t: Target, text: str, timeout: float = 30) -> list[int]:
    if t.tokenize == "llama":
        payload = {"content": text, "add_special": False}
    else:
        payload = {"model": t.model, "prompt": text, "add_special_tokens": False}
    status, body = await request_json(t.host, t.port, "POST", "/tokenize", payload, timeout)
    if status != 200 or not isinstance(body, dict) or not isinstance(body.get("tokens"), list):
        raise InfraError(f"/tokenize on {t.host}:{t.port} failed: HTTP {status} {str(body)[:200]}")
    return [x["id"] if isinstance(x, dict) else int(x) for x in body["tokens"]]


async def build_prompts(t: Target, n: int, ptok: int, parallel: int = 16) -> list[list[int]]:
    """N prompts of exactly ptok token ids, each starting with its own nonce."""
    filler = await tokenize(t, FILLER * 4)
    if not filler:
        raise InfraError("/tokenize returned no tokens for the filler text")
    while len(filler) < ptok:
        filler = filler + filler
    sem = asyncio.Semaphore(parallel)
    prompts: list[list[int]] = []
    seen: set[tuple] = set()
    while len(prompts) < n:

        async def one():
            async with sem:
                return await tokenize(t, f"{uuid.uuid4().hex} ")

        for nt in await asyncio.gather(*[one() for _ in range(n - len(prompts))]):
            p = (nt[: max(1, ptok // 2)] + filler)[:ptok]
            key = tuple(p[: max(1, ptok // 2)])
            if key not in seen:  # a truncated nonce could collide on a tiny ptok
                seen.add(key)
                prompts.append(p)
    return prompts


def request_body(t: Target, prompt: list[int], gen: int, extra: dict | None = None) -> bytes:
    payload = {
        "model": t.model,
        "prompt": prompt,
        "max_tokens": gen,
        "temperature": 0,
        "stream": True,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
        **(extra or {}),
    }
    return json.dumps(payload, separators=(",", ":")).encode()


_decode = json.JSONDecoder().decode


class _Handler:
    """Per-request SSE event handler (kept small: it runs once per chunk)."""

    __slots__ = ("rec", "errors", "progress")

    def __init__(self, rec: RequestRecord, progress: Progress | None):
        self.rec, self.errors, self.progress = rec, [], progress

    def __call__(self, now: float, data: bytes) -> None:
        rec = self.rec
        if rec.first is not None and _plain_token_chunk(data):
            rec.arrivals.append(now)  # the hot path: a later token, no usage/error/timings to read
            if self.progress is not None:
                self.progress.tokens += 1
            return
        if data == b"[DONE]":
            return
        try:
            ev = _decode(data.decode())
        except ValueError:  # UnicodeDecodeError is a ValueError too
            self.errors.append(data[:200].decode("utf-8", "replace"))
            return
        if "error" in ev:
            self.errors.append(str(ev["error"])[:200])
            return
        for ch in ev.get("choices") or ():
            if ch.get("text"):
                if rec.first is None:
                    rec.first = now
                    rec.response_id = ev.get("id")
                rec.arrivals.append(now)
                if self.progress is not None:
                    self.progress.tokens += 1
        usage = ev.get("usage")
        if usage:
            rec.completion_tokens = usage.get("completion_tokens", 0)
            rec.prompt_tokens = usage.get("prompt_tokens", rec.prompt_tokens)
        if "timings" in ev:
            rec.server_timings = ev["timings"]


def _plain_token_chunk(data: bytes) -> bool:
    """True when a compact-JSON chunk (vLLM, llama-server) carries exactly one
    choice with non-empty text and nothing else to read: no usage object, no
    error, no timings.  Inside JSON strings quotes are escaped, so these byte
    patterns cannot come from the generated text.  Anything else is parsed."""
    i = data.find(b'"text":"')
    return (
        i >= 0
        and data[i + 8 : i + 9] != b'"'
        and data.find(b'"text":', i + 8) < 0
        and b'"usage":{' not in data
        and b'"error"' not in data
        and b'"timings"' not in data
    )


async def one_request(conn: Connection, t: Target, body: bytes, rec: RequestRecord, timeout: float, progress: Progress | None = None) -> RequestRecord:
    h = _Handler(rec, progress)
    rec.send = time.perf_counter()
    try:
        async with asyncio.timeout(timeout):
            status, raw = await conn.stream(t.path, body, h)
        if status != 200:
            rec.error = f"HTTP {status}: {raw[:300].decode('utf-8', 'replace')}"
    except TimeoutError:
        conn.close()
        rec.error = f"timed out after {timeout:g} s"
    except (OSError, HttpError, asyncio.IncompleteReadError, ValueError) as e:
        conn.close()
        rec.error = f"{type(e).__name__}: {e}"[:300]
    if rec.error is None and h.errors:
        rec.error = "; ".join(h.errors)[:300]
    if rec.error is None and rec.first is None:
        rec.error = "no generated text in the stream"
    return rec


async def run_requests(t: Target, prompts: list[list[int]], gen: int, concurrency: int, timeout: float, progress: Progress | None = None, extra: dict | None = None) -> list[RequestRecord]:
    """Send every prompt, at most `concurrency` in flight; records in prompt order."""
    bodies = [request_body(t, p, gen, extra) for p in prompts]
    records = [RequestRecord(prompt_tokens=len(p), sent_prompt_tokens=len(p), expected_tokens=gen) for p in prompts]
    progress = progress or Progress()
    progress.requests = len(prompts)
    progress.started = time.perf_counter()
    next_index = iter(range(len(prompts)))

    async def worker():
        conn = Connection(t.host, t.port, min(timeout, 30.0))
        try:
            for i in next_index:
                await one_request(conn, t, bodies[i], records[i], timeout, progress)
                progress.done += 1
        finally:
            conn.close()

    await asyncio.gather(*[worker() for _ in range(max(1, min(concurrency, len(prompts))))])
    return records


def drive(t: Target, n: int, ptok: int, gen: int, timeout: float, progress: Callable[[Progress], None] | None = None, concurrency: int | None = None, poll_s: float = 0.25) -> list[RequestRecord]:
    """Build N prompts, then send the N requests concurrently.  Blocking.
    progress(Progress) is called every poll_s while the batch runs."""

    async def main():
        prompts = await build_prompts(t, n, ptok)
        state = Progress()
        task = asyncio.ensure_future(run_requests(t, prompts, gen, concurrency or n, timeout, state))
        while progress is not None and not task.done():
            await asyncio.wait([task], timeout=poll_s)
            progress(state)
        return await task

    return asyncio.run(main())
