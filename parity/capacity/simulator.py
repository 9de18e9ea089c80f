"""A small continuous-batching server, seeded, so that the capacity search's accuracy is a test
and not a claim (tests/unit/test_capacity_accuracy.py, benchmarks/capacity_accuracy.py).

The server runs steps.  In each step every running request past its prefill makes one token,
and queued prompts are prefilled FIFO up to `chunk_tokens` prompt tokens (chunked prefill); a
request's first token comes at the end of the step that finishes its prompt.  A step takes

    scale x (step_ms + per_seq_ms x requests in the step + per_prefill_token_ms x prompt tokens) x jitter

with `jitter` an independent lognormal factor per step (the scheduler's own noise).  `scale` is
the engine's lever (1.03: every step 3 % slower) times the probe's drift: a factor shared by
`group` consecutive probes of a block (the box's state while the engines of one level ran back
to back: what pairing cancels) times one of the probe's own.  At most `max_batch` requests run; the rest wait.

Closed loop (load = clients): each client sends its next request when its last one ends.  The
probe starts in steady state: each client's warm-up request is already decoding, with a random
number of its tokens left, so completions are spread from the first step (a server that was
already at this load).  After the measured requests, cool-down requests hold the load until the
last measured one ends (no measured request sees a draining server, so a probe's capacity does
not depend on its size).  Warm-up and cool-down requests are sent and counted, never measured.  In a closed loop the
schedule in steps depends on token counts only, never on the step times, so every engine of a
block runs the same schedule and only its step times differ.  Open loop (load = requests per
second): Poisson arrivals, the warm-up requests first, then the measured ones, then cool-down."""

from __future__ import annotations

import math
import zlib
from collections import deque
from dataclasses import dataclass, field

from parity.capacity.probe import CLOSED, OPEN, PromptSet, Requests


@dataclass(frozen=True)
class ServerModel:
    step_ms: float = 6.0  # a step's fixed cost (launch, sampling, scheduling)
    per_seq_ms: float = 0.35  # each request in the step (decode is memory-bound: weights read once, KV per request)
    per_prefill_token_ms: float = 0.04  # each prompt token prefilled in the step (25k tokens/s)
    chunk_tokens: int = 512  # prompt tokens prefilled per step at most
    max_batch: int = 256  # requests running at once
    step_jitter: float = 0.02  # sd of the per-step lognormal factor


@dataclass(frozen=True)
class Drift:
    shared: float = 0.03  # sd (log) of the factor every engine of a block shares at one load
    own: float = 0.01  # sd (log) of each probe's own factor


@dataclass(frozen=True)
class Workload:
    """Prompt lengths lognormal around `prompt_median` (clipped), output lengths uniform."""

    prompt_median: int = 384
    prompt_sigma: float = 0.7
    prompt_min: int = 32
    prompt_max: int = 4096
    gen_min: int = 32
    gen_max: int = 192

    def prompts(self, seed: int, block: int, measured: int, warmup: int) -> PromptSet:
        """Block `block`'s requests: the measured ones do not depend on how many warm-ups follow."""
        import numpy as np

        p, g = [], []
        for part, n in (("measured", measured), ("warmup", warmup)):
            rng = np.random.default_rng(key(seed, "prompts", block, part))
            drawn = np.round(self.prompt_median * np.exp(rng.normal(0.0, self.prompt_sigma, n)))
            p.append(np.clip(drawn, self.prompt_min, self.prompt_max).astype(np.int64))
            g.append(rng.integers(self.gen_min, self.gen_max + 1, n))
        return PromptSet(np.concatenate(p), np.concatenate(g), measured, seed=zlib.crc32(f"{seed}/{block}".encode()))


def key(*parts) -> list[int]:
    """A seed sequence for numpy from ints and strings (an engine's name, a load)."""
    return [zlib.crc32(str(p).encode()) for p in parts]


