"""Which numbers count (MLPerf-style: a broken rule makes the result INVALID, with the rule named).

A request counts when it had no error, its token count from the stream equals the
GEN asked for, the server's usage agrees with that count, and its prompt tokens are
what was sent.  A point (one engine x N x repeat) counts when every request counts
(unless the profile sets serving.invalid_tolerance) and its measurement windows are
at least serving.min_window_s long.  A ratio from fewer than 3 valid repeats has no
known noise: it is shown, without a verdict."""

from __future__ import annotations

from typing import Sequence

from parity.loadgen.record import RequestRecord

MIN_REPEATS_FOR_VERDICT = 3


def check_request(r: RequestRecord) -> RequestRecord:
    """Set r.invalid to the reason this request does not count (None when it counts)."""
    r.invalid = None
    if r.error is not None:
        return r
    if r.first is None:
        r.invalid = "no generated token in the stream"
    elif r.usage_tokens is None:
        r.invalid = "no usage in the stream: the token count cannot be reconciled"
    elif r.usage_tokens != r.tokens:
        r.invalid = f"the server's usage says {r.usage_tokens} completion tokens, the stream carried {r.tokens}"
    elif r.tokens != r.expected_tokens:
        if r.tokens < r.expected_tokens and r.finish_reason == "length":
            r.invalid = f"clamped: the stream carried {r.tokens} of {r.expected_tokens} tokens and ended with finish_reason length (the engine cut max_tokens: prompt + max_tokens over its context?)"
        else:
            r.invalid = f"short: the stream carried {r.tokens} of {r.expected_tokens} tokens (finish_reason {r.finish_reason})"
    elif r.sent_prompt_tokens and r.prompt_tokens is not None and r.prompt_tokens != r.sent_prompt_tokens:
        r.invalid = f"the server counted {r.prompt_tokens} prompt tokens, {r.sent_prompt_tokens} were sent"
    return r


def reason(r: RequestRecord) -> str | None:
    return r.error or r.invalid


def point_verdict(records: Sequence[RequestRecord], row: dict, min_window_s: float, tolerance: float = 0.0, windows: Sequence[str] = ("wall_s", "decode_window_s")) -> list[str]:
    """Why a point is invalid ([] when it counts).  tolerance: the share of invalid
    requests allowed (0: none); windows: the row's intervals that must last min_window_s."""
    problems = []
    bad = [r for r in records if not r.valid]
    if bad and len(bad) > tolerance * len(records):
        first = reason(bad[0])
        problems.append(f"{len(bad)}/{len(records)} requests invalid (first: {first})")
    for key in windows:
        v = row.get(key)
        if v is None:
            problems.append(f"no {key}: {row.get('why', {}).get(key, 'not computed')}")
        elif v < min_window_s:
            problems.append(f"{key} {v * 1000:.1f} ms is shorter than serving.min_window_s ({min_window_s * 1000:g} ms): too short to time")
    return problems


def noise_note(repeats: int) -> str | None:
    if repeats < MIN_REPEATS_FOR_VERDICT:
        return f"noise unknown: {repeats} valid repeat{'s' if repeats != 1 else ''} (a verdict needs {MIN_REPEATS_FOR_VERDICT})"
    return None
