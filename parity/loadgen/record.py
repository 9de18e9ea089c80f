"""What the load generator records of one request: when it was sent, each token's arrival, what
the server said (usage, timings, errors); the metrics compute from these (parity.metrics)."""

from __future__ import annotations

import msgspec


class RequestRecord(msgspec.Struct):
    send: float = 0.0  # perf_counter seconds it was sent: open loop, its write; else before any connect (in its TTFT)
    connect_ms: float | None = None  # TCP connect this request waited for (None: a kept-alive connection carried it)
    first_byte: float | None = None  # arrival of the response's first bytes (its head)
    first: float | None = None  # arrival of the first chunk carrying a generated token
    token_times: list[float] = msgspec.field(default_factory=list)  # one arrival per generated token (a merged chunk's tokens share it)
    chunks: int = 0  # chunks that carried at least one token
    tokens: int = 0  # generated tokens counted from the stream itself
    usage_tokens: int | None = None  # the server's usage.completion_tokens
    prompt_tokens: int | None = None  # the server's usage.prompt_tokens
    sent_prompt_tokens: int = 0  # len(prompt) we sent (token prompts), or the server's count of our text
    expected_tokens: int = 0  # the GEN we asked for (max_tokens, ignore_eos)
    finish_reason: str | None = None
    error: str | None = None  # transport/HTTP/server error
    invalid: str | None = None  # set by validity.check_request: why this request does not count
    response_id: str | None = None
    server_timings: dict | None = None  # llama-server's own "timings" (last one seen)
    scheduled: float | None = None  # open loop: when it was due to be sent (perf_counter)
    cached_tokens: int | None = None  # prompt tokens the server says came from its cache (usage details or timings.cache_n)

    @property
    def valid(self) -> bool:
        return self.error is None and self.invalid is None

    @property
    def end(self) -> float | None:
        return self.token_times[-1] if self.token_times else None

    @property
    def last(self) -> float | None:  # the old name
        return self.end

    @property
    def tpot_ms(self) -> float | None:
        """Time per output token after the first, ms: (end - first) / (tokens - 1); None below two tokens."""
        if self.tokens < 2 or self.first is None or not self.token_times:
            return None
        return (self.token_times[-1] - self.first) * 1000 / (self.tokens - 1)