@dataclass
class Simulator:
    """A Probe: probe(engine, load, block, prompts) -> Requests.  `levers` multiplies an
    engine's step time (absent: 1.0)."""

    model: ServerModel = field(default_factory=ServerModel)
    drift: Drift = field(default_factory=Drift)
    levers: dict = field(default_factory=dict)
    seed: int = 0
    mode: str = CLOSED
    group: int = 2  # consecutive probes of a block that share the drift factor (the engines of one level)
    calls: dict = field(default_factory=dict, repr=False)  # block -> probes run so far

    def scale(self, engine: str, load: float, block: int) -> float:
        import numpy as np

        slot = self.calls.get(block, 0) // self.group
        self.calls[block] = self.calls.get(block, 0) + 1
        at = f"{load:.6g}"
        shared = np.random.default_rng(key(self.seed, "shared", block, slot)).normal(0.0, self.drift.shared)
        own = np.random.default_rng(key(self.seed, "own", block, slot, engine, at)).normal(0.0, self.drift.own)
        return self.levers.get(engine, 1.0) * math.exp(shared + own)

    def __call__(self, engine: str, load: float, block: int, prompts: PromptSet) -> Requests:
        import numpy as np

        rng = np.random.default_rng(key(self.seed, "steps", block, f"{load:.6g}", engine))
        # the warm-ups' state and the arrivals: the same for every engine (like the prompts)
        start = np.random.default_rng(key(self.seed, "start", block, f"{load:.6g}"))
        if self.mode == CLOSED:
            return run_closed(self.model, int(load), prompts, self.scale(engine, load, block), rng, start)
        if self.mode == OPEN:
            return run_open(self.model, float(load), prompts, self.scale(engine, load, block), rng, start)
        raise ValueError(f"mode {self.mode!r}: {CLOSED} or {OPEN}")


def run_closed(m: ServerModel, clients: int, ps: PromptSet, scale: float, rng, start) -> Requests:
    if clients < 1 or clients > ps.warmup:
        raise ValueError(f"closed loop at {clients} clients needs 1..{ps.warmup} warm-up requests")
    n = ps.measured
    # warm-up request j (prompt set index n + j) is decoding, with 1..its length tokens left
    left = [int(start.integers(1, int(ps.gen_tokens[n + j]) + 1)) for j in range(clients)]
    return simulate(m, ps, scale, rng, warm_left=left, rate=None)


def run_open(m: ServerModel, rate: float, ps: PromptSet, scale: float, rng, start) -> Requests:
    if rate <= 0 or ps.warmup < 1:
        raise ValueError("open loop needs a rate > 0 and at least one warm-up request")
    return simulate(m, ps, scale, rng, warm_left=None, rate=rate, arrivals=start)


def sending_order(n: int, warmup: int, closed: bool):
    """Prompt set indices in the order they are sent: (open loop: the warm-ups,) the measured
    ones, then cool-down requests (the warm-up prompts again, cycling) that hold the load until
    the last measured request ends, so that no measured request sees a draining server."""
    if not closed:
        yield from range(n, n + warmup)
    yield from range(n)
    j = 0
    while True:
        yield n + j % warmup
        j += 1


