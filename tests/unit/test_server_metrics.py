"""Reconciling the client's numbers with vLLM's own /metrics, on real captured text."""

import pytest

from parity.engines import llama, vllm
from parity.metrics.prometheus import deltas, mismatches, parse, reconcile

from tests.unit.test_fake_vllm_vs_real import body_of_raw


def body(name: str) -> str:
    return body_of_raw(name).decode()


@pytest.fixture(scope="module")
def server():
    return deltas(vllm.FAMILY, parse(body("metrics-1-before-batch.raw")), parse(body("metrics-2-after-batch.raw")))


def client(server, **over):
    c = {"requests": 8, "prompt_tokens": 256, "generation_tokens": 128, "ttft_mean_ms": server["ttft_mean_ms"] + 6.0, "e2e_mean_ms": server["e2e_mean_ms"] + 6.0}
    return {**c, **over}


def test_the_captured_batch_deltas(server):
    assert (server["requests"], server["prompt_tokens"], server["generation_tokens"]) == (8, 256, 128)
    assert server["ttft_mean_ms"] == pytest.approx(1600 / 8, rel=0.01)  # README of the capture: sum +1.60 s over 8


def test_a_client_a_frontend_longer_than_the_server_reconciles(server):
    rows = reconcile(server, client(server))
    assert [r["status"] for r in rows] == ["ok"] * 5 and mismatches(rows) == []


def test_the_smoke_runs_vllm_ttft_gap_of_six_ms_is_within_the_rule():
    # measured in a smoke run on the CI box: client 29.49 ms, vLLM's histogram 23.36 ms
    rows = reconcile({"ttft_mean_ms": 23.36}, {"ttft_mean_ms": 29.49})
    assert [r["status"] for r in rows if r["quantity"] == "ttft_mean_ms"] == ["ok"]


@pytest.mark.parametrize(
    "over, bad",
    [
        ({"generation_tokens": 127}, "generation_tokens"),
        ({"requests": 9}, "requests"),
        ({"ttft_mean_ms": 1600 / 8 * 1.4}, "ttft_mean_ms"),  # client 40 % longer than the server: not a frontend
        ({"e2e_mean_ms": 1.0}, "e2e_mean_ms"),  # client shorter than the server's own clock: impossible
    ],
)
def test_a_real_disagreement_is_a_mismatch_naming_the_quantity(server, over, bad):
    found = mismatches(reconcile(server, client(server, **over)))
    assert len(found) == 1 and found[0].startswith(bad + ":")


def test_what_an_engine_does_not_expose_is_said_not_guessed():
    rows = reconcile({"generation_tokens": 4}, {"generation_tokens": 4, "requests": 1})
    assert {r["quantity"]: r["status"] for r in rows}["requests"] == "not exposed"


def _oracle(text: str) -> dict[str, float]:
    """prometheus_client's parser, summed the same way: what parse() must equal, but for one
    thing: a counter's sample written without `_total` (llama-server's llamacpp:n_tokens_max)
    keeps the name the server wrote, where prometheus_client appends `_total`."""
    from prometheus_client.parser import text_string_to_metric_families

    written = {ln.split("{")[0].split(" ")[0] for ln in text.splitlines() if ln and not ln.startswith("#")}
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            name = s.name[: -len("_total")] if fam.type == "counter" and s.name not in written and s.name.endswith("_total") else s.name
            if not name.endswith(("_bucket", "_created")):
                out[name] = out.get(name, 0.0) + float(s.value)
    return out


def _captured() -> list[tuple[str, str]]:
    from pathlib import Path

    data = Path(__file__).resolve().parent.parent / "data"
    files = sorted((data / "vllm").glob("metrics-*")) + sorted((data / "llama_server").glob("metrics-*")) + sorted((data / "llama_server_pin").glob("*metrics-*"))
    # .raw: the whole HTTP response, decoded as the client does
    return [(f"{f.parent.name}/{f.name}", body_of_raw(f).decode() if f.suffix == ".raw" else f.read_text()) for f in files]


CAPTURED = _captured()


