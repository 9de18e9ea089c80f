"""Streaming load generator for OpenAI /v1/completions (llama-server and vLLM).

What to send (prompts: parity.loadgen.prompts) is separate from when to send it:
closed loop (`concurrency` workers, each on its own keep-alive connection,
pulling the next request as soon as its last one ends; N requests at
concurrency N is the snapshot's "N concurrent requests") or open loop (each
request due at its own time offset: parity.loadgen.arrivals; written at its due
time by the scheduling loop itself on a connection opened ahead, never held back
by the ones in flight).

Tokens are counted from the stream, not from the server's final claim: each
chunk adds the increase of the per-chunk counter the adapter asks for
(vLLM's usage with stream_options.continuous_usage_stats, llama-server's
timings.predicted_n with timings_per_token), or one token per chunk carrying
text where a server has no such counter.  A merged chunk's tokens share its
arrival time.  The server's final usage is checked against that count
(parity.metrics.validity)."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import deque
from dataclasses import dataclass, field
from functools import partial
from typing import Callable

from parity import interrupts
from parity.errors import InfraError
from parity.loadgen import gc_hold
from parity.loadgen.http import Connection, HttpError, request_json, stream_request
from parity.loadgen.record import RequestRecord

COUNTERS = {"usage": b'"completion_tokens":', "timings": b'"predicted_n":', "chunks": None}


@dataclass
class Target:
    host: str
    port: int
    model: str  # served model name
    tokenize: str = "content"  # /tokenize wire format: "content" ({content} -> {tokens}: llama-server), "prompt" ({model, prompt} -> {tokens}: vLLM)
    path: str = "/v1/completions"
    count: str = "chunks"  # how the stream tells tokens per chunk: usage | timings | chunks (see COUNTERS)
    extra: dict = field(default_factory=dict)  # request fields the adapter adds (e.g. timings_per_token)


@dataclass
class RequestSpec:
    prompt: list[int] | str
    gen: int
    at: float | None = None  # open loop: seconds after the start when it is due
    prompt_tokens: int | None = None  # known length (token prompts, or text tokenized beforehand)
    tag: str = ""  # which group/turn/role it belongs to (workloads)


@dataclass
class Progress:
    """Live counters the caller may poll (the hot path only increments)."""

    requests: int = 0
    done: int = 0
    tokens: int = 0
    started: float = 0.0

    def tps(self) -> float:
        dt = time.perf_counter() - self.started if self.started else 0
        return self.tokens / dt if dt > 0 else 0.0


async def tokenize(t: Target, text: str, timeout: float = 30) -> list[int]:
    if t.tokenize == "content":
        payload = {"content": text, "add_special": False}
    else:
        payload = {"model": t.model, "prompt": text, "add_special_tokens": False}
    status, body = await request_json(t.host, t.port, "POST", "/tokenize", payload, timeout)
    if status != 200 or not isinstance(body, dict) or not isinstance(body.get("tokens"), list):
        raise InfraError(f"/tokenize on {t.host}:{t.port} failed: HTTP {status} {str(body)[:200]}")
    return [x["id"] if isinstance(x, dict) else int(x) for x in body["tokens"]]


def request_body(t: Target, prompt, gen: int, extra: dict | None = None) -> bytes:
    payload = {
        "model": t.model,
        "prompt": prompt,
        "max_tokens": gen,
        "temperature": 0,
        "stream": True,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
        **t.extra,
        **(extra or {}),
    }
    return json.dumps(payload, separators=(",", ":")).encode()


_decode = json.JSONDecoder().decode


def _int_after(data: bytes, key: bytes) -> int | None:
    i = data.rfind(key)
    if i < 0:
        return None
    i += len(key)
    j = i
    while j < len(data) and data[j : j + 1] == b" ":
        j += 1
    k = j
    while k < len(data) and 48 <= data[k] <= 57:
        k += 1
    return int(data[j:k]) if k > j else None


def _has_text(data: bytes) -> bool:
    i = data.find(b'"text":')
    if i < 0:
        return False
    i += 7
    if data[i : i + 1] == b" ":
        i += 1
    return data[i : i + 1] == b'"' and data[i + 1 : i + 2] != b'"'


def _finished(data: bytes) -> bool:
    """A chunk with a finish_reason that is not null, or the usage-only chunk (no choices)."""
    if b'"finish_reason"' in data and b'"finish_reason":null' not in data and b'"finish_reason": null' not in data:
        return True
    return b'"choices":[]' in data or b'"choices": []' in data


class _Handler:
    """Per-request SSE event handler (it runs once per chunk: kept lean).  Inside JSON
    strings quotes are escaped, so the byte patterns looked for cannot come from the
    generated text."""

    __slots__ = ("rec", "errors", "progress", "key", "count", "text")

    def __init__(self, rec: RequestRecord, progress: Progress | None, count: str, keep_text: bool = False):
        self.rec, self.errors, self.progress = rec, [], progress
        self.key = COUNTERS[count]
        self.count = 0  # the stream's own counter so far
        self.text: list[str] | None = [] if keep_text else None

    def __call__(self, now: float, data: bytes) -> None:
        if data == b"[DONE]":
            return
        if b'"error"' in data or self.text is not None:
            return self._slow(now, data)
        n = 1 if _has_text(data) else 0
        summary_only = b'"choices":[]' in data or b'"choices": []' in data  # the final usage: a claim, not tokens
        if self.key is not None and not summary_only:
            c = _int_after(data, self.key)
            if c is not None:
                n, self.count = c - self.count, max(c, self.count)
        if n > 0:
            self._tokens(now, n)
        elif n < 0:
            self.errors.append(f"the stream's token counter went backwards ({self.count} -> {self.count + n})")
        if _finished(data):
            self._final(data)

    def _tokens(self, now: float, n: int) -> None:
        rec = self.rec
        if rec.first is None:
            rec.first = now
        rec.token_times.extend([now] * n) if n > 1 else rec.token_times.append(now)
        rec.tokens += n
        rec.chunks += 1
        if self.progress is not None:
            self.progress.tokens += n

    def _final(self, data: bytes) -> None:
        try:
            ev = _decode(data.decode())
        except ValueError:  # UnicodeDecodeError is a ValueError too
            self.errors.append(data[:200].decode("utf-8", "replace"))
            return
        rec = self.rec
        rec.response_id = rec.response_id or ev.get("id")
        for ch in ev.get("choices") or ():
            if ch.get("finish_reason"):
                rec.finish_reason = ch["finish_reason"]
        usage = ev.get("usage")
        if usage:
            rec.usage_tokens = usage.get("completion_tokens")
            rec.prompt_tokens = usage.get("prompt_tokens", rec.prompt_tokens)
            details = usage.get("prompt_tokens_details")
            if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
                rec.cached_tokens = details["cached_tokens"]
        if "timings" in ev:
            rec.server_timings = ev["timings"]
            if rec.cached_tokens is None and isinstance(ev["timings"].get("cache_n"), int):
                rec.cached_tokens = ev["timings"]["cache_n"]

    def _slow(self, now: float, data: bytes) -> None:
        """Every field read from parsed JSON: errors, and streams whose text is kept."""
        try:
            ev = _decode(data.decode())
        except ValueError:
            self.errors.append(data[:200].decode("utf-8", "replace"))
            return
        if not isinstance(ev, dict):
            self.errors.append(str(ev)[:200])
            return
        if "error" in ev:
            err = ev["error"]
            self.errors.append(str(err.get("message", err) if isinstance(err, dict) else err)[:200])
            return
        texts = [ch.get("text") or "" for ch in ev.get("choices") or ()]
        n = 1 if any(texts) else 0
        if self.key is not None and ev.get("choices"):
            c = ((ev.get("usage") or {}).get("completion_tokens") if self.key == COUNTERS["usage"] else (ev.get("timings") or {}).get("predicted_n"))
            if isinstance(c, int):
                n, self.count = c - self.count, max(c, self.count)
        if n > 0:
            self._tokens(now, n)
        if self.text is not None:
            self.text.append("".join(texts))
        self._final(data)


async def one_request(conn: Connection, t: Target, body: bytes, rec: RequestRecord, timeout: float, progress: Progress | None = None, keep_text: bool = False) -> str | None:
    """Send one streamed request on conn, filling rec; the generated text when keep_text."""
    h = _Handler(rec, progress, t.count, keep_text)
    rec.send = time.perf_counter()
    await _read(conn, rec, h, timeout, conn.stream(t.path, body, h))
    return "".join(h.text) if h.text is not None else None


async def _read(conn: Connection, rec: RequestRecord, h: _Handler, timeout: float, exchange) -> None:
    """Await a request's exchange (conn.stream), filling rec with its outcome."""
    try:
        async with asyncio.timeout(timeout):
            status, raw = await exchange
        if status != 200:
            rec.error = f"HTTP {status}: {error_message(raw)}"
        rec.first_byte = conn.first_byte
        rec.connect_ms = None if conn.connect_s is None else round(conn.connect_s * 1000, 4)
    except TimeoutError:
        conn.close()
        rec.error = f"timed out after {timeout:g} s"
    except (OSError, HttpError, asyncio.IncompleteReadError, ValueError) as e:
        conn.close()
        rec.error = f"{type(e).__name__}: {e}"[:300]
    if rec.error is None and h.errors:
        rec.error = "; ".join(h.errors)[:300]
    if rec.error is None and rec.first is None:
        rec.error = "no generated token in the stream"


