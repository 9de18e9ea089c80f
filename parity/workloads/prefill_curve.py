"""prefill-curve: time to first token and the engine's own prompt time against prompt length, at
N=1 and at N=n.  Each point is one (N, length): `rounds` rounds of N requests sent at once, one
round after another (more while its window is short: in_rounds), every prompt exactly `length`
token ids with its own nonce first (no prefix reuse).  The nonces are drawn from (seed, block), so
every engine of a block gets the same token ids where the engines share a tokenizer (each row's
prompt_digest says whether they did).

Per engine and N a straight line through the points (parity.workloads.prefill_fits): its slope in
ms per prompt token (prefill tok/s = 1000 / slope) and its intercept (the fixed overhead, ms), with
intervals; per block the same fit, and engine / reference of the per-block prefill tok/s and
intercept paired over the blocks.  The users' prefill_tps (prompt tokens / the longest TTFT, their
h2h definition) stays beside it, per round (users_prefill_tps), labelled as theirs."""

from __future__ import annotations

import asyncio
import statistics

from parity.errors import ConfigError, InfraError
from parity.loadgen.client import RequestSpec, one_request, request_body, tokenize
from parity.loadgen.http import Connection
from parity.loadgen.prompts import filler_ids
from parity.loadgen.record import RequestRecord
from parity.workloads import prefill_fits
from parity.workloads.base import Measured, Plot, WorkloadKind

NONCE_WIDTH = 8  # nonces differ in their first ids: a prompt shares at most this many with another
MIN_LENGTH = 2 * NONCE_WIDTH
MAX_DRAWS = 8  # rounds of nonce draws before giving up (a tokenizer that ignores the text)
MAX_ROUNDS = 200  # rounds a point may run to fill its window
LENGTHS = [128, 256, 512, 1024, 2048, 4096, 8192, 16384]  # WorkloadConfig.lengths' default, clipped to a context


# ------------------------------------------------------------------ the points


def grid(wl) -> list[tuple[int, str, int, int]]:
    """(key, label, N, length) of each point in run order: N=1 over every length, then N=n."""
    c = wl.cfg
    out = []
    for conc in [1] + ([c.n] if c.n > 1 else []):
        for length in c.lengths:
            out.append((len(out) + 1, f"N={conc} {length} tok", conc, length))
    return out


# ------------------------------------------------------------------ prompts and requests


async def seeded_nonces(t, count: int, seed: int, block: int, seen: set, tag: str = "") -> list[list[int]]:
    """count token-id nonces that differ in their first NONCE_WIDTH ids from each other and from
    `seen` (the arm's so far), drawn in a fixed order from (seed, block, tag): the same ids on every
    engine with the same tokenizer."""
    import hashlib

    out: list[list[int]] = []
    i = 0
    for _ in range(MAX_DRAWS):
        draws = [f"parity prefill-curve {seed} {block}{tag} {i + k}" for k in range(count - len(out))]
        texts = [hashlib.sha256(d.encode()).hexdigest()[:24] + " " for d in draws]
        i += len(texts)
        for ids in await asyncio.gather(*[tokenize(t, x) for x in texts]):
            key = tuple(ids[:NONCE_WIDTH])
            if len(ids) >= 2 and key not in seen:
                seen.add(key)
                out.append(ids)
        if len(out) == count:
            return out
    raise InfraError(f"/tokenize gave {len(out)} distinct nonces of {count} after {MAX_DRAWS} draws: "
                     "does the server's tokenizer ignore the text?")


class Prompts:
    """The arm's prompts: exactly `length` token ids each, a nonce then filler, no two sharing
    their first NONCE_WIDTH ids."""

    def __init__(self, t, seed: int, block: int):
        self.t, self.seed, self.block, self.seen, self.filler = t, seed, block, set(), []

    async def planned(self, sizes: list[tuple[int, int]]) -> list[list[list[int]]]:
        """For each (length, how many): that many prompts, drawn up front in the points' order."""
        self.filler = await filler_ids(self.t, max(length for length, _ in sizes))
        nonces = iter(await seeded_nonces(self.t, sum(k for _, k in sizes), self.seed, self.block, self.seen))
        return [[self.made(next(nonces), length) for _ in range(k)] for length, k in sizes]

    async def extra(self, key: int, rnd: int, k: int, length: int) -> list[list[int]]:
        """A round past the planned ones: drawn by (point, round), so engines that run it get the same ids."""
        nonces = await seeded_nonces(self.t, k, self.seed, self.block, self.seen, f" point {key} round {rnd}")
        return [self.made(n, length) for n in nonces]

    def made(self, nonce: list[int], length: int) -> list[int]:
        return (nonce[:NONCE_WIDTH] + self.filler)[:length]


