"""The KL gate as the users run it, without a build: the generated text (the same bytes every
time, prefix-stable, long enough by construction), the length rule checked before any build,
same top p as a bound of the verdict, the drift sweep's contexts and rows, the md5 change the
KL gate judges.  Numbers come from real llama-perplexity output (tests/data/gates)."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import replace
from pathlib import Path

import msgspec
import pytest
from inproc import cli

from parity.config import KLConfig, load_profile
from parity.errors import ConfigError, UsageError
from parity.gates import kltext, perplexity
from parity.gates.checks import ERROR, FAIL, PASS, Check
from parity.gates.kl import band, settles_md5, sweep_contexts, sweep_rows
from parity.gates.md5 import judged_by_kl

DATA = Path(__file__).resolve().parents[1] / "data" / "gates"
SHIPPED = Path(__file__).resolve().parents[2] / "parity" / "defaults" / "kl-text.txt"


def stats_of(name: str) -> dict:
    return {k: [v.value, v.err] for k, v in perplexity.parse((DATA / name).read_text()).items()}


# ---------------------------------------------------------------------------------------- the text


def test_the_generated_text_is_the_same_bytes_everywhere_and_prefix_stable():
    text = kltext.generate(8192, seed=0)
    # pinned: a change to the word lists or the stream changes every cached reference logit
    pinned = "e5ee5f02fed407d3efe978463fdde253edff5eeeb030d95272fb5ca55f12ec57"
    assert hashlib.sha256(text.encode()).hexdigest() == pinned
    assert len(text.split()) == 8192 and text.endswith("\n") and max(map(len, text.splitlines())) <= kltext.LINE
    assert kltext.generate(8192, seed=0) == text
    longer = kltext.generate(65536, seed=0).split()
    assert longer[:8192] == text.split() and len(longer) == 65536  # each context of a sweep starts the same
    assert kltext.generate(8192, seed=1).split()[:50] != text.split()[:50]


def test_the_generated_text_file_is_written_once_and_holds_chunks_x_ctx_words(tmp_path):
    p = kltext.generated(tmp_path, 16, 512)
    assert p == kltext.planned(tmp_path, 16, 512) == tmp_path / "text-s0-8192w.txt"
    assert kltext.count_words(p) == 8192
    mtime = p.stat().st_mtime_ns
    assert kltext.generated(tmp_path, 16, 512) == p and p.stat().st_mtime_ns == mtime  # same bytes: left alone
    p.write_text("tampered\n")
    assert kltext.generated(tmp_path, 16, 512).read_text() == kltext.generate(8192)
    assert kltext.needed_words(1, 512) == 1024  # llama-perplexity wants 2 x ctx tokens at least


def test_a_text_too_short_for_chunks_x_ctx_is_one_line_naming_it():
    words = kltext.count_words(SHIPPED)
    kltext.check_long_enough(str(SHIPPED), 4, [128, 256])  # the smoke's 4 x 128 fits
    kltext.check_long_enough(None, 16, [4096])  # the generated text: long enough by construction
    with pytest.raises(UsageError) as e:
        kltext.check_long_enough(str(SHIPPED), 16, [512])  # the GB10's 16 x 512, the issue's case
    msg = str(e.value)
    assert "\n" not in msg and f"has {words} words, too short for 16 chunks x 512 tokens (needs 8192 words" in msg
    with pytest.raises(UsageError, match="16 chunks x 4096 tokens"):
        kltext.check_long_enough(str(SHIPPED), 16, [256, 4096])
    with pytest.raises(UsageError, match="file not found"):
        kltext.check_long_enough("/nonexistent/text.txt", 4, [128])


# ---------------------------------------------------------------------------------------- same top p


def test_llama_perplexity_prints_p99_max_and_the_chunks_it_evaluated():
    s = perplexity.parse((DATA / "ppl-kl-p1.txt").read_text())
    assert (s["kld_p99"].value, s["kld_max"].value, s["kld_p99"].err) == (0.001247, 0.001398, None)
    assert (s["same_top_p"].value, s["same_top_p"].err) == (96.429, 1.171)
    assert perplexity.chunks((DATA / "ppl-kl-p1.txt").read_text()) == 4
    assert perplexity.chunks((DATA / "ppl-base.txt").read_text()) == 4
    assert perplexity.chunks("no statistics at all") is None


def test_same_top_p_is_a_bound_of_the_verdict():
    p1, p5 = stats_of("ppl-kl-p1.txt"), stats_of("ppl-kl-p5.txt")  # same top p 96.429 %, 87.302 %
    assert KLConfig().min_same_top_p == 99.5  # the users' P1 bound is the default
    bounds, problems = band(p1, None, KLConfig(max_kld=1.0), None)
    assert problems == ["same top p 96.429% < 99.500% (min_same_top_p 99.5%)"] and "same top p >= 99.500%" in bounds[-1]
    assert band(p1, None, KLConfig(max_kld=1.0, min_same_top_p=95.0), None)[1] == []
    assert band(p1, None, KLConfig(max_kld=1.0, min_same_top_p=None), None)[1] == []
    # against the baseline: no worse than its same top p less the slack
    kl = KLConfig(min_same_top_p=None, same_top_p_slack=1.0, ppl_band_pct=100.0)
    assert band(p1, p5, kl, "tiny-noisy")[1] == []
    _, problems = band(p5, p1, msgspec.structs.replace(kl, kld_slack=1.0), "tiny-perturbed")
    assert problems == ["same top p 87.302% < 95.429% (baseline tiny-perturbed 96.429% - slack 1)"]
    # closed world: a missing or NaN same top p is a named failure, never a pass
    no_stp = {k: v for k, v in p1.items() if k != "same_top_p"}
    assert band(no_stp, None, KLConfig(max_kld=1.0), None)[1] == ["no finite same top p in llama-perplexity's output"]
    assert band({**p1, "same_top_p": [math.nan, math.nan]}, None, KLConfig(max_kld=1.0, min_same_top_p=0.0), None)[1]
    assert "baseline b: no finite same top p" in band(p1, no_stp, msgspec.structs.replace(kl, kld_slack=1.0), "b")[1][0]


BAD_KL = [{"min_same_top_p": 101}, {"min_same_top_p": -1}, {"same_top_p_slack": -0.5}, {"ctx": 1}, {"chunks": 0}]


@pytest.mark.parametrize("bad", BAD_KL)
def test_kl_settings_out_of_range_are_config_errors(tmp_path, bad):
    key, value = next(iter(bad.items()))
    prof = tmp_path / "p.yaml"
    prof.write_text(f"extends: smoke\ngates:\n  kl: {{{key}: {value}}}\n")
    with pytest.raises(ConfigError, match=r"gates\.kl"):
        load_profile(str(prof))


def test_on_md5_change_needs_the_kl_models(tmp_path):
    prof = tmp_path / "p.yaml"
    prof.write_text("extends: smoke\ngates:\n  kl: {reference: null, on_md5_change: [paged]}\n")
    with pytest.raises(ConfigError, match="gates.kl.on_md5_change: needs gates.kl.reference"):
        load_profile(str(prof))


# ---------------------------------------------------------------------------------------- the drift sweep


def test_sweep_contexts_are_whole_numbers():
    assert sweep_contexts(["256", "1024", "256", 4096]) == [256, 1024, 4096]
    for bad in ("abc", "0", "1", "2.5", "-256"):
        with pytest.raises(UsageError, match=f"--kl-sweep: '{bad}' is not a context size"):
            sweep_contexts([bad], "--kl-sweep")


def test_a_campaign_gate_step_takes_the_sweep(tmp_path):
    from parity.context import Context
    from parity.gates.base import gate_inputs
    from parity.gates.kinds import GATES
    from parity.gates.prepost import GateSpec, check_plan, spec_from_options
    from parity.runners.local import LocalRunner
    from parity.ui import Output

    _, over = spec_from_options({"phase": "pre", "kl_sweep": "256, 1024", "ops": []})
    spec = GateSpec.from_profile(load_profile("smoke"), **over)
    ctx = Context(load_profile("smoke"), LocalRunner(), Output(json_mode=True), tmp_path / "runs")
    targets = GATES["kl"].expand(gate_inputs(ctx.profile), spec, "paged")
    assert [(t.path, t.n_ctx) for t in targets] == [("paged", 256), ("paged", 1024)]
    short = tmp_path / "p.yaml"
    short.write_text(f"extends: smoke\ngates:\n  kl: {{text: {SHIPPED}}}\n")
    with pytest.raises(UsageError, match="too short for 4 chunks x 1024 tokens"):
        check_plan(load_profile(str(short)).gates, spec)


def test_sweep_rows_are_one_per_context_with_the_numbers_and_the_verdict():
    p1 = stats_of("ppl-kl-p1.txt")
    def kl(n, status, sweep=True):
        data = {"ctx": n, "sweep": sweep, "candidate": {"stats": p1}}
        return Check(f"kl tiny/paged vs ref ctx {n}", "kl", "b", "g", status, "", "tiny", "paged", data=data)

    checks = [kl(1024, FAIL), kl(256, PASS), kl(128, PASS, sweep=False), Check("md5 tiny/paged", "md5", "x", "y", PASS)]
    rows = sweep_rows([c.to_dict() for c in checks], [256, 1024])
    assert [(r["ctx"], r["status"]) for r in rows] == [(256, PASS), (1024, FAIL)]
    want = {"ctx": 256, "model": "tiny", "path": "paged", "kld": 0.000579, "kld_err": 0.000015, "kld_p99": 0.001247,
            "same_top_p": 96.429, "ppl_ratio": p1["ppl_ratio"][0], "status": PASS, "detail": ""}  # fmt: skip
    assert rows[0] == want


def test_gate_kl_sweep_is_checked_before_any_build_or_run_dir(tmp_path):
    runs = tmp_path / "runs"
    short = tmp_path / "short.yaml"
    short.write_text(f"extends: smoke\ngates:\n  kl: {{text: {SHIPPED}}}\n")  # 2184 words: 4 x 128 fits, not 4 x 1024
    r = cli("--artifacts", runs, "gate", "-p", short, "--kl-sweep", "128,1024")
    (line,) = r.error_lines()
    assert r.rc == 2 and "too short for 4 chunks x 1024 tokens (needs 4096 words" in line, r.err
    r = cli("--artifacts", runs, "gate", "-p", short, "--kl-sweep", "128,x")
    (line,) = r.error_lines()
    assert r.rc == 2 and line.endswith("--kl-sweep: 'x' is not a context size (a whole number of tokens, 2 or more)")
    r = cli("--artifacts", runs, "gate", "--kl-sweep", "")
    assert r.rc == 2 and "--kl-sweep: give the contexts" in r.error_lines()[0]
    big = tmp_path / "big.yaml"
    big.write_text(f"extends: smoke\ngates:\n  kl: {{text: {SHIPPED}, chunks: 16, ctx: 512}}\n")
    r = cli("--artifacts", runs, "gate", "-p", big, "--kl")
    assert r.rc == 2 and "too short for 16 chunks x 512 tokens" in r.error_lines()[0]
    assert not runs.exists()  # refused before the run directory (and so before any build or lock)


def test_gb10_kl_gate_runs_as_shipped_with_its_sweep(tmp_path):
    """The embedded GB10 profile: its f16 reference is a model of the profile, its text is the
    generated one (16 x 512 words), and the users' drift sweep plans one KL row per context."""
    prof = load_profile("gb10-qwen36")
    kl = prof.gates.kl
    assert kl.text is None and prof.models[kl.reference].path.endswith("darwin_36b_opus/f16.gguf")
    r = cli("--artifacts", tmp_path / "runs", "gate", "-p", "gb10-qwen36", "--model", "moe", "--ops", "none", "--kl",
            "--kl-sweep", "256,1024,2048,4096", "--dry-run", "--json")  # fmt: skip
    doc = json.loads(r.out)
    kls = [c for c in doc["checks"] if c["kind"] == "kl"]
    assert [c["check"] for c in kls] == ["kl paged", *(f"kl paged ctx {n}" for n in (256, 1024, 2048, 4096))]
    for c, n in zip(kls, (512, 256, 1024, 2048, 4096)):
        base, cand, baseline = c["commands"]
        assert [a["argv"][a["argv"].index("-c") + 1] for a in (base, cand, baseline)] == [str(n)] * 3
        assert base["argv"][base["argv"].index("-f") + 1].endswith(f"/kl/text-s0-{16 * n}w.txt")
        assert "same top p >= moe/nonpaged's - 1" in c["expected"] and "LLAMA_KV_PAGED" not in baseline["env"]
    assert "gates.kl.text" not in doc["files"]  # made on the first real run, like a synthesized model
    md5 = next(c for c in doc["checks"] if c["kind"] == "md5")
    assert "a changed md5 runs the KL gate" in md5["expected"]


