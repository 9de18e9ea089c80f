"""One request of a trace, whatever the format it was read from, and the trace itself."""

from __future__ import annotations

import msgspec


class TraceRequest(msgspec.Struct, frozen=True):
    """One request: when it arrived, how many tokens it sent and got, and what its prompt shares."""

    at_s: float  # arrival, seconds after the trace's first request
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] | None = None  # one id per block of the prompt: equal ids, equal blocks (None: not said)
    block_size: int | None = None  # tokens per hash id (None with hash_ids None)
    session: str | None = None  # the conversation it belongs to, where the trace says (None: not said)
    line: int = 0  # the file's line it was read from (1 = the first line)


class Trace(msgspec.Struct, frozen=True):
    """A trace file read: its requests in arrival order and what was left out on reading."""

    format: str  # azure | burstgpt | mooncake | bailian
    requests: tuple[TraceRequest, ...]
    block_size: int | None = None  # tokens per hash id (None: the format has none)
    dropped: dict[str, int] = msgspec.field(default_factory=dict)  # why -> rows left out on reading
    source: str = ""  # the file
