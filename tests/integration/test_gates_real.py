"""Gates against real llama.cpp binaries (the smoke engines, built and cached
through parity) and real synthesized models."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest
import yaml
from gate_helpers import make_ctx, values, write_profile

from parity.gates.checks import ERROR, FAIL, PASS
from parity.gates.kl import kl_gate
from parity.gates.oracle import op_gate

DATA = Path(__file__).resolve().parents[1] / "data" / "gates"

pytestmark = pytest.mark.slow

# the smoke profile without a same-session reference: md5s come from the registry
NO_REFERENCE = """extends: smoke
gates:
  reference_engine: null
  kl: {reference: tiny-f32, baseline: tiny-noisy, candidate: tiny}
"""


@pytest.fixture
def built(engine_bins, tiny_model):
    return engine_bins


def gate(parity_cli, tmp_path, *args):
    res = parity_cli("--artifacts", str(tmp_path / "runs"), "gate", *args, "--json", env={"PARITY_LOCK_DIR": str(tmp_path / "gpu_bench_lock")})
    doc = json.loads(res.stdout) if res.stdout.strip() else None
    return res, doc


def test_gate_json_is_one_object_with_every_check(built, parity_cli, tmp_path):
    res, doc = gate(parity_cli, tmp_path, "--model", "tiny")
    assert res.returncode == 0, res.stderr
    assert doc["status"] == PASS and doc["green"] is True
    assert [c["check"] for c in doc["checks"]] == ["md5 tiny/paged", "op RMS_NORM [CPU]", "op SOFT_MAX (m_prec=f16) [CPU]"]
    for c in doc["checks"]:
        assert {"check", "kind", "model", "path", "expected", "got", "status", "detail"} <= set(c)
    md5 = doc["checks"][0]
    assert md5["expected"] == md5["got"] and len(md5["got"]) == 32
    assert "stock build" in md5["detail"] and "same session" in md5["data"]["expected_provenance"]
    assert md5["data"]["env"]["LLAMA_KV_PAGED"] == "1"
    run_dir = tmp_path / "runs" / doc["run_dir"].split("/")[-1]
    assert (run_dir / md5["data"]["transcript"]).read_bytes().startswith(b"The capital of France is")
    tsv = (run_dir / "gate_checks.tsv").read_text().splitlines()
    assert tsv[0] == "phase\tcheck\texpected\tgot\tstatus" and len(tsv) == 4
    users = (run_dir / "gate_summary.tsv").read_text().splitlines()  # the users' layout, beside it
    assert users[0] == "phase\tcheck\tstatus\tactual\texpected\tdetails" and len(users) == 4
    assert users[1].split("\t")[:5] == ["gate", "tiny_md5", "ok", md5["got"], md5["got"]]


def test_gate_bad_model_is_usage_error(parity_cli, tmp_path):
    res = parity_cli("--artifacts", str(tmp_path / "runs"), "gate", "--model", str(tmp_path / "missing.gguf"), env={"PARITY_LOCK_DIR": str(tmp_path / "gpu_bench_lock")})
    assert res.returncode == 2 and res.stderr.startswith("parity: error:") and "Traceback" not in res.stderr


def test_md5_recorded_canonical_passes_and_changes_fail(built, parity_cli, tmp_path, smoke_profile):
    from parity.models.synth import ensure_model

    prof = write_profile(tmp_path / "p.yaml", NO_REFERENCE)
    reg = tmp_path / "registry.yaml"
    common = ("--model", "tiny", "--ops", "none", "--registry", str(reg), "-p", str(prof))

    # no expectation anywhere: an error, never a pass
    res, doc = gate(parity_cli, tmp_path, *common)
    assert res.returncode == 3 and doc["checks"][0]["status"] == ERROR and "no canonical md5" in doc["checks"][0]["detail"]

    # --record without --kl is refused and writes nothing
    res, doc = gate(parity_cli, tmp_path, *common, "--record")
    assert res.returncode == 3 and "refusing" in doc["record_error"] and not reg.exists()

    # --record with a KL check outside its band is refused too
    tight = write_profile(tmp_path / "tight.yaml", f"extends: {prof}\ngates:\n  kl: {{max_kld: 1.0e-12}}\n")
    res, doc = gate(parity_cli, tmp_path, *common[:-2], "-p", str(tight), "--kl", "--record")
    assert res.returncode == 3 and [c["status"] for c in doc["checks"]] == [ERROR, FAIL] and not reg.exists()

    # a green KL check for that model and path: recorded with provenance and transcript
    res, doc = gate(parity_cli, tmp_path, *common, "--kl", "--record")
    assert res.returncode == 0, res.stderr
    kl = doc["checks"][1]
    assert kl["status"] == PASS and 0 < float(kl["got"].split()[1]) < 0.01
    entry = yaml.safe_load(reg.read_text())["models"]["tiny"][0]
    observed = doc["checks"][0]["got"]
    assert entry["md5"] == observed and entry["path"] == "paged" and entry["form"] == "no-cnv"
    assert entry["validated"].startswith("KL-validated against tiny-f32: KLD")
    assert (reg.parent / entry["transcript"]).read_bytes().startswith(b"The capital of France is")

    # the recorded canonical md5 now gates the tiny model
    res, doc = gate(parity_cli, tmp_path, *common)
    assert res.returncode == 0 and doc["checks"][0]["status"] == PASS and doc["checks"][0]["expected"] == observed
    assert doc["checks"][0]["detail"].startswith("KL-validated")

    # a sampling flag changes: red, with the first diverging bytes from the stored transcript
    temp = write_profile(tmp_path / "temp.yaml", f'extends: {prof}\ngates:\n  completion_args: [-ngl, "99", -fa, "on", --temp, "1.0", -t, "1", --no-warmup]\n')
    res, doc = gate(parity_cli, tmp_path, *common[:-2], "-p", str(temp))
    c = doc["checks"][0]
    assert res.returncode == 3 and c["status"] == FAIL and c["got"] != observed and "first difference at byte" in c["detail"]

    # the model changes (5% weight noise under the same name): red
    noisy = ensure_model(smoke_profile, "tiny-noisy")
    other = write_profile(tmp_path / "other.yaml", f"extends: {prof}\nmodels:\n  tiny: {{path: {noisy}, synth: null}}\n")
    res, doc = gate(parity_cli, tmp_path, *common[:-2], "-p", str(other))
    assert res.returncode == 3 and doc["checks"][0]["status"] == FAIL


def test_chat_and_no_cnv_forms_differ(built, tmp_path):
    from parity.gates.md5 import md5_gate

    ctx = make_ctx(tmp_path)
    chat = md5_gate(*values(ctx), "tiny", "paged", form="chat")
    plain = md5_gate(*values(ctx), "tiny", "paged", form="no-cnv")
    assert chat.status == plain.status == PASS
    assert chat.got != plain.got and "-no-cnv" not in chat.data["argv"] and plain.data["argv"][-1] == "-no-cnv"


def test_kl_real_divergence_and_band(built, tmp_path, monkeypatch):
    from parity.gates import common, kl

    monkeypatch.setattr(kl, "cache_dir", lambda: tmp_path / "cache")
    monkeypatch.setattr(common, "cache_dir", lambda: tmp_path / "cache")
    ctx = make_ctx(tmp_path)
    ok = kl_gate(*values(ctx))  # smoke: tiny-perturbed (1% noise) vs tiny, bounded by tiny-noisy (5% noise)
    assert ok.status == PASS, ok.detail
    cand, base = ok.data["candidate"]["stats"]["kld"][0], ok.data["baseline"]["stats"]["kld"][0]
    assert 0 < cand < base
    assert ok.data["candidate"]["stats"]["ppl_q"][0] > 1 and 0 < ok.data["candidate"]["stats"]["same_top_p"][0] <= 100
    logits = tmp_path / "cache" / "kl"
    (cached,) = logits.glob("*.kld")
    mtime = cached.stat().st_mtime_ns

    swapped = kl_gate(*values(ctx), candidate="tiny-noisy", baseline="tiny-perturbed")
    assert swapped.status == FAIL and "> baseline" in swapped.detail
    assert cached.stat().st_mtime_ns == mtime  # reference logits reused from the cache

    ctx.profile.gates.kl.max_kld = cand / 2
    absolute = kl_gate(*values(ctx))
    assert absolute.status == FAIL and "max_kld" in absolute.detail


def test_kl_drift_sweep_one_row_per_context(built, parity_cli, tmp_path):
    """`--kl-sweep`: the KL gate at each context (tiny-perturbed vs tiny, bounded by tiny-noisy),
    one row each in the JSON and in gate_summary.tsv; same top p is part of each row's verdict."""
    res, doc = gate(parity_cli, tmp_path, "--ops", "none", "--kl-sweep", "64,128,256")
    assert res.returncode == 0, res.stderr[-2000:]
    rows = doc["kl_sweep"]
    assert [(r["ctx"], r["path"], r["status"]) for r in rows] == [(n, "paged", PASS) for n in (64, 128, 256)]
    for r in rows:  # 1 % weight noise: a small KLD, its tail above its mean, most top tokens kept
        assert 0 < r["kld"] < r["kld_p99"] < 0.01 and 93 <= r["same_top_p"] < 100, r
    kl = [c for c in doc["checks"] if c["kind"] == "kl"]
    assert [c["check"] for c in kl] == [f"kl tiny-perturbed/paged vs tiny ctx {n}" for n in (64, 128, 256)]
    for c, n in zip(kl, (64, 128, 256)):
        assert c["data"]["ctx"] == n and c["data"]["text_words"] == 4 * n and c["data"]["candidate"]["chunks"] == 4
        assert c["data"]["text"].endswith(f"text-s0-{4 * n}w.txt") and "same top p >= 93.000%" in c["expected"]
    tsv = [ln.split("\t") for ln in (Path(doc["run_dir"]) / "gate_summary.tsv").read_text().splitlines()]
    kl_rows = [(r[1], r[2]) for r in tsv if r[1].startswith("kl_")]
    assert kl_rows == [(f"kl_tiny-perturbed_paged_ctx{n}", "ok") for n in (64, 128, 256)]

    # the users' own bound, 99.5 %: 1 % weight noise flips more top tokens than that, each row red
    strict = write_profile(tmp_path / "strict.yaml", "extends: smoke\ngates:\n  kl: {min_same_top_p: 99.5}\n")
    res, doc = gate(parity_cli, tmp_path, "-p", str(strict), "--ops", "none", "--kl-sweep", "128")
    assert res.returncode == 3 and [r["status"] for r in doc["kl_sweep"]] == [FAIL]
    detail = doc["kl_sweep"][0]["detail"]
    assert detail.startswith("same top p ") and "< 99.500% (min_same_top_p 99.5%)" in detail


