"""What the load generator sends: prompts, built against the server's own tokenizer.

Two constructions (serving.prompt):
- `tokens`: exactly PTOK token ids per request, a fresh nonce's tokens first
  (defeats prefix caching), then filler tokens.  Exact and the same on every engine
  that shares the tokenizer.
- `words`: like the users' h2h client: a nonce, then PTOK filler words, sent as
  text; how many tokens that is depends on the tokenizer (h2h's 128 words were about
  178 tokens on Qwen3.6), so each prompt is tokenized once to know its length.
Either way the totals (prompt_tok_total, gen_total) go into every summary row.

Every loop here is bounded: a tokenizer that ignores the nonce (the same ids for
every prompt) is an error that says so, not a spin."""

from __future__ import annotations

import asyncio
import uuid

from parity.errors import InfraError
from parity.loadgen.client import RequestSpec, Target, tokenize

FILLER = (
    "The paged engine schedules decode first, then admits prefill within a budget, "
    "so a long prompt never freezes the batch. "
)
FILLER_WORDS = FILLER.split()
MAX_ROUNDS = 8  # tokenize rounds for distinct nonces before giving up


def words(n: int, offset: int = 0) -> str:
    return " ".join(FILLER_WORDS[(offset + i) % len(FILLER_WORDS)] for i in range(n))


async def filler_ids(t: Target, ptok: int) -> list[int]:
    ids = await tokenize(t, FILLER * 4)
    if not ids:
        raise InfraError("/tokenize returned no tokens for the filler text")
    while len(ids) < ptok:
        ids = ids + ids
    return ids


async def nonce_ids(t: Target, n: int, width: int, parallel: int = 16) -> list[list[int]]:
    """n token-id nonces that differ in their first `width` ids."""
    sem = asyncio.Semaphore(parallel)
    out: list[list[int]] = []
    seen: set[tuple] = set()
    for _ in range(MAX_ROUNDS):

        async def one():
            async with sem:
                return await tokenize(t, f"{uuid.uuid4().hex} ")

        for ids in await asyncio.gather(*[one() for _ in range(n - len(out))]):
            key = tuple(ids[:width])
            if ids and key not in seen:  # a truncated nonce could collide on a tiny prompt
                seen.add(key)
                out.append(ids)
        if len(out) == n:
            return out
    raise InfraError(
        f"/tokenize gave {len(out)} distinct nonce prefixes of {n} after {MAX_ROUNDS} rounds "
        f"(first {width} ids of uuid4 text): does the server's tokenizer ignore the text?"
    )


async def token_prompts(t: Target, n: int, ptok: int, gen: int) -> list[RequestSpec]:
    """n prompts of exactly ptok token ids, each starting with its own nonce."""
    filler = await filler_ids(t, ptok)
    width = max(1, ptok // 2)
    return [RequestSpec((nt[:width] + filler)[:ptok], gen, prompt_tokens=ptok) for nt in await nonce_ids(t, n, width)]


async def word_prompts(t: Target, n: int, ptok: int, gen: int) -> list[RequestSpec]:
    """n prompts of a nonce + ptok filler words (h2h-like), each tokenized once for its length."""
    texts = [f"{uuid.uuid4().hex} {words(ptok, i)}" for i in range(n)]
    counts = await asyncio.gather(*[tokenize(t, x) for x in texts])
    return [RequestSpec(x, gen, prompt_tokens=len(c)) for x, c in zip(texts, counts)]


async def prompts(t: Target, mode: str, n: int, ptok: int, gen: int) -> list[RequestSpec]:
    if mode == "words":
        return await word_prompts(t, n, ptok, gen)
    return await token_prompts(t, n, ptok, gen)


async def shared_prefix_prompts(t: Target, groups: int, per_group: int, prefix: int, suffix: int, gen: int) -> list[RequestSpec]:
    """groups x per_group prompts: each group shares a prefix of `prefix` token ids (its own
    nonce first, so groups share nothing), then every request has a unique suffix."""
    filler = await filler_ids(t, prefix + suffix)
    heads = await nonce_ids(t, groups, max(1, min(prefix, 8)))
    tails = await nonce_ids(t, groups * per_group, max(1, min(suffix, 8)))
    out = []
    for g, head in enumerate(heads):
        pre = (head + filler)[:prefix]
        for k in range(per_group):
            tail = tails[g * per_group + k]
            out.append(RequestSpec(pre + (tail + filler)[:suffix], gen, prompt_tokens=prefix + suffix, tag=f"g{g}"))
    return out


def shortest_context_need(specs: list[RequestSpec]) -> int:
    """The most tokens any one request needs in its slot: prompt + generated."""
    return max((s.prompt_tokens or 0) + s.gen for s in specs) if specs else 0