def error_message(raw: bytes) -> str:
    """The message of an error body in either shape: vLLM's {"error": {"message": ...}},
    the older {"object": "error", "message": ...}, llama-server's {"error": {"code", "message", "type"}}."""
    text = raw[:2000].decode("utf-8", "replace")
    try:
        body = json.loads(text)
    except ValueError:
        return text[:300]
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            kind = err.get("type") or err.get("code")
            return f"{err['message']}" + (f" ({kind})" if kind else "")
    return text[:300]


def _record(spec: RequestSpec) -> RequestRecord:
    n = spec.prompt_tokens if spec.prompt_tokens is not None else (len(spec.prompt) if isinstance(spec.prompt, list) else 0)
    return RequestRecord(sent_prompt_tokens=n, expected_tokens=spec.gen)


async def run_requests(t: Target, specs: list[RequestSpec], concurrency: int, timeout: float, progress: Progress | None = None) -> list[RequestRecord]:
    """Closed loop: every spec sent, at most `concurrency` in flight; records in spec order."""
    bodies = [request_body(t, s.prompt, s.gen) for s in specs]
    records = [_record(s) for s in specs]
    progress = progress or Progress()
    progress.requests = len(specs)
    progress.started = time.perf_counter()
    next_index = iter(range(len(specs)))

    async def worker():
        conn = Connection(t.host, t.port, min(timeout, 30.0))
        try:
            for i in next_index:
                await one_request(conn, t, bodies[i], records[i], timeout, progress)
                progress.done += 1
        finally:
            conn.close()

    await asyncio.gather(*[worker() for _ in range(max(1, min(concurrency, len(specs))))])
    return records