# the md5 gate on the lossy candidate, its md5 changed, its KL gate asked for on that path
MD5_CHANGE = """extends: smoke
gates:
  models: [tiny-perturbed]
  kl: {on_md5_change: [paged]}
"""


def test_an_md5_change_runs_the_kl_gate_before_the_run_is_accepted(built, parity_cli, tmp_path):
    prof = write_profile(tmp_path / "p.yaml", MD5_CHANGE)
    reg = tmp_path / "registry.yaml"
    # the expected md5: the unperturbed model's transcript (tests/data/gates): tiny-perturbed's differs
    canonical = hashlib.md5((DATA / "completion-no-cnv.stdout").read_bytes()).hexdigest()
    args = ("--ops", "none", "--expect", canonical, "--registry", str(reg))
    res, doc = gate(parity_cli, tmp_path, "-p", str(prof), *args, "--record")
    assert res.returncode == 0, res.stderr[-2000:]
    (c,) = doc["checks"]  # one check: the md5, judged by the KL gate it ran
    assert c["status"] == PASS and c["got"] != canonical and c["expected"] == canonical
    assert c["detail"].startswith("md5 changed, KL within band: KLD ") and c["data"]["kl"]["status"] == PASS
    assert "running the KL gate (gates.kl.on_md5_change)" in res.stderr
    tsv = (Path(doc["run_dir"]) / "gate_summary.tsv").read_text().splitlines()
    row = next(r.split("\t") for r in tsv if r.startswith("gate\ttiny-perturbed_md5"))
    assert row[2:5] == ["ok", c["got"], canonical] and row[5].startswith("md5 changed, KL within band")
    entry = yaml.safe_load(reg.read_text())["models"]["tiny-perturbed"][0]  # a KL-validated change becomes canonical
    assert entry["md5"] == c["got"] and entry["validated"].startswith("KL-validated against tiny: KLD")

    # the same change outside the band: red, with the KL's reason
    tight = write_profile(tmp_path / "tight.yaml", f"extends: {prof}\ngates:\n  kl: {{max_kld: 1.0e-12}}\n")
    res, doc = gate(parity_cli, tmp_path, "-p", str(tight), *args[:-2])
    (c,) = doc["checks"]
    assert res.returncode == 3 and c["status"] == FAIL
    assert c["detail"].startswith("md5 changed and KL fail: ") and "max_kld" in c["detail"]

    # a path the profile does not name: a changed md5 stays a mismatch, no KL run
    res, doc = gate(parity_cli, tmp_path, "-p", str(prof), *args[:-2], "--path", "nonpaged")
    (c,) = doc["checks"]
    assert res.returncode == 3 and c["status"] == FAIL
    assert c["detail"].startswith("md5 mismatch") and "kl" not in c["data"]


def test_op_oracle_real_cpu(built, tmp_path):
    ctx = make_ctx(tmp_path)
    seconds = {}
    for op in ("RMS_NORM", "SCALE"):
        t0 = time.monotonic()
        c = op_gate(*values(ctx), op, "CPU")
        seconds[op] = time.monotonic() - t0
        n = int(c.got.split("/")[1])
        assert c.status == PASS and n > 0 and c.got == f"{n}/{n}" == c.expected
        assert len(c.attempts) == 1
        assert (ctx.run.path / c.attempts[0]["output"]).read_text().count("OK") >= n
    print("test-backend-ops -b CPU seconds:", {k: round(v, 2) for k, v in seconds.items()})
    unknown = op_gate(*values(ctx), "NOT_AN_OP", "CPU")
    assert unknown.status == ERROR and unknown.got == "0/0"  # nothing tested is never a pass
    absent = op_gate(*values(ctx), "RMS_NORM", "CUDA0")  # a CPU-only build has no CUDA0 block
    assert absent.status == ERROR and "no 'Backend i/n: CUDA0' block" in absent.detail
