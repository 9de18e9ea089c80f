"""shared-prefix: groups x group_size requests, each group sharing prefix_tokens (its own nonce
first: groups share nothing), each request its own suffix.  With prime, one request per group
runs first (its prefix computed and, where the engine caches it, kept); then the measured
requests all go at once.  The server's /metrics around the measured requests give the
prefix-cache hit rate next to TTFT and prefill throughput."""

from __future__ import annotations

import asyncio
from pathlib import Path

from parity.loadgen import client as loadgen
from parity.loadgen.prompts import shared_prefix_prompts
from parity.metrics import validity
from parity.workloads.base import Measured, Plot, WorkloadKind
from parity.workloads.plots import axes, num, save


def prefix_hits(medians: list[dict], path: Path) -> Path | None:
    """Hit rate per engine (the server's counters, else reuse derived from computed prompt
    tokens over the prompt tokens), next to prefix_share (a perfect cache)."""
    bars = []
    for m in medians:
        rate = m.get("prefix_hit_rate")
        if not num(rate) and num(m.get("prefix_hits_derived")) and num(m.get("prompt_tok_total")) and m["prompt_tok_total"]:
            rate = m["prefix_hits_derived"] / m["prompt_tok_total"]
        if num(rate):
            bars.append((m["engine"], rate, m.get("prefix_share")))
    if not bars:
        return None
    fig, ax = axes(left=0.1)
    xs = list(range(len(bars)))
    ax.bar(xs, [b[1] for b in bars], width=0.6, label="prefix-cache hit rate (server)")
    ideal = [(x, b[2]) for x, b in zip(xs, bars) if num(b[2])]
    if ideal:
        ax.scatter([x for x, _ in ideal], [v for _, v in ideal], marker="_", s=900, color="black", label="prefix share (a perfect cache)")
    ax.set_xticks(xs)
    ax.set_xticklabels([b[0] for b in bars])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("share of prompt tokens")
    ax.set_title("prefix-cache hits on shared-prefix requests")
    ax.legend(fontsize="small")
    return save(fig, path)


class SharedPrefix(WorkloadKind):
    name = "shared-prefix"
    what = "groups of requests sharing a long prefix (one primer per group first), all measured requests in flight at once; the server's own /metrics give the prefix-cache hits"
    positive = ("groups", "group_size", "prefix_tokens", "suffix_tokens")
    metrics = ("prefix_hit_rate", "prefix_hits", "prefix_queries", "prefix_hits_derived", "cached_prompt_tokens", "prefix_share")
    headline = ("ttft_mean_ms", "prefill_tps", "prefix_hit_rate")
    shown = ("ttft_mean_ms", "ttft_p99_ms", "prefill_tps", "prefix_hit_rate", "prefix_share", "prefix_hits", "prefix_hits_derived", "cached_prompt_tokens")
    params = ("groups", "group_size", "prefix_tokens", "suffix_tokens", "prime", "gen")
    plots = (Plot("prefix-cache hit rate per engine", "workload_prefix_hits.png", prefix_hits, "medians"),)

    def sized(self, gpu: bool, slot: int, par: int, s) -> dict:
        groups, suffix = (4, 32) if gpu else (2, 16)
        prefix = max(16, min(512 if gpu else 128, slot // 4))
        return {"groups": groups, "group_size": max(1, min(8 if gpu else 2, par // groups)), "suffix_tokens": suffix,
                "prefix_tokens": prefix, "gen": max(8, min(s.gen, slot - prefix - suffix))}  # fmt: skip

    def points(self, wl) -> list[tuple[float, str]]:
        c = wl.cfg
        return [(c.groups * c.group_size, f"{c.groups}x{c.group_size} prefix {c.prefix_tokens} + suffix {c.suffix_tokens}")]

    def concurrency(self, wl) -> int:
        return wl.cfg.groups * wl.cfg.group_size

    def need(self, wl) -> int:
        return wl.cfg.prefix_tokens + wl.cfg.suffix_tokens + wl.gen

    def cap(self, limit: int, wl) -> tuple[int, str]:
        c = wl.cfg
        return limit - c.prefix_tokens - c.suffix_tokens, f"less the {c.prefix_tokens}-token prefix and {c.suffix_tokens}-token suffix"

    def run(self, arm, wl):
        c, t = wl.cfg, arm.target
        ((key, label),) = self.points(wl)
        per = c.group_size + (1 if c.prime else 0)
        specs = asyncio.run(shared_prefix_prompts(t, c.groups, per, c.prefix_tokens, c.suffix_tokens, wl.gen))
        arm.fits(specs, f"{arm.engine} {wl.name}")
        primers = [specs[g * per] for g in range(c.groups)] if c.prime else []
        measured = [sp for i, sp in enumerate(specs) if not (c.prime and i % per == 0)]
        problems, side = [], {}
        if primers:
            arm.status(f"{wl.name}: {len(primers)} primer(s), one per group")
            recs = loadgen.drive(t, primers, arm.timeout)
            side["primers"] = recs
            bad = [validity.reason(validity.check_request(r)) for r in recs if not r.valid]
            if bad:
                problems.append(f"{len(bad)}/{len(recs)} primer requests invalid (first: {bad[0]}): the groups' prefixes may not be cached")
        before, _ = arm.scrape()
        recs = loadgen.drive(t, measured, arm.timeout, arm.show(f"{wl.name} {label}"))
        after, text = arm.scrape()
        yield Measured(key, label, recs, before, after, text, prefix_tokens=c.prefix_tokens, problems=problems, side=side,
                       extra={"groups": c.groups, "group_size": c.group_size, "prefix_tokens": c.prefix_tokens, "suffix_tokens": c.suffix_tokens, "primed": c.prime})  # fmt: skip


KIND = SharedPrefix()
