"""multi-turn: conversations in lockstep: turn k of every conversation goes at once, its prompt
the conversation's history (earlier prompts + the responses' text, tokenized) plus a new user
chunk of turn_tokens; one point per turn index (its /metrics show the history the server reused)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from parity.loadgen.client import RequestSpec, one_request, request_body, tokenize
from parity.loadgen.http import Connection
from parity.loadgen.prompts import token_prompts
from parity.loadgen.record import RequestRecord
from parity.workloads.base import Measured, Plot, WorkloadKind
from parity.workloads.plots import axes, by_engine, save

HISTORY_MARGIN = 1.5  # responses are resent as text, tokenized again: a history may take more tokens than it had


def ttft_by_turn(medians: list[dict], path: Path, metric: str = "ttft_mean_ms") -> Path | None:
    lines = by_engine(medians, metric)
    if not lines:
        return None
    fig, ax = axes()
    for eng, pts in sorted(lines.items()):
        ax.plot([m["n"] for m in pts], [m[metric] for m in pts], marker="o", label=eng)
    turns = sorted({m["n"] for pts in lines.values() for m in pts})
    ax.set_xticks(turns)
    ax.set_xlabel("turn (the prompt resends every earlier turn)")
    ax.set_ylabel(f"{metric} (ms)")
    ax.set_title("time to first token by turn")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return save(fig, path)


async def batch(t, specs, timeout: float, keep_text: bool = False) -> list[tuple[RequestRecord, str | None]]:
    """Every spec at once, each on its own connection; (record, text when keep_text)."""

    async def one(spec):
        rec = RequestRecord(sent_prompt_tokens=spec.prompt_tokens or len(spec.prompt), expected_tokens=spec.gen)
        conn = Connection(t.host, t.port, min(timeout, 30.0))
        try:
            text = await one_request(conn, t, request_body(t, spec.prompt, spec.gen), rec, timeout, keep_text=keep_text)
        finally:
            conn.close()
        return rec, text

    return list(await asyncio.gather(*[one(s) for s in specs]))


class MultiTurn(WorkloadKind):
    name = "multi-turn"
    what = "conversations in lockstep; each turn resends the whole history (earlier prompts and responses) plus a new user chunk"
    positive = ("conversations", "turns", "turn_tokens")
    metrics = ("prompt_tokens_mean", "prefix_hit_rate", "prefix_hits", "prefix_queries", "prefix_hits_derived", "cached_prompt_tokens")
    headline = ("ttft_mean_ms", "prefill_tps", "prefix_hit_rate")
    shown = ("prompt_tokens_mean", "ttft_mean_ms", "ttft_p99_ms", "prefill_tps", "prefix_hit_rate", "prefix_hits_derived", "cached_prompt_tokens")
    params = ("conversations", "turns", "turn_tokens", "gen")
    plots = (Plot("TTFT by turn", "workload_ttft_by_turn.png", ttft_by_turn, "medians"),)

    def sized(self, gpu: bool, slot: int, par: int, s) -> dict:
        turns = 4 if gpu else 2  # the history is resent as text and tokenized again: half the context is margin
        gen = max(8, min(s.gen, int(slot / (HISTORY_MARGIN * turns)) - 8))
        return {"conversations": max(1, min(4 if gpu else 2, par)), "turns": turns, "gen": gen,
                "turn_tokens": max(8, min(64, slot // (2 * turns) - gen))}  # fmt: skip

    def points(self, wl) -> list[tuple[float, str]]:
        return [(k, f"turn {k}") for k in range(1, wl.cfg.turns + 1)]

    def concurrency(self, wl) -> int:
        return wl.cfg.conversations

    def need(self, wl) -> int:
        """A lower bound: responses are tokenized again as text, which may take more tokens."""
        return wl.cfg.turns * (wl.cfg.turn_tokens + wl.gen)

    def cap(self, limit: int, wl) -> tuple[int, str]:
        c = wl.cfg
        return int(limit / (HISTORY_MARGIN * c.turns)) - c.turn_tokens, f"over {c.turns} turns x {HISTORY_MARGIN:g} (a history resent as text), less {c.turn_tokens}-token chunks"

    def run(self, arm, wl):
        c, t = wl.cfg, arm.target
        chunks = asyncio.run(token_prompts(t, c.conversations * c.turns, c.turn_tokens, wl.gen))
        history: list[list[int] | None] = [[] for _ in range(c.conversations)]
        for k, label in self.points(wl):
            alive = [i for i, h in enumerate(history) if h is not None]
            specs = []
            for i in alive:
                prompt = history[i] + chunks[i * c.turns + k - 1].prompt
                specs.append(RequestSpec(prompt, wl.gen, prompt_tokens=len(prompt), tag=f"c{i}"))
            arm.fits(specs, f"{arm.engine} {wl.name} {label} (the history grows each turn)")
            arm.status(f"{wl.name} {label}: {len(specs)} conversations")
            before, _ = arm.scrape()
            done = asyncio.run(batch(t, specs, arm.timeout, keep_text=True))
            after, text = arm.scrape()
            for i, spec, (rec, reply) in zip(alive, specs, done):
                if rec.error is not None:
                    history[i] = None
                else:
                    history[i] = list(spec.prompt) + (asyncio.run(tokenize(t, reply)) if reply else [])
            problems = [f"{c.conversations - len(alive)} of {c.conversations} conversations ended before this turn (an earlier turn failed)"] if len(alive) < c.conversations else []
            yield Measured(k, label, [rec for rec, _ in done], before, after, text, problems=problems,
                           extra={"turn": k, "conversations": len(alive), "turn_tokens": c.turn_tokens})  # fmt: skip


KIND = MultiTurn()