SPIN_S = 0.002  # the last stretch before a due time is spun (sleep(0)), not slept: epoll rounds timeouts to 1 ms
ARM_S = 0.02  # a request is armed (_Armed) this long before its due time: a timer waits behind the reads of its
# loop iteration (256 streams of a batching server: their reads spanned 2.5 ms at p99 of iterations, 9 ms at most)
LEAD_S = 0.05  # a request's connection is ready beside those of the others due within LEAD_S after it
# ... opened up to this long before its due time (beside a suite, a send at 2 req/s waited 218 ms for a
# connection opened 50 ms ahead)
OPEN_AHEAD_S = 1.0
START_LEAD_S = 0.25  # the schedule starts this long after its first connections are open: a point's first
# request was written 180 ms late beside a suite while the others were on time (a thread starting with the point)
STALE_S = 4.0  # an idle connection older than this is not written on: servers close them at 5 s (llama-server, uvicorn)


class _Armed:
    """The open loop's next sends, each made ready (a slot, a connection) just before its due time, written
    in schedule order at that time by whichever comes first: a task spinning while any is armed (the loop
    otherwise idle), or a read on any of the loop's connections (http._Protocol.buffer_updated calls fire()
    once `at` has passed).  The spin alone came late beside a busy loop: asyncio runs every callback ready
    in an iteration before the spinning task's next turn, and with 256 streams of a batching server (a
    chunk to each every 20 ms) one iteration's reads took 2.5 ms at p99.  benchmarks/loadgen_overhead.py
    --open-loop 50 --open-requests 500 --open-gen 256 --open-batch-ms 20 read send p99 3.3-4.7 ms with the
    spin alone, 1.4-1.8 ms with the reads writing (what is left: the server's process on the client's core;
    server and client on a core each, 1.6-1.9 -> 0.2-0.3 ms)."""

    def __init__(self):
        self.at = math.inf  # the first armed send's due time (perf_counter)
        self.queue: deque[tuple[float, Callable[[], None]]] = deque()  # (due, write) in schedule order
        self.spinner: asyncio.Task | None = None

    def arm(self, due: float, write: Callable[[], None]) -> None:
        self.queue.append((due, write))
        self.at = self.queue[0][0]
        if self.spinner is None or self.spinner.done():
            self.spinner = asyncio.ensure_future(self._spin())

    def fire(self) -> None:
        q, clock = self.queue, time.perf_counter
        while q and q[0][0] <= clock():
            q.popleft()[1]()  # taken off first: written once, whatever the write does
        self.at = q[0][0] if q else math.inf

    async def _spin(self) -> None:
        while self.queue:
            wait = self.at - SPIN_S - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            else:
                self.fire()
                await asyncio.sleep(0)

    def close(self) -> None:
        self.queue.clear()
        self.at = math.inf
        if self.spinner is not None:
            self.spinner.cancel()