def digest(prompts: list[list[int]]) -> str:
    import hashlib

    return hashlib.sha256(repr(prompts).encode()).hexdigest()[:16]


async def in_rounds(t, rounds: list[list[list[int]]], gen: int, timeout: float, status, more=None,
                    lead_s: float = 0.0) -> list[RequestRecord]:
    """Each round's prompts sent at once, each on its own kept-alive connection; the next round
    after every request of this one has ended.  Past the planned rounds, while the last round's
    first token came less than lead_s after the first send, more(i) gives round i (at most
    MAX_ROUNDS): the point's wall window then reaches what calibration asks of it at this gen."""
    width = len(rounds[0])
    conns = [Connection(t.host, t.port, min(timeout, 30.0)) for _ in range(width)]
    out: list[RequestRecord] = []

    def short() -> bool:
        firsts = [r.first for r in out[-width:] if r.first is not None]
        return more is not None and len(firsts) == width and max(firsts) - min(r.send for r in out[:width]) < lead_s

    try:
        i = 0
        while i < len(rounds) or (i < MAX_ROUNDS and short()):
            prompts = rounds[i] if i < len(rounds) else await more(i)
            status(f"round {i + 1}/{len(rounds)}" if i < len(rounds) else f"round {i + 1} (window {lead_s:g} s)")
            recs = [RequestRecord(sent_prompt_tokens=len(p), expected_tokens=gen) for p in prompts]
            bodies = [request_body(t, p, gen) for p in prompts]
            await asyncio.gather(*[one_request(c, t, b, r, timeout) for c, b, r in zip(conns, bodies, recs)])
            out += recs
            i += 1
    finally:
        for c in conns:
            c.close()
    return out


def histogram_mean_ms(before: dict | None, after: dict | None, base: str | None) -> float | None:
    """The mean (ms) of a /metrics histogram over the point: vLLM's prefill time per request."""
    if not base or before is None or after is None or f"{base}_count" not in after:
        return None
    n = after[f"{base}_count"] - before.get(f"{base}_count", 0.0)
    s = after.get(f"{base}_sum", 0.0) - before.get(f"{base}_sum", 0.0)
    return round(s / n * 1000, 4) if n > 0 else None


# ------------------------------------------------------------------ the kind