@pytest.mark.parametrize("name,text", CAPTURED, ids=[n for n, _ in CAPTURED])
def test_parse_equals_prometheus_clients_parser_on_captured_metrics(name, text):
    got, want = parse(text), _oracle(text)
    assert got.keys() == want.keys() and len(got) > 5
    assert all(got[k] == pytest.approx(want[k], rel=1e-12, nan_ok=True) for k in want)


def test_parse_reads_quoted_label_values_special_values_and_timestamps():
    text = ('# HELP x_total what\n# TYPE x_total counter\n'
            'x_total{model_name="/m/a b}{\\"q\\",c",engine="0"} 2.0\nx_total{engine="1"} 3 1712345678000\n'
            'g NaN\nh +Inf\ny_bucket{le="+Inf"} 9\ny_count 4\n')  # fmt: skip
    got = parse(text)
    assert got == pytest.approx(_oracle(text), nan_ok=True)
    assert got["x_total"] == 5.0 and got["y_count"] == 4.0 and "y_bucket" not in got
    with pytest.raises(ValueError, match="unterminated labels"):
        parse('x_total{engine="0 1\n')


# ------------------------------------------------------------------ prompt tokens and the prompt cache


def _metrics(folder: str, name: str) -> dict:
    from pathlib import Path

    return parse(body_of_raw(Path(__file__).resolve().parent.parent / "data" / folder / name).decode())


def _client(folder: str, stream: str) -> dict:
    """The client's side of one real captured stream, read by parity's own stream handler."""
    from pathlib import Path

    from parity.loadgen.client import _Handler
    from parity.loadgen.http import BodyDecoder, SSEParser, parse_head
    from parity.metrics.serving import RequestRecord

    raw = (Path(__file__).resolve().parent.parent / "data" / folder / stream).read_bytes()
    i = raw.find(b"\r\n\r\n")
    _, headers = parse_head(raw[:i])
    rec, events = RequestRecord(), SSEParser().feed(BodyDecoder(headers).feed(raw[i + 4 :]))
    h = _Handler(rec, None, "chunks")
    for k, ev in enumerate(events):
        h(float(k), ev)
    return {"requests": 1, "prompt_tokens": rec.prompt_tokens, "generation_tokens": rec.usage_tokens, "cached_prompt_tokens": rec.cached_tokens}


def _prompt_row(server: dict, client: dict) -> dict:
    (row,) = [r for r in reconcile(server, client) if r["quantity"] == "prompt_tokens"]
    return row


PIN = "llama_server_pin"


@pytest.mark.parametrize("before, stream, after, cached", [
    ("metrics-0-fresh.raw", "stream-first.raw", "metrics-1-after-first.raw", 0),
    ("metrics-1-after-first.raw", "stream-bos-reused.raw", "metrics-2-after-bos-reused.raw", 1),  # client 32, server 31: the H100 run's warning
    ("metrics-2-after-bos-reused.raw", "stream-repeat.raw", "metrics-3-after-repeat.raw", 31),
    ("paged-metrics-1-after-first.raw", "paged-stream-bos-reused.raw", "paged-metrics-2-after-bos-reused.raw", 0),  # the paged path reuses nothing
])  # fmt: skip
def test_the_pins_llama_server_reconciles_with_what_its_cache_took(before, stream, after, cached):
    """The users' llama-server (pin + series; tests/data/llama_server_pin) counts only computed
    prompt tokens and has no cached counter: its count is the client's less the cached tokens
    the response reported, and that is no mismatch."""
    server = deltas(llama.FAMILY, _metrics(PIN, before), _metrics(PIN, after))
    client = _client(PIN, stream)
    assert (client["prompt_tokens"], client["cached_prompt_tokens"], server["prompt_tokens"], server["prompt_includes_cached"]) == (32, cached, 32 - cached, False)
    rows = reconcile(server, client)
    assert mismatches(rows) == [] and {r["quantity"]: r["status"] for r in rows}["prompt_tokens"] == "ok"
    off = _prompt_row(server, {**client, "cached_prompt_tokens": cached + 1})  # a token the cache does not explain
    assert off["status"] == "MISMATCH"
    unknown = _prompt_row(server, {**client, "cached_prompt_tokens": None})  # not every response said: at most the client's
    assert unknown["status"] == "ok" and unknown["rule"].startswith("at most the client's")


