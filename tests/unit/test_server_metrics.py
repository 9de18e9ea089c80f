"""Reconciling the client's numbers with vLLM's own /metrics, on real captured text."""

import pytest

from parity.engines import vllm
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
