"""Prompts as token ids: every hash id one byte-identical block of token ids, wherever it
appears, so equal hash ids are equal blocks whatever the server's tokenizer would have made of
text (peers that build prompts from text cannot promise it).

- A block is `block_size` ids drawn from the pool (ordinary token ids: the server's tokenizer
  on POOL_TEXT) by a generator seeded from (seed, salt, key): the same ids on every engine that
  shares the tokenizer, in every block of a run.  A request's prompt is its blocks in order,
  cut to its input length (the last, partial, block is the head of its block).
- A request the trace gives no hash ids is one private block keyed by its place in the
  selection: it shares nothing with any other prompt but by chance (two blocks drawn apart agree
  on their first id with odds 1 / pool size, on their first two 1 / pool size squared, ...).
  This is the nonce scheme of the other workloads (parity.loadgen.prompts: a prompt's own first
  ids), drawn from the same seeded generator: shared blocks and private ones are keys of one
  map ("h<id>" and "r<index>"), so they never collide by construction, only by that chance,
  and the expected hit rate (parity.replay.cache) counts whatever the ids sent really share.
- `salt` separates points: with a fresh salt per point, no point's prompt shares a block with
  another's, so a server that served the previous point holds nothing the next can reuse."""

from __future__ import annotations

import hashlib
import random

from parity.errors import InfraError
from parity.replay.record import TraceRequest

# ordinary text: its token ids are the alphabet prompts are drawn from (no special tokens)
POOL_TEXT = (
    "The paged engine schedules decode first, then admits prefill within a budget, so a long prompt never "
    "freezes the batch. Quick brown foxes jump over lazy dogs; 0123456789 ABCDEFGHIJKLMNOPQRSTUVWXYZ "
    "abcdefghijklmnopqrstuvwxyz while kernels stream weights, caches keep prefixes and schedulers balance queues."
)
MIN_POOL = 16


def pool_of(ids: list[int]) -> tuple[int, ...]:
    """The distinct token ids of the pool text, in a fixed order."""
    pool = tuple(sorted(set(int(i) for i in ids)))
    if len(pool) < MIN_POOL:
        raise InfraError(f"the server's tokenizer made {len(pool)} distinct ids of the pool text (at least "
                         f"{MIN_POOL} needed): prompts drawn from so few ids would share long runs by chance")
    return pool


class Blocks:
    """Token-id blocks by key, each drawn once (seeded) and reused."""

    def __init__(self, pool: tuple[int, ...], seed: int = 0, salt: int = 0):
        self.pool, self.seed, self.salt = pool, seed, salt
        self._made: dict[str, list[int]] = {}

    def block(self, key: str, size: int) -> list[int]:
        have = self._made.get(key)
        if have is None or len(have) < size:
            digest = hashlib.sha256(f"parity replay {self.seed} {self.salt} {key}".encode()).digest()
            have = random.Random(int.from_bytes(digest[:16], "big")).choices(self.pool, k=size)
            self._made[key] = have
        return have[:size]

    def prompt(self, req: TraceRequest, index: int) -> list[int]:
        """Exactly req.input_tokens ids: its hash ids' blocks in order, else one private block."""
        if req.hash_ids:
            size = req.block_size or 1
            ids: list[int] = []
            for h in req.hash_ids:
                ids += self.block(f"h{h}", size)
            return ids[: req.input_tokens]
        return list(self.block(f"r{index}", req.input_tokens))


def digest(prompts: list[list[int]]) -> str:
    """A short digest of the prompts (the same requests on every engine: the same digest)."""
    h = hashlib.sha256()
    for p in prompts:
        h.update(len(p).to_bytes(4, "big"))
        h.update(b"".join(int(t).to_bytes(4, "big") for t in p))
    return h.hexdigest()[:16]
