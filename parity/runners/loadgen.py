"""Streaming load generator for OpenAI /v1/completions (llama-server and vLLM).

Prompts are exactly PTOK token ids: a fresh nonce's tokens (defeats prefix
caching) followed by filler tokens, both tokenized by the server's own
/tokenize.  N requests go out at once with ignore_eos and max_tokens=GEN; every
token chunk's arrival is recorded; completion_tokens must equal GEN.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass
from typing import Callable

from parity.errors import InfraError
from parity.metrics import RequestRecord
from parity.runners.http import HttpError, request_json, stream_sse

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


async def tokenize(t: Target, text: str, timeout: float = 30) -> list[int]:
    payload = {"content": text, "add_special": False} if t.tokenize == "llama" else {"model": t.model, "prompt": text, "add_special_tokens": False}
    status, body = await request_json(t.host, t.port, "POST", "/tokenize", payload, timeout)
    if status != 200 or not isinstance(body, dict) or "tokens" not in body:
        raise InfraError(f"/tokenize on {t.host}:{t.port} failed: HTTP {status} {str(body)[:200]}")
    toks = body["tokens"]
    return [x["id"] if isinstance(x, dict) else int(x) for x in toks]


async def build_prompts(t: Target, n: int, ptok: int) -> list[list[int]]:
    filler = await tokenize(t, FILLER * 4)
    while len(filler) < ptok:
        filler = filler + filler
    nonces = await asyncio.gather(*[tokenize(t, f"req-{uuid.uuid4().hex[:12]}: ") for _ in range(n)])
    prompts = []
    for nt in nonces:
        nt = nt[: max(1, ptok // 2)]
        prompts.append((nt + filler)[:ptok])
    return prompts


async def one_request(t: Target, prompt: list[int], gen: int, timeout: float, on_token: Callable[[], None] | None = None) -> RequestRecord:
    rec = RequestRecord(send=0.0, arrivals=[], prompt_tokens=len(prompt), expected_tokens=gen)
    payload = {
        "model": t.model,
        "prompt": prompt,
        "max_tokens": gen,
        "temperature": 0,
        "stream": True,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
    }
    errors = []

    def on_event(now: float, data: str):
        if data == "[DONE]":
            return
        try:
            ev = json.loads(data)
        except ValueError:
            errors.append(data[:200])
            return
        if "error" in ev:
            errors.append(str(ev["error"])[:200])
            return
        for ch in ev.get("choices") or []:
            if ch.get("text"):
                if rec.first is None:
                    rec.first = now
                rec.arrivals.append(now)
                if on_token:
                    on_token()
        if ev.get("usage"):
            rec.completion_tokens = ev["usage"].get("completion_tokens", 0)
            rec.prompt_tokens = ev["usage"].get("prompt_tokens", rec.prompt_tokens)
        if ev.get("timings"):
            rec.server_timings = ev["timings"]

    rec.send = time.perf_counter()
    try:
        status = await stream_sse(t.host, t.port, "/v1/completions", payload, on_event, timeout)
        if status != 200:
            rec.error = f"HTTP {status}: {'; '.join(errors)[:200]}"
    except (OSError, HttpError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as e:
        rec.error = f"{type(e).__name__}: {e}"[:200]
    if rec.error is None and errors:
        rec.error = "; ".join(errors)[:200]
    return rec


async def run_batch(t: Target, prompts: list[list[int]], gen: int, timeout: float, on_token=None) -> list[RequestRecord]:
    return list(await asyncio.gather(*[one_request(t, p, gen, timeout, on_token) for p in prompts]))


def drive(t: Target, n: int, ptok: int, gen: int, timeout: float, progress: Callable[[int, int], None] | None = None) -> list[RequestRecord]:
    """Build N prompts, then send the N requests concurrently.  Blocking."""

    async def main():
        prompts = await build_prompts(t, n, ptok)
        count = [0]

        def on_token():
            count[0] += 1
            if progress and count[0] % 16 == 0:
                progress(count[0], n * gen)

        recs = await run_batch(t, prompts, gen, timeout, on_token)
        if progress:
            progress(count[0], n * gen)
        return recs

    return asyncio.run(main())