class _Ready:
    """Connections opened ahead of the open loop's due times, so that a request is written at its due
    time with no TCP connect before it (0.2-8 ms on a loaded 2-core box).  Each carries one request:
    llama-server closes a connection right after a streamed response although it answered keep-alive,
    and on a loaded box its close can come tens of ms late, so a connection back from a response may
    be closing as the next request is written on it.  The newest is taken first (the least likely to
    meet the server's keep-alive timeout)."""

    def __init__(self, t: Target, connect_timeout: float, due: _Armed | None = None):
        self.t, self.connect_timeout, self.due = t, connect_timeout, due
        self.idle: list[tuple[Connection, float]] = []  # (connection, opened at)
        self.opening = 0  # connections being opened
        self.tasks: set[asyncio.Task] = set()
        self._landed: asyncio.Future | None = None  # set when an opening ends (next())

    def _fresh(self) -> list[tuple[Connection, float]]:
        now = time.perf_counter()
        keep = []
        for c, at in self.idle:
            if c.is_open and now - at < STALE_S:
                keep.append((c, at))
            else:
                c.close()
        self.idle = keep
        return keep

    def take(self) -> Connection | None:
        fresh = self._fresh()
        return fresh.pop()[0] if fresh else None

    async def next(self) -> Connection | None:
        """A ready one, else the next of those being opened (a loop that fell behind its schedule has not let
        them finish: waiting for one is sooner than a connect of its own); None when none is left."""
        conn = self.take()
        while conn is None and self.opening:
            self._landed = asyncio.get_running_loop().create_future()
            await self._landed
            conn = self.take()
        return conn

    async def _open(self) -> None:
        conn = Connection(self.t.host, self.t.port, self.connect_timeout, self.due)
        try:
            await conn.open()
            self.idle.append((conn, time.perf_counter()))
        except (OSError, TimeoutError):
            pass  # the request that finds none connects itself, and says why it failed
        finally:
            self.opening -= 1  # here, not in a done callback: that runs a loop turn later
            if self._landed is not None and not self._landed.done():
                self._landed.set_result(None)

    def top_up(self, want: int) -> list[asyncio.Task]:
        """Start opening connections until `want` are ready or opening."""
        new = [asyncio.ensure_future(self._open()) for _ in range(want - len(self._fresh()) - self.opening)]
        self.opening += len(new)
        self.tasks.update(new)
        for task in new:
            task.add_done_callback(self.tasks.discard)
        return new

    def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        for c, _ in self.idle:
            c.close()
        self.idle = []


def due_within(times: list[float], lead: float) -> list[int]:
    """For each sorted due time, how many due times fall in [it, it + lead]."""
    out, j = [], 0
    for i, at in enumerate(times):
        j = max(j, i)
        while j < len(times) and times[j] <= at + lead:
            j += 1
        out.append(j - i)
    return out


