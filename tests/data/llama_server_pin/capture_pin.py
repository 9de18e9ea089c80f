"""How the files beside it were captured (README.md): the users' llama-server (pin 0ed235ea +
the 46-patch series) with one slot, three streamed requests, /metrics around each.  Not part
of parity; run against a server on port P."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "vllm"))
from capture import raw  # noqa: E402

P = int(sys.argv[1]) if len(sys.argv) > 1 else 18091


def prompt(base):
    return [1] + [base + j for j in range(31)]


def body(p):
    return {"prompt": p, "max_tokens": 8, "temperature": 0, "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True}}


if __name__ == "__main__":
    open("metrics-0-fresh.raw", "wb").write(raw(P, "GET", "/metrics"))
    open("stream-first.raw", "wb").write(raw(P, "POST", "/v1/completions", body(prompt(2000))))
    open("metrics-1-after-first.raw", "wb").write(raw(P, "GET", "/metrics"))
    # a different prompt that shares only the BOS token with what the slot holds: one token reused
    open("stream-bos-reused.raw", "wb").write(raw(P, "POST", "/v1/completions", body(prompt(3000))))
    open("metrics-2-after-bos-reused.raw", "wb").write(raw(P, "GET", "/metrics"))
    # the same prompt again: all but the last token reused
    open("stream-repeat.raw", "wb").write(raw(P, "POST", "/v1/completions", body(prompt(3000))))
    open("metrics-3-after-repeat.raw", "wb").write(raw(P, "GET", "/metrics"))