def test_a_newer_llama_server_with_the_cached_counter_counts_the_whole_prompt():
    # ../llama_server: the same 8 x 32-token prompts again, 8 computed and 248 from cache (usage cached_tokens 31 each)
    server = deltas(llama.FAMILY, _metrics("llama_server", "metrics-2-after-batch.raw"), _metrics("llama_server", "metrics-3-after-repeat.raw"))
    assert (server["prompt_tokens"], server["prompt_includes_cached"]) == (256, True)
    assert _prompt_row(server, {"prompt_tokens": 256, "cached_prompt_tokens": 248})["status"] == "ok"  # not 256 - 248
    assert _prompt_row(server, {"prompt_tokens": 256, "cached_prompt_tokens": None})["status"] == "ok"
    assert _prompt_row(server, {"prompt_tokens": 255, "cached_prompt_tokens": 248})["status"] == "MISMATCH"
    assert _prompt_row(server, {"prompt_tokens": 7, "cached_prompt_tokens": None})["status"] == "MISMATCH"


def test_one_cached_token_in_4096_is_no_warning():
    """The H100 serving run's figures: 4096 prompt tokens sent, the pin's server computed 4095
    (one token of one request came from its cache); 9 of 60 points warned before."""
    server = {"prompt_tokens": 4095.0, "prompt_includes_cached": False}
    assert mismatches(reconcile(server, {"prompt_tokens": 4096, "cached_prompt_tokens": 1})) == []
    assert mismatches(reconcile(server, {"prompt_tokens": 4096, "cached_prompt_tokens": 0})) == [
        "prompt_tokens: client 4096 vs server 4095.0 (exact, less the 0 prompt tokens the responses said the server took from its cache (its counter leaves them out))"]


def test_vllm_counts_the_tokens_it_took_from_its_prefix_cache():
    # two 300-token prompts, the second hit 256 tokens in the prefix cache: prompt_tokens_total +300 both times
    v = lambda n: parse(body(n))  # noqa: E731
    first, again = deltas(vllm.FAMILY, v("metrics-4-before-prefix.raw"), v("metrics-5-after-first-300.raw")), deltas(vllm.FAMILY, v("metrics-5-after-first-300.raw"), v("metrics-6-after-repeat-300.raw"))
    assert (first["prompt_tokens"], again["prompt_tokens"], again["prefix_hits"], again["prompt_includes_cached"]) == (300, 300, 256, True)
    assert _prompt_row(again, {"prompt_tokens": 300, "cached_prompt_tokens": 256})["status"] == "ok"  # not 300 - 256


def test_the_frontend_time_in_the_clients_ttft_is_the_one_in_its_e2e():
    """Six real smoke points: the client's TTFT runs 3.1-10.4 ms past vLLM's, never more than its
    E2E gap plus 1 ms; one (10.4 ms) broke the fixed 10 ms bound and warned on a quiet box."""
    import json
    from pathlib import Path

    from parity.metrics.prometheus import _within

    doc = json.loads((Path(__file__).resolve().parents[1] / "data" / "vllm" / "smoke-reconciliation-times.json").read_text())
    got = {(p["run"][:8], p["repeat"]): {r["quantity"]: r["status"] for r in reconcile(p["server"], p["client"])} for p in doc["rows"]}
    assert len(got) == 6 and all(s["ttft_mean_ms"] == s["e2e_mean_ms"] == "ok" for s in got.values())
    fixed = [p for p in doc["rows"] if not _within(p["client"]["ttft_mean_ms"], p["server"]["ttft_mean_ms"])]
    assert [(p["run"][:8], p["repeat"]) for p in fixed] == [("20261127", 1)]
    late = {**fixed[0]["client"], "ttft_mean_ms": fixed[0]["client"]["ttft_mean_ms"] + 4.6}  # one more decode step (~4.6 ms there)
    assert mismatches(reconcile(fixed[0]["server"], late))[0].startswith("ttft_mean_ms:")