async def run_open_loop(t: Target, specs: list[RequestSpec], timeout: float, progress: Progress | None = None, max_inflight: int = 4096) -> list[RequestRecord]:
    """Open loop: each spec is written at start + spec.at whatever is in flight (up to max_inflight
    connections), from this loop itself on a connection opened ahead (_Ready), at its due time (_Armed); a
    task reads each response.  rec.scheduled keeps the due time and rec.send the write (a connect the
    request had to wait for comes before it), so rec.send - rec.scheduled is how late the load generator sent."""
    order = sorted(range(len(specs)), key=lambda i: specs[i].at or 0.0)
    dues = [specs[i].at or 0.0 for i in order]
    want = [min(k, max_inflight) for k in due_within(dues, LEAD_S)]
    data = [stream_request(t.host, t.port, t.path, request_body(t, s.prompt, s.gen)) for s in specs]
    records = [_record(s) for s in specs]
    progress = progress or Progress()
    progress.requests = len(specs)
    armed = _Armed()
    ready = _Ready(t, min(timeout, 30.0), armed)
    slots = asyncio.Semaphore(max_inflight)
    tasks = []

    async def read(i: int, conn: Connection, h: _Handler, begun) -> None:
        rec = records[i]
        try:
            await _read(conn, rec, h, timeout, conn.send_stream(data[i], h, begun))
        finally:
            rec.send = conn.sent_at or rec.send  # the write (a keep-alive race wrote it again, later)
            progress.done += 1
            conn.close()
            slots.release()

    def write(i: int, conn: Connection | None, h: _Handler, due: float) -> None:
        rec = records[i]
        rec.scheduled = due
        if conn is not None and not conn.is_open:  # closed since it was taken
            conn = ready.take()
        if conn is None:  # none ready: the task connects, then writes (late by the connect)
            conn, begun = Connection(t.host, t.port, min(timeout, 30.0), armed), None
            rec.send = clock()
        else:
            begun = conn.begin(data[i], h)
            rec.send = conn.sent_at
        tasks.append(asyncio.ensure_future(read(i, conn, h, begun)))

    clock = time.perf_counter
    if want:
        await asyncio.gather(*ready.top_up(want[0]))
    start = clock() + START_LEAD_S
    progress.started = clock()
    try:
        for k, i in enumerate(order):
            due = start + dues[k]
            if due - OPEN_AHEAD_S > clock():
                await asyncio.sleep(due - OPEN_AHEAD_S - clock())
            ready.top_up(want[k])
            delay = due - clock() - ARM_S
            if delay > 0:
                await asyncio.sleep(delay)
            await slots.acquire()
            conn = await ready.next()  # before the due time: the write is all that is left at it
            armed.arm(due, partial(write, i, conn, _Handler(records[i], progress, t.count), due))
        if armed.spinner is not None:
            await armed.spinner  # it ends once the last armed send is written
        await asyncio.gather(*tasks)
    finally:
        armed.close()
        for task in tasks:
            task.cancel()
        ready.close()
    return records


def drive(t: Target, specs: list[RequestSpec], timeout: float, progress: Callable[[Progress], None] | None = None,
          concurrency: int | None = None, open_loop: bool = False, poll_s: float = 0.25) -> list[RequestRecord]:  # fmt: skip
    """Send the specs (closed loop at `concurrency`, default all at once; or open loop at their
    `at` times).  Blocking; progress(Progress) is called every poll_s while it runs."""

    async def main():
        state = Progress()
        if open_loop:
            coro = run_open_loop(t, specs, timeout, state)
        else:
            coro = run_requests(t, specs, concurrency or len(specs), timeout, state)
        task = asyncio.ensure_future(coro)
        while not task.done():
            await asyncio.wait([task], timeout=poll_s)
            if progress is not None:
                progress(state)
            interrupts.check()  # a Ctrl-C whose KeyboardInterrupt a finalizer swallowed ends the point here
        return await task

    with gc_hold.held():
        return asyncio.run(main())


async def generate(t: Target, prompt, gen: int, timeout: float, extra: dict | None = None) -> tuple[RequestRecord, str]:
    """One request whose text is kept (warm checks, output comparisons)."""
    conn = Connection(t.host, t.port, min(timeout, 30.0))
    try:
        rec = RequestRecord(sent_prompt_tokens=len(prompt) if isinstance(prompt, list) else 0, expected_tokens=gen)
        body = request_body(t, prompt, gen, extra)
        text = await one_request(conn, t, body, rec, timeout, keep_text=True)
        return rec, text or ""
    finally:
        conn.close()
