"""Reconciling the client's numbers with vLLM's own /metrics, on real captured text."""

import pytest

from parity.serving.server_metrics import deltas, mismatches, parse, reconcile

from tests.unit.test_fake_vllm_vs_real import body_of_raw


def body(name: str) -> str:
    return body_of_raw(name).decode()


@pytest.fixture(scope="module")
def server():
    return deltas("vllm", parse(body("metrics-1-before-batch.raw")), parse(body("metrics-2-after-batch.raw")))


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
    files = sorted((data / "vllm").glob("metrics-*")) + sorted((data / "llama_server").glob("metrics-*"))
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


def _llama(name: str, without_cached_counter: bool = False) -> dict:
    """A captured llama-server /metrics (tests/data/llama_server); without_cached_counter: the same
    text less the llamacpp:prompt_tokens_cached_total family, which the users' pin (0ed235ea)
    does not have (its server-context.cpp exports prompt_tokens_total of computed tokens only)."""
    from pathlib import Path

    text = body_of_raw(Path(__file__).resolve().parent.parent / "data" / "llama_server" / name).decode()
    if without_cached_counter:
        text = "".join(ln for ln in text.splitlines(keepends=True) if "prompt_tokens_cached_total" not in ln)
    return parse(text)


def _prompt_row(server: dict, client: dict) -> dict:
    (row,) = [r for r in reconcile(server, client) if r["quantity"] == "prompt_tokens"]
    return row


def test_llama_server_with_the_cached_counter_counts_the_whole_prompt():
    # the same 8 x 32-token prompts again: 8 computed, 248 from cache (usage cached_tokens 31 each)
    server = deltas("llama", _llama("metrics-2-after-batch.raw"), _llama("metrics-3-after-repeat.raw"))
    assert (server["prompt_tokens"], server["prompt_includes_cached"]) == (256, True)
    assert _prompt_row(server, {"prompt_tokens": 256, "cached_prompt_tokens": 248})["status"] == "ok"
    assert _prompt_row(server, {"prompt_tokens": 256, "cached_prompt_tokens": None})["status"] == "ok"
    assert _prompt_row(server, {"prompt_tokens": 255, "cached_prompt_tokens": 248})["status"] == "MISMATCH"


def test_llama_server_without_the_cached_counter_is_reconciled_with_the_cached_tokens_responses_report():
    server = deltas("llama", _llama("metrics-2-after-batch.raw", True), _llama("metrics-3-after-repeat.raw", True))
    assert (server["prompt_tokens"], server["prompt_includes_cached"]) == (8, False)
    row = _prompt_row(server, {"prompt_tokens": 256, "cached_prompt_tokens": 248})
    assert row["status"] == "ok" and row["rule"].startswith("exact, less the 248 prompt tokens") and row["client"] == 256
    assert _prompt_row(server, {"prompt_tokens": 256, "cached_prompt_tokens": 247})["status"] == "MISMATCH"  # one token unaccounted for
    unknown = _prompt_row(server, {"prompt_tokens": 256, "cached_prompt_tokens": None})  # not every response said: at most
    assert unknown["status"] == "ok" and unknown["rule"].startswith("at most the client's")
    assert _prompt_row(server, {"prompt_tokens": 7, "cached_prompt_tokens": None})["status"] == "MISMATCH"  # more computed than sent


def test_one_cached_token_on_a_busy_server_is_no_warning():
    """The H100 serving run: 4096 prompt tokens sent, the pin's server computed 4095 (its prompt
    cache reused one token of one request); 9 of 60 points warned 'client 4096 vs server 4095'."""
    server = {"prompt_tokens": 4095.0, "prompt_includes_cached": False}
    assert mismatches(reconcile(server, {"prompt_tokens": 4096, "cached_prompt_tokens": 1})) == []
    assert mismatches(reconcile(server, {"prompt_tokens": 4096, "cached_prompt_tokens": 0})) == [
        "prompt_tokens: client 4096 vs server 4095.0 (exact, less the 0 prompt tokens the responses said the server took from its cache (its counter leaves them out))"]


def test_vllm_counts_the_tokens_it_took_from_its_prefix_cache():
    # two 300-token prompts, the second hit 256 tokens in the prefix cache: prompt_tokens_total +300 both times
    v = lambda n: parse(body(n))  # noqa: E731
    first, again = deltas("vllm", v("metrics-4-before-prefix.raw"), v("metrics-5-after-first-300.raw")), deltas("vllm", v("metrics-5-after-first-300.raw"), v("metrics-6-after-repeat-300.raw"))
    assert (first["prompt_tokens"], again["prompt_tokens"], again["prefix_hits"], again["prompt_includes_cached"]) == (300, 300, 256, True)
    assert _prompt_row(again, {"prompt_tokens": 300, "cached_prompt_tokens": 256})["status"] == "ok"  # not 300 - 256
