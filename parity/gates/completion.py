"""The llama-completion tool: greedy runs for the md5 gate."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from parity.gates.canonical import EMPTY_MD5, MD5_RE


def usable_md5(value: str) -> bool:
    """A well-formed md5 that is not the md5 of empty output."""
    return bool(MD5_RE.match(value)) and value != EMPTY_MD5


@dataclass
class CompletionRun:
    argv: list[str]
    env: dict
    rc: int | None
    timed_out: bool
    stdout: bytes
    stderr: str
    seconds: float
    attempts: list[dict] | None = None  # earlier incomplete attempts, when retried

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out

    @property
    def md5(self) -> str:
        return hashlib.md5(self.stdout).hexdigest()


def is_complete(stdout: bytes) -> bool:
    """llama-completion ends every run with LOG("\\n\\n"), but its async logger is
    never flushed at exit (the singleton is leaked on purpose), so the tail -- or
    everything -- can be lost: 9 of 40 tiny-model runs here lost some (the smoke
    profile's source fixup drains it; other builds may not).  A transcript without
    the final blank line is incomplete."""
    return stdout.endswith(b"\n\n")


def greedy_argv(binary: str, model: str, prompt: str, n_predict: int, seed: int, form: str, extra: list[str], n_ctx: int | None = None) -> list[str]:
    """The gate's llama-completion command; n_ctx is its -c (the users' canonical md5s were recorded with -c 4096)."""
    argv = [binary, "-m", model, *(["-c", str(n_ctx)] if n_ctx else []), *extra, "-p", prompt, "-n", str(n_predict), "--seed", str(seed)]
    if form == "no-cnv":
        argv.append("-no-cnv")
    return argv


def run_greedy(runner, argv: list[str], env: dict, timeout: float) -> CompletionRun:
    """stdin is /dev/null (conversation mode would wait on a terminal otherwise)."""
    res = runner.run(argv, env=env, timeout=timeout)
    return CompletionRun(argv, dict(env), res.rc, res.timed_out, res.stdout.encode("utf-8", "surrogateescape"), res.stderr, res.duration_s)


_L5 = re.compile(r"\[L5INSTR\] get_block_table n=(?P<gbt>\d+) .*?\| set_inputs n=(?P<setinp>\d+) .*?\| hostproc n=(?P<hostproc>\d+)(?: .*?\| graph_reuse (?P<reused>\d+)/(?P<proc>\d+))?")


def series_counters(stderr: str) -> dict | None:
    """The paged series' exit-time counter line (patches 0029/0040, src/paged-attn.cpp):
    `[L5INSTR] get_block_table n=... | set_inputs n=... | hostproc n=... | graph_reuse a/b`.
    get_block_table > 0 only when the paged attention path ran (LLAMA_KV_PAGED=1)."""
    m = None
    for m in _L5.finditer(stderr):
        pass
    if m is None:
        return None
    out = {"get_block_table": int(m["gbt"]), "set_inputs": int(m["setinp"]), "hostproc": int(m["hostproc"])}
    if m["proc"] is not None:
        out["graph_reuse"] = [int(m["reused"]), int(m["proc"])]
    return out


def first_divergence(got: bytes, ref: bytes, context: int = 24) -> str:
    """Where two transcripts first differ, as a short readable excerpt."""
    n = next((i for i, (a, b) in enumerate(zip(got, ref)) if a != b), min(len(got), len(ref)))
    if n == len(got) == len(ref):
        return "identical"
    lo = max(0, n - context)
    return f"first difference at byte {n}: got {got[lo:n + context]!r} vs reference {ref[lo:n + context]!r}"
