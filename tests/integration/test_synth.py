"""Synthesized GGUFs: deterministic bytes, correct structure, and real llama.cpp loads them."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from parity.decode import replace
from parity.config import SynthSpec, profile_from_dict
from parity.errors import UsageError
from parity.gates.completion import is_complete
from parity.models.synth import ensure_model, synth_gguf, write_model
from tests.conftest import run_parity

PROMPT = "The capital of France is"


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_same_spec_same_bytes_other_seed_other_bytes(tmp_path):
    spec = SynthSpec(dtype="f16", seed=3)
    a = synth_gguf(tmp_path / "a.gguf", spec)
    b = synth_gguf(tmp_path / "b.gguf", spec)
    c = synth_gguf(tmp_path / "c.gguf", replace(spec, seed=4))
    d = synth_gguf(tmp_path / "d.gguf", replace(spec, dtype="f32"))
    assert a == b == _sha(tmp_path / "a.gguf") == _sha(tmp_path / "b.gguf")
    assert len({a, c, d}) == 3
    assert (tmp_path / "a.gguf").stat().st_size < 1_000_000  # a few hundred KB
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_cli_synth_is_reproducible(tmp_path):
    args = ["models", "synth", "--seed", "5", "--dtype", "f16", "--layers", "1", "--json"]
    r1 = run_parity(*args, "--out", str(tmp_path / "x.gguf"))
    r2 = run_parity(*args, "--out", str(tmp_path / "y.gguf"))
    r3 = run_parity(*args[:2], "--seed", "6", *args[4:], "--out", str(tmp_path / "z.gguf"))
    docs = [json.loads(r.stdout) for r in (r1, r2, r3)]
    assert docs[0]["sha256"] == docs[1]["sha256"] == _sha(tmp_path / "x.gguf")
    assert docs[2]["sha256"] != docs[0]["sha256"]
    assert docs[0]["spec"]["layers"] == 1 and docs[0]["spec"]["seed"] == 5
    side = json.loads((tmp_path / "x.gguf.synth.json").read_text())
    assert side["sha256"] == docs[0]["sha256"]


def test_gguf_structure(tmp_path):
    import gguf

    spec = SynthSpec(dtype="f16", layers=3, embd=64, heads=4, kv_heads=2, ff=96)
    synth_gguf(tmp_path / "m.gguf", spec)
    r = gguf.GGUFReader(str(tmp_path / "m.gguf"))
    fields = r.fields
    assert bytes(fields["general.architecture"].parts[-1]).decode() == "llama"
    assert int(fields["llama.block_count"].parts[-1][0]) == 3
    assert int(fields["llama.attention.head_count_kv"].parts[-1][0]) == 2
    assert "tokenizer.chat_template" in fields
    n_vocab = len(fields["tokenizer.ggml.tokens"].data)
    shapes = {t.name: (tuple(int(x) for x in t.shape), t.tensor_type.name) for t in r.tensors}
    assert shapes["token_embd.weight"] == ((64, n_vocab), "F16")  # GGUF shapes are (cols, rows)
    assert shapes["blk.2.attn_k.weight"] == ((64, 32), "F16")  # kv_heads * head_dim = 2 * 16
    assert shapes["blk.0.ffn_down.weight"] == ((96, 64), "F16")
    assert shapes["blk.0.attn_norm.weight"] == ((64,), "F32")
    assert len([n for n in shapes if n.startswith("blk.")]) == 3 * 9


def test_noise_perturbs_every_weight_by_the_relative_amount(tmp_path):
    import gguf
    import numpy as np

    base = SynthSpec(dtype="f32")
    synth_gguf(tmp_path / "base.gguf", base)
    synth_gguf(tmp_path / "p5.gguf", replace(base, noise=0.05, perturb_seed=2))
    b = {t.name: np.array(t.data, dtype=np.float64) for t in gguf.GGUFReader(str(tmp_path / "base.gguf")).tensors}
    p = {t.name: np.array(t.data, dtype=np.float64) for t in gguf.GGUFReader(str(tmp_path / "p5.gguf")).tensors}
    assert b.keys() == p.keys()
    rel = (p["blk.0.ffn_up.weight"] - b["blk.0.ffn_up.weight"]) / b["blk.0.ffn_up.weight"]
    assert 0.04 < float(np.std(rel)) < 0.06


def _profile(tmp_path, models: dict):
    return profile_from_dict({"name": "t", "models": models}, "test-profile")


def test_ensure_model_synthesizes_once_and_on_spec_change(tmp_path):
    path = tmp_path / "models" / "m.gguf"
    prof = _profile(tmp_path, {"m": {"path": str(path), "synth": {"dtype": "f16", "seed": 1}}})
    assert ensure_model(prof, "m") == str(path)
    first = path.stat().st_mtime_ns
    assert ensure_model(prof, "m") == str(path)
    assert path.stat().st_mtime_ns == first  # current: not rewritten
    prof2 = _profile(tmp_path, {"m": {"path": str(path), "synth": {"dtype": "f16", "seed": 2}}})
    ensure_model(prof2, "m")
    side = json.loads((tmp_path / "models" / "m.gguf.synth.json").read_text())
    assert side["spec"]["seed"] == 2 and side["sha256"] == _sha(path)


def test_ensure_model_plain_missing_path_names_model_and_path(tmp_path):
    prof = _profile(tmp_path, {"real": {"path": str(tmp_path / "nope.gguf")}})
    with pytest.raises(UsageError, match=r"model real: file not found: .*nope\.gguf"):
        ensure_model(prof, "real")


def test_campaign_synth_step_via_cli(tmp_path):
    prof = tmp_path / "p.yaml"
    prof.write_text(f"extends: smoke\nmodels:\n  mini: {{path: {tmp_path}/mini.gguf, synth: {{dtype: f16, seed: 9, layers: 1}}}}\n")
    camp = tmp_path / "c.yaml"
    camp.write_text("steps:\n  - {name: models, kind: synth, with: {models: [mini]}}\n")
    r = run_parity("--artifacts", str(tmp_path / "runs"), "campaign", "run", str(camp), "--profile", str(prof), "--json")
    assert r.returncode == 0, r.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    step = json.loads((run_dir / "steps" / "models.json").read_text())
    assert step == {"mini": {"path": f"{tmp_path}/mini.gguf", "sha256": _sha(tmp_path / "mini.gguf")}}


def _completion(binary: Path, model: Path, *form: str) -> bytes:
    return subprocess.run(
        [str(binary), "-m", str(model), *form, "-p", PROMPT, "-n", "16", "--temp", "0", "--seed", "1", "-t", "1", "--no-warmup"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=120,
        check=True,
    ).stdout


def _greedy_text(binary: Path, model: Path, *form: str) -> str:
    """llama.cpp 0c1e57098 leaks its async logger (common_log_main), so the tail of stdout
    can be lost at exit (seen in CI: three runs in a row that printed only the prompt).
    Run until one transcript is complete by the gate's own rule (ends with the final
    blank line); every truncated run must be a prefix of it."""
    outs = []
    while len(outs) < 10:
        outs.append(_completion(binary, model, *form))
        if is_complete(outs[-1]):
            break
    complete = outs[-1]
    assert is_complete(complete), f"{len(outs)} runs, none complete: {outs}"
    assert all(complete.startswith(o) for o in outs), outs
    return complete.decode("utf-8", "replace")


@pytest.mark.slow
def test_real_llama_completion_loads_and_generates(tmp_path, engine_bins):
    model = tmp_path / "m.gguf"
    write_model(model, SynthSpec(dtype="f16", seed=0))
    text = _greedy_text(engine_bins["stock"] / "llama-completion", model, "-no-cnv")
    assert text.startswith(PROMPT)
    generated = text[len(PROMPT) :].strip()
    assert generated, text
    assert len(set(generated)) > 1, f"degenerate output: {generated!r}"


@pytest.mark.slow
def test_real_llama_completion_uses_the_chat_template(tmp_path, engine_bins):
    model = tmp_path / "m.gguf"
    write_model(model, SynthSpec(dtype="f32", seed=1))
    text = _greedy_text(engine_bins["stock"] / "llama-completion", model)  # chat form: template applied
    assert f"user\n{PROMPT}" in text and "assistant\n" in text, text
    assert text.split("assistant\n", 1)[1].strip(), text


def test_concurrent_ensure_model_processes_agree(tmp_path):
    """Several test processes may synthesize the same model at once: each writes a temp
    file and renames it, so every process ends with the same complete file."""
    path = tmp_path / "shared.gguf"
    code = (
        "import sys; from parity.config import profile_from_dict; from parity.models.synth import ensure_model, sha256_file;"
        f"p = profile_from_dict({{'models': {{'m': {{'path': {str(path)!r}, 'synth': {{'dtype': 'f16', 'seed': 11}}}}}}}}, 't');"
        "print(sha256_file(ensure_model(p, 'm')))"
    )
    import sys

    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(3)]
    shas = {p.communicate(timeout=120)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs)
    assert shas == {synth_gguf(tmp_path / "ref.gguf", SynthSpec(dtype="f16", seed=11))}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ref.gguf", "shared.gguf", "shared.gguf.synth.json"]


def test_synth_step_takes_the_sha256_from_the_sidecar(tmp_path, monkeypatch):
    """The step reports the digest recorded at synthesis instead of re-reading the model."""
    from parity.config import profile_from_dict
    from parity.context import Context
    from parity.models import synth
    from parity.runners.local import LocalRunner
    from parity.ui import Output

    prof = profile_from_dict({"name": "s", "models": {"m": {"path": str(tmp_path / "m.gguf"), "synth": {"arch": "llama", "layers": 1, "embd": 32, "heads": 2, "kv_heads": 1, "ff": 64, "ctx": 64}}}})
    ctx = Context(profile=prof, runner=LocalRunner(), out=Output(json_mode=True), artifacts_root=tmp_path)
    first = synth.campaign_step(ctx, {"models": ["m"]})["m"]["sha256"]
    assert first == synth.sha256_file(tmp_path / "m.gguf")
    monkeypatch.setattr(synth, "sha256_file", lambda p: pytest.fail("re-hashed the model"))
    assert synth.campaign_step(ctx, {"models": ["m"]})["m"]["sha256"] == first
