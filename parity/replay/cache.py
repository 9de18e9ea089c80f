"""The prefix-cache hits a slice allows, two ways:

- the trace's own (`trace_hits`): a request's leading hash ids that an earlier request of the
  slice had, times the block size (its last block counted as long as it is): the published
  "block reuse at an infinite cache", by the trace's block granularity;
- the sent token ids' (`expected_hits`): for each request, the longest common prefix of its
  ids with the prompt of any request whose prompt was in the cache when this one was looked
  up, as a cache that keeps every prompt would find it, then as the engine reuses it: at least
  one token computed (a full hit recomputes the last token, as llama-server and vLLM do) and
  rounded down to the engine's cache block (1 for llama-server's token-level slot reuse,
  vLLM's block size for its hashed blocks).

A request's prompt is in the cache from `ready` (llama-server: the request ended and its slot
was freed; vLLM: its first token, the prefill's blocks cached as they are computed) and a
request looks the cache up at `start` (llama-server: its first token less the server's own
prompt time; else its send).  Ties: ready first."""

from __future__ import annotations

from typing import Sequence

from parity.replay.record import TraceRequest

CHUNK = 64  # tokens per trie edge


def trace_hits(requests: Sequence[TraceRequest]) -> list[int] | None:
    """Per request: the tokens of its leading hash ids an earlier request had (None: no hash ids)."""
    if not any(r.hash_ids for r in requests):
        return None
    seen: set[int] = set()
    out = []
    for r in requests:
        ids, size = r.hash_ids or (), r.block_size or 0
        k = 0
        while k < len(ids) and ids[k] in seen:
            k += 1
        out.append(min(k * size, r.input_tokens))
        seen.update(ids)
    return out


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class PromptTrie:
    """Every prompt inserted, by chunks of CHUNK ids; longest() is the longest common prefix
    of a prompt with any of them."""

    def __init__(self):
        self.root: dict = {}

    def insert(self, ids: Sequence[int]) -> None:
        node = self.root
        for i in range(0, len(ids), CHUNK):
            node = node.setdefault(tuple(ids[i : i + CHUNK]), {})

    def longest(self, ids: Sequence[int]) -> int:
        node, n = self.root, 0
        for i in range(0, len(ids), CHUNK):
            chunk = tuple(ids[i : i + CHUNK])
            child = node.get(chunk)
            if child is not None and len(chunk) == CHUNK:
                node, n = child, n + CHUNK
                continue
            return n + max((_common(chunk, key) for key in node), default=0)
        return n


def expected_hits(prompts: Sequence[Sequence[int]], start: Sequence[float], ready: Sequence[float | None],
                  block: int = 1) -> list[int]:  # fmt: skip
    """Per request: the prompt tokens a cache keeping every prompt would give it (see the module)."""
    events = [(t, 0, j) for j, t in enumerate(ready) if t is not None] + [(t, 1, i) for i, t in enumerate(start)]
    trie, out = PromptTrie(), [0] * len(prompts)
    for _, kind, k in sorted(events):
        if kind == 0:
            trie.insert(prompts[k])
        else:
            hit = min(trie.longest(prompts[k]), max(0, len(prompts[k]) - 1))
            out[k] = hit // block * block
    return out


def in_order(n: int) -> tuple[list[float], list[float]]:
    """(start, ready) of requests served one after another: every earlier prompt is cached."""
    return [float(i) for i in range(n)], [i + 0.5 for i in range(n)]


def rate(hits: Sequence[int], tokens: Sequence[int]) -> float | None:
    total = sum(tokens)
    return sum(hits) / total if total else None
