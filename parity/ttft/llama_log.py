"""llama-server's own log, read for the TTFT anatomy: started with --log-prefix --log-timestamps
--log-verbosity 4 (parity.engines.llama), each line carries the server's clock (minutes.seconds.ms.us
since it started) and, per task, the lines between its slot selection and its prompt:

    0.05.123.400 I slot get_availabl: id  1 | task -1 |  - skipping, slot is empty     (newer builds, trace level)
    0.05.123.456 I slot get_availabl: id  0 | task -1 | selected slot by LRU, t_last = -1
    0.05.123.501 I srv  get_availabl: prompt cache update took 0.04 ms         (the users' pin: INFO)
    0.05.123.620 I slot launch_slot_: id  0 | task 12 | processing task, is_child = 0
    0.05.123.700 I slot process_sing: id  1 | task -1 | saving idle slot to prompt cache
    0.05.124.010 I slot update_slots: id  0 | task 12 | new prompt, n_ctx_slot = 512, ...   (trace level)
    0.05.140.000 I slot print_timing: id  0 | task 12 | prompt eval time =  15.20 ms / 32 tokens (...)
    0.05.140.001 I slot print_timing: id  0 | task 12 |        eval time = 100.00 ms / 16 tokens (...)

A task is matched to the request whose response timings (prompt_ms, predicted_ms) its release lines
print: llama-server names no task in its responses."""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass

STAMP = re.compile(r"^(\d+)\.(\d{2})\.(\d{3})\.(\d{3}) (?:[IWEDT] )?(.*)$")
SLOT = re.compile(r"^slot +\S+: id +(\d+) \| task (-?\d+) \| (.*)$")
STAMPED = re.compile(r"(?m)^(?:\x1b\[[0-9;]*m)?\d+\.\d{2}\.\d{3}\.\d{3} ")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
TOOK = re.compile(r"prompt cache update took ([0-9.]+) ms")
SAMPLER = re.compile(r"init sampler, took ([0-9.]+) ms")
EVAL = re.compile(r"^ *(prompt eval|eval) time = +([0-9.]+) ms / +(\d+) tokens")
# the prompt cache's own lines after a launch (idle slots saved): they extend the launch's block
CACHE_LINE = re.compile(r"saving idle slot to prompt cache|^ +- prompt |^ *- (saving prompt|prompt is already"
                        r"|cache state|prompt 0x|prompt \(nil\)|removing|cache size limit|cache token limit"
                        r"|looking for|found better)")
SCAN = re.compile(r"^ *- (skipping|checking sim)")
MATCH_MS = 0.0051  # the log prints 2 decimals


@dataclass
class Task:
    task: int
    slot: int
    select: float | None = None  # ms on the server's clock
    launch: float | None = None
    end: float | None = None  # the last line of the launch's block
    new_prompt: float | None = None
    cache_update_ms: float | None = None
    sampler_init_ms: float | None = None
    idle_first: float | None = None
    idle_last: float | None = None
    prompt_ms: float | None = None  # printed at release
    eval_ms: float | None = None

    @property
    def host_ms(self) -> float | None:
        return None if self.select is None or self.end is None else self.end - self.select

    @property
    def queue_ms(self) -> float | None:
        return None if self.end is None or self.new_prompt is None else max(0.0, self.new_prompt - self.end)

    @property
    def idle_save_ms(self) -> float:
        return 0.0 if self.idle_first is None else self.idle_last - self.idle_first


def stamp_ms(m: str, s: str, ms: str, us: str) -> float:
    return (int(m) * 60 + int(s)) * 1000 + int(ms) + int(us) / 1000