def simulate(m: ServerModel, ps: PromptSet, scale: float, rng, warm_left, rate, arrivals=None) -> Requests:
    """The step loop, until the last measured request ends.  Closed loop (warm_left: the
    decoding warm-ups' tokens left): a client sends its next request when its last one ends;
    open loop: Poisson arrivals at `rate` per second, drawn from `arrivals` (rng: the step jitter)."""
    import numpy as np

    n = ps.measured
    plen = ps.prompt_tokens.tolist()
    glen = ps.gen_tokens.tolist()
    a, b, c = m.step_ms * scale, m.per_seq_ms * scale, m.per_prefill_token_ms * scale
    chunk, cap = m.chunk_tokens, m.max_batch
    closed = rate is None
    order = sending_order(n, ps.warmup, closed)
    jitter = iter(())
    send = [0.0] * n
    first_step = [0] * n
    last_step = [0] * n
    done_at: dict[int, list[int]] = {}  # step -> requests whose last token it makes (-1: a decoding warm-up)
    queue: deque = deque()  # [request, prompt tokens left], admitted, in prefill order
    waiting: deque = deque()  # sent, not yet admitted (max_batch)
    times: list[float] = []  # end of each step, ms
    made: list[int] = []  # tokens each step made (every request's, warm-up and cool-down included)
    left = n  # measured requests not ended
    decoding = running = sent = 0
    next_arrival = 0.0
    if closed:
        for r in warm_left:
            done_at.setdefault(r - 1, []).append(-1)
        decoding = running = sent = len(warm_left)
    t, k, new_decoders = 0.0, 0, 0

    def send_one(at: float) -> None:
        nonlocal sent
        i = next(order)
        if i < n:
            send[i] = at
        waiting.append(i)
        sent += 1

    while left:
        if not closed:  # every arrival due by now is sent
            if running == 0 and not waiting and next_arrival > t:
                t = next_arrival  # idle until the next arrival
            while next_arrival <= t:
                send_one(next_arrival)
                next_arrival += float(arrivals.exponential(1000.0 / rate))
        while waiting and running < cap:
            queue.append([waiting.popleft(), 0])
            queue[-1][1] = plen[queue[-1][0]]
            running += 1
        budget, tokens, touched = chunk, 0, 0
        finished_prefill: list[int] = []
        while queue and budget > 0:
            entry = queue[0]
            take = min(budget, entry[1])
            entry[1] -= take
            budget -= take
            tokens += take
            touched += 1
            if entry[1] == 0:
                queue.popleft()
                finished_prefill.append(entry[0])
            else:
                break
        try:
            j = next(jitter)
        except StopIteration:
            jitter = iter(np.exp(rng.normal(0.0, m.step_jitter, 4096)).tolist() if m.step_jitter else [1.0] * 4096)
            j = next(jitter)
        decoding += new_decoders  # first token at the end of the last step: decoding from this one
        t += (a + b * (decoding + touched) + c * tokens) * j
        times.append(t)
        made.append(decoding + len(finished_prefill))
        new_decoders = freed = 0
        for i in finished_prefill:  # first token at the end of this step
            g = glen[i]
            if i < n:
                first_step[i] = k
                last_step[i] = k + g - 1
            if g > 1:
                done_at.setdefault(k + g - 1, []).append(i)
                new_decoders += 1
            else:
                running -= 1
                freed += 1
                left -= i < n
        for i in done_at.pop(k, ()):
            decoding -= 1
            running -= 1
            freed += 1
            left -= 0 <= i < n
        if closed:  # each client whose request ended sends its next one
            for _ in range(freed):
                send_one(t)
        k += 1
    return measure(ps, times, made, send, first_step, last_step, sent)


def measure(ps: PromptSet, times: list[float], made: list[int], send: list[float], first_step: list[int],
            last_step: list[int], sent: int) -> Requests:
    import numpy as np

    n = ps.measured
    T = np.asarray(times)
    dt = np.diff(T, prepend=0.0)
    fs, ls = np.asarray(first_step), np.asarray(last_step)
    s = np.asarray(send)
    ttft = T[fs] - s
    e2e = T[ls] - s
    g = ps.gen_tokens[:n]
    multi = g > 1
    tpot = (T[ls] - T[fs])[multi] / (g[multi] - 1)
    # per step, the measured requests that made a decode token in it: steps first+1 .. last
    w = np.zeros(len(T) + 1, dtype=np.int64)
    np.add.at(w, fs[multi] + 1, 1)
    np.add.at(w, ls[multi] + 1, -1)
    w = np.cumsum(w)[: len(T)]
    itl = np.repeat(dt, w)
    lo, hi = s.min(), T[ls].max()
    inside = (T > lo) & (T <= hi)  # the steps that ended within the measured window: their tokens, every request's
    tokens = int(np.asarray(made)[inside].sum())
    return Requests(ttft, itl, tpot, e2e, tokens, float(hi - lo) / 1000, sent, float(T[-1]) / 1000 if len(T) else 0.0)