class PrefillCurve(WorkloadKind):
    name = "prefill-curve"
    what = ("TTFT and the engine's own prompt time against prompt length, at N=1 and at N=n (rounds of N requests "
            "at once); per engine a fitted line: prefill tok/s = 1000 / slope (ms per token) and the fixed overhead "
            "(intercept, ms), with intervals")
    positive = ("n", "rounds")
    metrics = ("engine_prompt_ms_mean", "engine_prompt_ms_p50", "engine_prompt_n_mean", "engine_prompt_tps",
               "cached_prompt_tokens", "prompt_tokens_mean")
    headline = ("ttft_mean_ms", "engine_prompt_ms_mean")
    windows = ("wall_s",)  # a point is its rounds, one after another: the span of all of them
    shown = ("ttft_mean_ms", "ttft_p50_ms", "ttft_p99_ms", "engine_prompt_ms_mean", "engine_prompt_ms_p50",
             "engine_prompt_n_mean", "engine_prompt_tps", "cached_prompt_tokens")
    params = ("lengths", "n", "rounds", "seed", "gen")
    plots = (Plot("TTFT and engine prompt time vs prompt length", "workload_prefill_curve.png", prefill_fits.curve_plot,
                  "rows"),)

    def check(self, w, label: str, key: str) -> None:
        ls = w.lengths
        ok = isinstance(ls, list) and all(isinstance(x, int) and x >= MIN_LENGTH for x in ls)
        if not ok or len(set(ls)) < 2 or len(set(ls)) != len(ls):
            why = f"must be a list of at least two distinct prompt lengths of {MIN_LENGTH} tokens or more"
            raise ConfigError(label, f"{key}.lengths", why)

    def sized(self, gpu: bool, slot: int, par: int, s) -> dict:
        gen = 16  # a first token is what it times; block 0's calibration lengthens it for the wall window
        fit = [x for x in LENGTHS if x + gen <= slot]
        out = {"n": max(1, min(8, par)), "rounds": 5, "gen": gen, "lengths": fit}
        if len(fit) < 2:  # a small context: a quarter, a half and all of it
            room = max(MIN_LENGTH, slot - gen)
            out["lengths"] = sorted({max(MIN_LENGTH, room // 4), max(MIN_LENGTH, room // 2), room})
        if out["lengths"] != LENGTHS:
            dropped = ", ".join(str(x) for x in LENGTHS if x not in out["lengths"])
            out["description"] = (f"built in, sized for a {slot}-token request context (the tightest engine's): of the "
                                  f"default lengths, {dropped} were left out (a request takes its prompt + gen {gen})")
        return out

    def points(self, wl) -> list[tuple[float, str]]:
        return [(key, label) for key, label, _, _ in grid(wl)]

    def concurrency(self, wl) -> int:
        return max(1, wl.cfg.n)

    def need(self, wl) -> int:
        return max(wl.cfg.lengths) + wl.gen

    def cap(self, limit: int, wl) -> tuple[int, str]:
        return limit - max(wl.cfg.lengths), f"less the longest prompt ({max(wl.cfg.lengths)} tokens)"

    def run(self, arm, wl):
        c, t = wl.cfg, arm.target
        pts = grid(wl)
        source = Prompts(t, c.seed, arm.rep)
        prompts = asyncio.run(source.planned([(length, conc * c.rounds) for _, _, conc, length in pts]))
        arm.fits([RequestSpec(ps[0], wl.gen, prompt_tokens=len(ps[0])) for ps in prompts], f"{arm.engine} {wl.name}")
        family = getattr(arm.la, "family", None)
        cal = getattr(arm.plan, "calibrate", None)  # the trial asks each window for min_window_s x its margin
        lead_s = arm.shape.min_window_s * (cal.margin if cal is not None else 1.0)
        for (key, label, conc, length), ps in zip(pts, prompts):
            rounds = [ps[i * conc : (i + 1) * conc] for i in range(c.rounds)]
            status = lambda m, label=label: arm.status(f"{wl.name} {label}: {m}")  # noqa: E731
            more = lambda i, key=key, conc=conc, length=length: source.extra(key, i, conc, length)  # noqa: E731
            before, _ = arm.scrape()
            recs = asyncio.run(in_rounds(t, rounds, wl.gen, arm.timeout, status, more, lead_s))
            after, text = arm.scrape()
            prefill = histogram_mean_ms(before, after, getattr(family, "prefill", None))  # vLLM's prefill clock
            extra = {"prompt_len": length, "concurrency": conc, "rounds": len(recs) // conc,
                     "prompt_digest": digest(ps), "server_prefill_ms_mean": prefill}  # digest: the planned rounds
            yield Measured(key, label, recs, before, after, text, extra=extra)

    def judge(self, row: dict, sample, cfg) -> list[str]:
        """The users' prefill_tps as they define it, per round (N requests at once), its mean over the
        rounds: the row's own prefill_tps counts every round's prompt tokens over one longest TTFT."""
        conc = row.get("concurrency") or 1
        recs = sample.records
        per = []
        for i in range(0, len(recs), conc):
            got = [r for r in recs[i : i + conc] if r.valid and r.first is not None]
            if got and len(got) == len(recs[i : i + conc]):
                per.append(sum(r.sent_prompt_tokens for r in got) / max(r.first - r.send for r in got))
        row["users_prefill_tps"] = round(statistics.fmean(per), 4) if per else None
        return []

    def summarize(self, rows: list[dict], reference: str | None, threshold_pct: float, confidence: float) -> dict:
        return {"prefill_curve": prefill_fits.summary(rows, reference, threshold_pct, confidence)}

    def console(self, summary: dict) -> list[str]:
        pc = summary.get("prefill_curve") or {}
        return [f"prefill curve, {line}" for line in (pc.get("lines") or []) + prefill_fits.paired_lines(pc)]

    def tables(self, summary: dict, fmt) -> list[dict]:
        return prefill_fits.tables(summary.get("prefill_curve") or {}, fmt)


KIND = PrefillCurve()