def parse(text: str) -> dict[int, Task]:
    """{task id: Task} of every task the log launched (lines without the server's clock are skipped)."""
    tasks: dict[int, Task] = {}
    pending: dict | None = None  # the selection whose launch comes next (the main loop takes one task at a time)
    block: Task | None = None  # the launch whose cache lines may follow
    for raw in text.splitlines():
        m = STAMP.match(ANSI.sub("", raw))
        if not m:
            continue
        t, msg = stamp_ms(*m.groups()[:4]), m.group(5)
        s = SLOT.match(msg)
        text_ = s.group(3) if s else msg.split(": ", 1)[-1]
        if block is not None and CACHE_LINE.search(text_):
            if "saving idle slot" in text_ and block.idle_first is None:
                block.idle_first = t
            block.end = t
            if block.idle_first is not None:
                block.idle_last = t
            continue
        if s is not None:  # a slot line ends the launch's block; another thread's srv line (an HTTP request) does not
            block = None
        else:
            if (k := TOOK.search(msg)) and pending is not None:
                pending["cache_update_ms"] = float(k.group(1))
            continue
        slot, task = int(s.group(1)), int(s.group(2))
        if SCAN.match(text_):  # the slot search before a selection (newer builds log it at trace level)
            searching = pending is not None and pending["slot"] is None
            pending = pending if searching else {"slot": None, "select": t}
        elif text_.startswith("selected slot by"):
            searching = pending is not None and pending["slot"] is None
            pending = {**(pending if searching else {"select": t}), "slot": slot}
        elif (k := SAMPLER.search(text_)) and pending is not None:
            pending["sampler_init_ms"] = float(k.group(1))
        elif text_.startswith("processing task"):
            p = pending if pending is not None and pending["slot"] == slot else {}
            block = tasks[task] = Task(task, slot, p.get("select"), t, t, cache_update_ms=p.get("cache_update_ms"),
                                       sampler_init_ms=p.get("sampler_init_ms"))
            pending = None
        elif text_.startswith("new prompt") and task in tasks:
            tasks[task].new_prompt = t
        elif (k := EVAL.match(text_)) and task in tasks:
            setattr(tasks[task], "prompt_ms" if k.group(1) == "prompt eval" else "eval_ms", float(k.group(2)))
    return tasks


def candidates(tasks: dict[int, Task], timings: dict | None) -> list[Task]:
    """The tasks whose release lines print these response timings (to the log's 10 us)."""
    if not isinstance(timings, dict):
        return []
    p, e = timings.get("prompt_ms"), timings.get("predicted_ms")
    if not isinstance(p, (int, float)) or not isinstance(e, (int, float)):
        return []
    near = lambda a, b: a is not None and abs(a - b) <= MATCH_MS  # noqa: E731
    return [t for t in tasks.values() if near(t.prompt_ms, p) and near(t.eval_ms, e)]


def match(tasks: dict[int, Task], timings: dict | None) -> Task | None:
    """The one task these response timings fit (None: none, or more than one)."""
    hits = candidates(tasks, timings)
    return hits[0] if len(hits) == 1 else None


def assign(tasks: dict[int, Task], recs) -> list[Task | None]:
    """Each record's task: a task that fits only one record is its; fast requests can print the same
    timings to 10 us, and those left are paired in send order with the task ids in launch order."""
    cands = [{t.task for t in candidates(tasks, r.server_timings)} for r in recs]
    out: dict[int, int] = {}
    changed = True
    while changed:
        changed = False
        for i, c in enumerate(cands):
            if i not in out and len(free := c - set(out.values())) == 1:
                out[i], changed = free.pop(), True
    for i in sorted((i for i in range(len(recs)) if i not in out), key=lambda i: recs[i].send):
        free = sorted(cands[i] - set(out.values()))
        if free:
            out[i] = free[0]
    return [tasks[out[i]] if i in out else None for i in range(len(recs))]


def size(path: str | None) -> int | None:
    """Where the log ends now (a point reads what follows), None when there is no log file."""
    try:
        return os.path.getsize(path) if path else None
    except OSError:
        return None


def read_since(path: str | None, offset: int | None, want: int, wait_s: float = 2.0,
               poll_s: float = 0.05) -> dict[int, Task]:
    """The tasks logged after offset; waits up to wait_s for `want` tasks with release lines
    (llama-server prints them as it frees the slot, a moment after the last token went out)."""
    if path is None or offset is None:
        return {}
    try:
        with open(path, "rb") as f:
            head = f.read(65536).decode("utf-8", "replace")
    except OSError:
        return {}
    if not STAMPED.search(head):  # never logged its clock (no trace flags, an endpoint's own log): nothing to wait for
        return {}
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return {}
        tasks = parse(text)
        if sum(t.eval_ms is not None for t in tasks.values()) >= want or time.monotonic() >= deadline:
            return tasks
        time.sleep(poll_s)