# ---------------------------------------------------------------------------------------- an md5 change


def test_an_md5_change_is_judged_by_kl():
    kl = KLConfig(reference="f16", candidate="moe", on_md5_change=["paged"])
    assert settles_md5(kl, "moe", "paged")
    assert not settles_md5(kl, "moe", "nonpaged") and not settles_md5(kl, "dense", "paged")
    assert not settles_md5(msgspec.structs.replace(kl, on_md5_change=[]), "moe", "paged")
    assert settles_md5(msgspec.structs.replace(kl, on_md5_change=["all"]), "moe", "x")
    canonical, changed = "8cb0ce23777bf55f92f63d0292c756b0", "07db32c2bcb78d17a43ed18bc22705cd"
    md5 = Check("md5 moe/paged", "md5", canonical, changed, FAIL, "md5 mismatch", "moe", "paged",
                data={"transcript": "gates/gate/md5-moe-paged.out"})  # fmt: skip
    ok = Check("kl moe/paged vs f16", "kl", "KLD <= 0.136597", "KLD 0.136000 ± 0.003285", PASS,
               "KL-validated against f16: KLD 0.136000", "moe", "paged")  # fmt: skip
    judged = judged_by_kl(md5, ok)
    assert judged.status == PASS and judged.got == changed
    assert judged.detail.startswith("md5 changed, KL within band: KLD 0.136000")
    assert judged.data["md5_changed"] and judged.data["kl"]["status"] == PASS
    from parity.gates.md5 import KIND

    row = judged.to_dict()
    assert KIND.users_status(row) == "ok" and KIND.users_output(row) is None  # the TSV's details: the detail
    red = judged_by_kl(md5, replace(ok, status=FAIL, detail="KLD 0.137162 > baseline moe 0.136563 + slack 0"))
    assert red.status == FAIL
    assert red.detail == "md5 changed and KL fail: KLD 0.137162 > baseline moe 0.136563 + slack 0"
    assert judged_by_kl(md5, replace(ok, status=ERROR, detail="x")).status == FAIL
