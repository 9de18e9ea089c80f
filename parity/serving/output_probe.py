"""The output-parity probe: each engine's greedy answers with top-k logprobs, over its own
/tokenize and completions API (compared by parity.metrics.output_parity)."""

from __future__ import annotations

from parity.loadgen.http import request_json
from parity.metrics.output_parity import parse_logprobs


async def probe(t, prompts: list[str], gen: int, top_k: int, extra: dict | None = None, timeout: float = 120.0) -> list[dict]:
    """Each prompt, tokenized by the engine itself (with its special tokens), sent as ids,
    greedy, with top-k logprobs; [{"prompt", "ids", "tokens", "top", "text"}]."""

    out = []
    for text in prompts:
        if t.tokenize == "content":
            status, body = await request_json(t.host, t.port, "POST", "/tokenize", {"content": text, "add_special": True}, timeout)
        else:
            status, body = await request_json(t.host, t.port, "POST", "/tokenize", {"model": t.model, "prompt": text, "add_special_tokens": True}, timeout)
        if status != 200 or not isinstance(body, dict):
            raise ValueError(f"/tokenize: HTTP {status} {str(body)[:200]}")
        ids = [x["id"] if isinstance(x, dict) else int(x) for x in body["tokens"]]
        payload = {"model": t.model, "prompt": ids, "max_tokens": gen, "temperature": 0, "ignore_eos": True, "logprobs": top_k, **(extra or {})}
        status, body = await request_json(t.host, t.port, "POST", t.path, payload, timeout)
        if status != 200 or not isinstance(body, dict):
            raise ValueError(f"{t.path}: HTTP {status} {str(body)[:300]}")
        tr = parse_logprobs(body)
        out.append({"prompt": text, "ids": ids, "tokens": tr.tokens, "top": [{str(k): v for k, v in d.items()} for d in tr.top], "text": tr.text})
    return out
