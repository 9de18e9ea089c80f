"""HTTP/SSE parsing on captured llama-server bytes, and the load generator
against the fake vLLM server (tests/fakes/bin/vllm, a real process)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from parity.loadgen.http import BodyDecoder, Connection, HttpError, SSEParser, parse_head
from parity.loadgen.client import RequestSpec, Target, drive, run_requests
from parity.loadgen.prompts import token_prompts
from parity.metrics.validity import check_request
from ports import free_port

DATA = Path(__file__).resolve().parent.parent / "data" / "serving"
FAKE_VLLM = Path(__file__).resolve().parent.parent / "fakes" / "bin" / "vllm"


def split_response(raw: bytes):
    i = raw.find(b"\r\n\r\n")
    status, headers = parse_head(raw[:i])
    return status, headers, raw[i + 4 :]


def decode_events(headers, body: bytes, step: int) -> tuple[list[bytes], BodyDecoder]:
    dec, sse, events = BodyDecoder(headers), SSEParser(), []
    for k in range(0, len(body), step):
        events += sse.feed(dec.feed(body[k : k + step]))
    return events + sse.close(), dec


@pytest.mark.parametrize("step", [1, 2, 5, 64, 1 << 20])
def test_chunked_sse_stream_of_llama_server_in_any_split(step):
    status, headers, body = split_response((DATA / "llama-server-stream.raw").read_bytes())
    assert status == 200 and headers["transfer-encoding"] == "chunked"
    events, dec = decode_events(headers, body, step)
    assert dec.done and dec.leftover == b""
    assert events[-1] == b"[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    texts = [c["choices"][0]["text"] for c in chunks]
    final = chunks[-1]
    assert final["usage"]["completion_tokens"] == 16 and final["usage"]["prompt_tokens"] == 16
    assert final["choices"][0]["finish_reason"] == "length" and "timings" in final
    assert all(t for t in texts[:-1]) and len(chunks) == 17  # 16 token chunks (one may hold back UTF-8) + final


def test_fast_path_gives_the_same_events_as_the_general_parsers():
    from parity.loadgen.http import simple_sse_chunks

    _, headers, body = split_response((DATA / "llama-server-stream.raw").read_bytes())
    general, _ = decode_events(headers, body, 1 << 20)
    fast, used = simple_sse_chunks(body)
    assert fast == general and body[used:] == b"0\r\n\r\n"  # stops at the terminal chunk
    assert simple_sse_chunks(body[:100]) == ([], 0)  # a partial chunk is left to the general path
    assert simple_sse_chunks(b"11\r\ndata: a\ndata: b\n\n\r\n")[1] == 0  # a multi-line event too


def test_content_length_error_body_and_health():
    status, headers, body = split_response((DATA / "llama-server-error.raw").read_bytes())
    dec = BodyDecoder(headers)
    out = dec.feed(body)
    assert status == 400 and dec.done
    assert json.loads(out)["error"]["type"] == "exceed_context_size_error"
    status, headers, body = split_response((DATA / "llama-server-health.raw").read_bytes())
    assert status == 200 and json.loads(BodyDecoder(headers).feed(body)) == {"status": "ok"}


def test_tokenize_capture_matches_the_loadgen_dialect():
    _, headers, body = split_response((DATA / "llama-server-tokenize.raw").read_bytes())
    toks = json.loads(BodyDecoder(headers).feed(body))["tokens"]
    assert toks and all(isinstance(t, int) for t in toks)


def test_sse_parser_spec_corners():
    p = SSEParser()
    got = p.feed(b": comment\r\nevent: x\r\ndata: a\r\ndata: b\r\n\r\nda")
    got += p.feed(b"ta: c\n\n\n\ndata:d\n\n")
    got += p.feed(b"data: tail-without-blank-line")
    got += p.close()
    assert got == [b"a\nb", b"c", b"d", b"tail-without-blank-line"]


def test_chunked_decoder_rejects_garbage_and_reports_leftover():
    dec = BodyDecoder({"transfer-encoding": "chunked"})
    with pytest.raises(HttpError, match="bad chunk size"):
        dec.feed(b"zz\r\nhello\r\n")
    dec = BodyDecoder({"transfer-encoding": "chunked"})
    assert dec.feed(b"5;ext=1\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\nHTTP/1.1") == b"hello"
    assert dec.done and dec.leftover == b"HTTP/1.1"
    with pytest.raises(HttpError):
        parse_head(b"garbage")


# --------------------------------------------------------------------------- against the fake vLLM




@pytest.fixture
def fake_vllm(tmp_path):
    procs = []

    def start(served="m", max_model_len=4096, counted=True, **env):
        port = free_port()
        full = {**os.environ, **{k: str(v) for k, v in env.items()}}
        log = open(tmp_path / f"vllm-{port}.log", "wb")
        p = subprocess.Popen([sys.executable, str(FAKE_VLLM), "serve", str(tmp_path), "--port", str(port), "--served-model-name", served, "--host", "127.0.0.1",
                              "--max-model-len", str(max_model_len)], env=full, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        procs.append(p)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                extra = {"stream_options": {"include_usage": True, "continuous_usage_stats": True}} if counted else {}
                return Target("127.0.0.1", port, served, "prompt", count="usage" if counted else "chunks", extra=extra)
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("fake vllm did not start")

    yield start
    for p in procs:  # a busy box may take more than a few seconds to stop it (the old 5 s bound flaked)
        p.terminate()
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def specs(t, n, ptok, gen):
    return asyncio.run(token_prompts(t, n, ptok, gen))


def checked(recs):
    return [check_request(r) for r in recs]


def test_drive_against_fake_vllm_records_every_token(fake_vllm):
    t = fake_vllm(FAKE_VLLM_ITL_MS="1")
    recs = checked(drive(t, specs(t, 4, 24, 8), 30))
    assert len(recs) == 4 and all(r.valid for r in recs)
    for r in recs:
        assert r.tokens == 8 == r.usage_tokens and len(r.token_times) == 8 and r.chunks == 8
        assert r.prompt_tokens == 24 == r.sent_prompt_tokens  # exactly PTOK tokens, as the server counted them
        assert r.send < r.first <= r.end and r.finish_reason == "length"
        assert all(b >= a for a, b in zip(r.token_times, r.token_times[1:]))
        assert r.response_id.startswith("cmpl-")


def test_prompts_start_with_distinct_nonces_and_have_exact_length(fake_vllm):
    t = fake_vllm()
    ps = [s.prompt for s in specs(t, 16, 10, 4)]
    assert all(len(p) == 10 for p in ps)
    assert len({tuple(p[:5]) for p in ps}) == 16  # prefix caching cannot share a first block


def test_a_tokenizer_that_ignores_the_nonce_is_an_error_not_a_spin(fake_vllm):
    from parity.errors import InfraError

    t = fake_vllm(FAKE_VLLM_SAME_TOKENS="1")
    with pytest.raises(InfraError, match=r"1 distinct nonce prefixes of 8 after \d+ rounds"):
        specs(t, 8, 10, 4)


def test_short_response_is_flagged_not_valid(fake_vllm):
    from parity.metrics.serving import compute

    t = fake_vllm(FAKE_VLLM_SHORT="2")
    recs = checked(drive(t, specs(t, 3, 8, 6), 30))
    assert all(r.tokens == 4 == r.usage_tokens and not r.valid and "4 of 6 tokens" in r.invalid for r in recs)
    row, why = compute([r for r in recs if r.valid])
    assert row["agg_tps"] is None and why["agg_tps"]


def test_merged_and_empty_chunks_are_counted_as_tokens(fake_vllm):
    t = fake_vllm(FAKE_VLLM_MERGE="3", FAKE_VLLM_EMPTY_EVERY="4")
    recs = checked(drive(t, specs(t, 2, 8, 10), 30))
    for r in recs:
        assert r.valid, r.invalid
        assert r.tokens == 10 and r.chunks == 4  # 3+3+3+1 tokens in 4 chunks, some with empty text pieces
        assert len(r.token_times) == 10 and r.token_times[0] == r.token_times[2]


def test_counting_chunks_alone_misses_empty_pieces_and_says_so(fake_vllm):
    t = fake_vllm(counted=False, FAKE_VLLM_EMPTY_EVERY="2")
    (r,) = checked(drive(t, specs(t, 1, 8, 6), 30))
    assert r.tokens == 3 and not r.valid and "usage says 6 completion tokens, the stream carried 3" in r.invalid


def test_a_server_claiming_more_tokens_than_it_streamed_is_invalid(fake_vllm):
    t = fake_vllm(FAKE_VLLM_CLAIM="32")
    (r,) = checked(drive(t, specs(t, 1, 8, 3), 30))
    assert r.tokens == 3 and r.usage_tokens == 32
    assert not r.valid and "usage says 32" in r.invalid


def test_a_clamped_response_is_invalid_with_its_reason(fake_vllm):
    t = fake_vllm(max_model_len=20)
    (r,) = checked(drive(t, specs(t, 1, 16, 8), 30))  # 16 + 8 > 20: vLLM clamps to 4, HTTP 200
    assert r.error is None and r.tokens == 4 and r.finish_reason == "length"
    assert not r.valid and r.invalid.startswith("clamped: the stream carried 4 of 8 tokens")


def test_http_errors_become_request_errors_of_either_shape(fake_vllm):
    t = fake_vllm()
    wrong = Target(t.host, t.port, "not-served", "prompt")
    (rec,) = asyncio.run(run_requests(wrong, [RequestSpec([5, 6, 7], 4)], 1, 10))
    assert not rec.valid and rec.error.startswith("HTTP 404") and "does not exist" in rec.error
    (rec,) = asyncio.run(run_requests(t, [RequestSpec(list(range(3, 5000)), 4)], 1, 10))  # prompt alone over max_model_len
    assert rec.error.startswith("HTTP 400") and "maximum context length" in rec.error
    from parity.loadgen.client import error_message

    assert error_message(b'{"error": {"code": 400, "message": "too long", "type": "exceed_context_size_error"}}') == "too long (exceed_context_size_error)"
    assert error_message(b'{"object": "error", "message": "old shape", "type": "BadRequestError", "code": 400}') == "old shape (BadRequestError)"


def test_keep_alive_reuses_one_connection(fake_vllm):
    t = fake_vllm()

    async def go():
        conn = Connection(t.host, t.port)
        try:
            for _ in range(5):
                status, body = await conn.request("POST", "/tokenize", {"model": "m", "prompt": "ab"})
                assert status == 200 and body["tokens"] == [ord("a") + 3, ord("b") + 3]
            events = []
            status, _ = await conn.stream("/v1/completions", json.dumps({"model": "m", "prompt": [1], "max_tokens": 3, "stream": True}).encode(), lambda t, d: events.append(d))
            assert status == 200 and events[-1] == b"[DONE]" and len(events) == 4  # no usage chunk unless asked
            status, _ = await conn.request("GET", "/health")
            assert status == 200
            return conn.opened
        finally:
            conn.close()

    assert asyncio.run(go()) == 1


def test_request_timeout_is_a_clean_request_error(fake_vllm):
    t = fake_vllm(FAKE_VLLM_TTFT_MS="3000")
    (rec,) = asyncio.run(run_requests(t, [RequestSpec([5, 6], 2)], 1, 0.5))
    assert rec.error == "timed out after 0.5 s" and not rec.valid


def test_a_signal_whose_interrupt_was_swallowed_ends_a_point_at_its_next_poll(fake_vllm):
    # parity.interrupts: the handler's KeyboardInterrupt can land in a finalizer and be dropped (a Ctrl-C
    # once let a snapshot serve its whole sweep); the wait for a point's requests checks every poll
    from parity import interrupts

    t = fake_vllm(FAKE_VLLM_TTFT_MS="3000")
    interrupts.note(signal.SIGINT)
    try:
        with pytest.raises(KeyboardInterrupt):
            drive(t, [RequestSpec([5, 6], 2)], 30)
    finally:
        interrupts.reset()


def test_a_record_says_its_connect_and_first_byte(fake_vllm):
    t = fake_vllm(FAKE_VLLM_ITL_MS="1")
    a, b = checked(drive(t, specs(t, 2, 8, 4), 30, concurrency=1))  # one worker: the second request rides the first's connection
    assert a.connect_ms is not None and a.connect_ms > 0 and b.connect_ms is None
    for r in (a, b):
        assert r.send < r.first_byte <= r.first and (a.connect_ms / 1000) < (a.first - a.send)


def test_an_open_loop_writes_each_request_on_a_connection_opened_ahead(fake_vllm, monkeypatch):
    from parity.loadgen import client

    monkeypatch.setattr(client, "LEAD_S", 0.5)  # a lead no stall of a loaded box outlasts (the test's point)
    t = fake_vllm(FAKE_VLLM_ITL_MS="1", FAKE_VLLM_TTFT_MS="100")  # every request still in flight when the next is due
    got = specs(t, 8, 16, 4)
    for k, s in enumerate(got):
        s.at = [0.0, 0.0, 0.0, 0.005, 0.6, 0.601, 0.7, 0.7][k]  # bursts; the later ones opened after the start
    recs = checked(drive(t, got, 30, open_loop=True))
    assert all(r.valid for r in recs), [r.invalid or r.error for r in recs]
    for r in recs:  # no connect waited for: the request left when it was written
        assert r.connect_ms is None and r.scheduled <= r.send < r.first_byte <= r.first


def test_the_connections_opened_ahead_cover_every_due_time_within_the_lead():
    from parity.loadgen.client import due_within

    assert due_within([0.0, 0.0, 0.01, 0.05, 0.2], 0.05) == [4, 3, 2, 1, 1]
    assert due_within([], 0.05) == []


def test_a_written_request_the_server_closed_on_is_sent_again_and_its_write_time_moves():
    """The keep-alive race: a connection opened ahead that the server closes as the request goes out
    (its idle timeout) is retried once on a fresh one, and sent_at is the write that was answered."""
    raw = (DATA / "llama-server-stream.raw").read_bytes()
    seen = []

    async def serve(reader, writer):
        seen.append(await reader.read(1 << 16))
        if len(seen) > 1:
            writer.write(raw)
            await writer.drain()
        writer.close()  # the first: closed with no answer

    async def go():
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        conn = Connection("127.0.0.1", port)
        try:
            await conn.open()
            events = []
            data = b'{"prompt": [1]}'
            begun = conn.begin(data, lambda _t, d: events.append(d))
            first = conn.sent_at
            status, _ = await conn.send_stream(data, lambda _t, d: events.append(d), begun)
            return status, events, first, conn
        finally:
            conn.close()
            server.close()

    status, events, first, conn = asyncio.run(go())
    assert status == 200 and events[-1] == b"[DONE]" and len(seen) == 2 and seen[0] == seen[1]
    assert conn.opened == 2 and conn.sent_at > first and conn.connect_s is not None


def test_a_send_falling_due_among_ready_reads_is_written_at_the_next_read_not_after_them_all():
    """The open loop's armed sends (client._Armed): asyncio runs every callback ready in a loop iteration
    before the spinning task's next turn, so a send falling due while many responses' reads are ready
    is written by the next read (http._Protocol.buffer_updated), once each and in schedule order."""
    from parity.loadgen.client import _Armed
    from parity.loadgen.http import stream_request

    raw = (DATA / "llama-server-stream.raw").read_bytes()  # a whole streamed response: one read each
    n, log = 12, []

    async def go():
        listener = socket.create_server(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        armed = _Armed()
        conns = [Connection("127.0.0.1", port, due=armed) for _ in range(n + 2)]
        peers = {}
        try:
            for c in conns:
                await c.open()
            for _ in conns:
                peer, addr = listener.accept()  # connected already (the backlog): no wait
                peers[addr[1]] = peer
            peer_of = [peers[c.proto.transport.get_extra_info("sockname")[1]] for c in conns]
            reading, sending = conns[:n], conns[n:]

            def write(k):
                log.append(f"send {k}")
                sending[k].begin(stream_request("127.0.0.1", port, "/v1/completions", b"{}"), None)

            def on_event(j):
                def seen(_now, _data):
                    if not log:  # the first read: both sends fall due now, the other reads still ready
                        armed.arm(time.perf_counter(), lambda: write(0))
                        armed.arm(time.perf_counter(), lambda: write(1))
                    log.append(j)
                return seen

            begun = [c.begin(stream_request("127.0.0.1", port, "/v1/completions", b"{}"), on_event(j)) for j, c in enumerate(reading)]
            for p in peer_of[:n]:
                p.sendall(raw)  # every response readable before the loop next looks
            await asyncio.gather(*(b.future for b in begun))
            await armed.spinner
            for p in peer_of[n:]:
                p.settimeout(5)
                assert p.recv(1 << 16).startswith(b"POST /v1/completions")
            return [c.sent_at for c in sending]
        finally:
            for c in conns:
                c.close()
            for p in peers.values():
                p.close()
            listener.close()

    sent = asyncio.run(go())
    first = log[0]
    at = log.index("send 0")
    assert set(log[:at]) == {first} and log[at + 1] == "send 1", log[: at + 4]  # before any other response's events
    assert log.count("send 0") == log.count("send 1") == 1 and sent[0] <= sent[1]
    assert len({x for x in log if isinstance(x, int)}) == n
