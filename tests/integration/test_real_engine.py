"""The users' real engine on CPU: LocalAI's patches/paged on llama.cpp 0ed235ea (../shared)
built as `paged` and its `stock` twin (cached under PARITY_CACHE), gated with the users' own
rules (paged-inference-gates.sh): greedy md5 of the paged path (LLAMA_KV_PAGED=1), the
non-paged path and stock agree on a tiny llama and on tiny qwen35 / qwen35moe, whose
gated-DeltaNet and MoE layers run the series' hot code; the op-oracle on CPU for the series'
ops, including the test cases the series adds; the KL gate on a lossy path."""

from __future__ import annotations

import pytest

from conftest import run_parity, shared_or_skip
from gate_helpers import make_ctx, values
from parity.gates.checks import ERROR, PASS
from parity.gates.completion import EMPTY_MD5
from parity.gates.kl import kl_gate
from parity.gates.oracle import op_gate
from parity.gates.prepost import GateSpec, run_gate_set

pytestmark = pytest.mark.slow

PROFILE = "localai-paged-cpu"
PIN_TREE = "c3ed2c39b9700f3aeff95ab391571db7dd7e0c39"
SERIES_TREE = "6cf1523047e0e38679baff20844bdc9e6829eb22"


@pytest.fixture(scope="module")
def real_builds():
    shared_or_skip("localai-paged/Makefile", "localai-paged/patches/paged", "llama.cpp-pin/llama.cpp-0ed235ea.tar.gz")
    from parity.config import load_profile
    from parity.llamacpp.build import ensure_built
    from parity.engines.bound import bind
    from parity.runners.local import LocalRunner
    from parity.ui import Output

    prof = load_profile(PROFILE)
    return {n: ensure_built(bind(prof, n), LocalRunner(), Output(json_mode=True)) for n in ("paged", "stock")}


def test_provenance_pin_series_trees_flags(real_builds):
    from parity.llamacpp import patches

    p, s = real_builds["paged"].provenance, real_builds["stock"].provenance
    assert p["source"]["pin"] == s["source"]["pin"] == "0ed235ea2c17a19fc8238668653946721ed136fd"
    assert p["source"]["archive"].endswith("llama.cpp-0ed235ea.tar.gz")
    assert (p["tree_before"], p["tree_after"]) == (PIN_TREE, SERIES_TREE)
    assert len(p["patches"]) == 46 and p["series_digest"] == patches.digest_of(p["patches"])
    assert p["preimage_mismatch"] == 21
    assert s["tree_before"] == s["tree_after"] == PIN_TREE and s["patches"] == [] and s["series_digest"] is None
    # both get the log fixup, so the built trees differ from the mirror trees by it alone
    assert [f["name"] for f in p["fixups"]] == [f["name"] for f in s["fixups"]] == ["0001-common-log-drain-the-async-queue-at-exit.patch"]
    assert p["tree_built"] not in (SERIES_TREE, PIN_TREE) and s["tree_built"] != PIN_TREE
    assert "-DGGML_NATIVE=OFF" in p["cmake_configure"] and "-DGGML_CUDA=OFF" in p["cmake_configure"]
    assert set(p["binaries"]) == {"llama-server", "llama-completion", "llama-batched-bench", "llama-perplexity", "test-backend-ops"}
    lib = next(k for k in p["libraries"] if k.startswith("libllama.so"))
    assert p["libraries"][lib] != s["libraries"][lib]  # the series is in the library


@pytest.mark.parametrize("model", ["tiny", "tiny-qwen35", "tiny-qwen35moe"])
def test_md5_paged_path_nonpaged_path_and_stock_agree(real_builds, tmp_path, model):
    """The users' rule on the dense paths: paged == non-paged == stock, bit for bit, with
    their command (chat form, -n 48 --temp 0 --seed 1 -c 4096 -fa on)."""
    ctx = make_ctx(tmp_path, PROFILE)
    res = run_gate_set(*values(ctx), GateSpec(models=[model], paths=["paged", "nonpaged"], engines=["paged", "stock"], engine="paged"), "md5")
    checks = {c["check"]: c for c in res["checks"]}
    assert list(checks) == [f"md5 {model}/paged", f"md5 {model}/nonpaged", f"md5 {model}/nonpaged [stock]"]
    assert all(c["status"] == PASS for c in checks.values()), [(c["check"], c["detail"]) for c in checks.values()]
    md5s = {c["got"] for c in checks.values()} | {c["expected"] for c in checks.values()}
    assert len(md5s) == 1 and EMPTY_MD5 not in md5s
    paged = checks[f"md5 {model}/paged"]["data"]
    assert paged["env"]["LLAMA_KV_PAGED"] == "1" and "-no-cnv" not in paged["argv"]
    assert ["-n", "48"] == paged["argv"][paged["argv"].index("-n") : paged["argv"].index("-n") + 2]
    text = (ctx.run.path / paged["transcript"]).read_text(errors="replace")
    assert "assistant\n" in text and text.split("assistant\n", 1)[1].strip()  # the chat form, and it generated
    # the series' exit-time counter: the paged attention path ran only with LLAMA_KV_PAGED=1
    assert paged["series_counters"]["get_block_table"] > 0
    assert checks[f"md5 {model}/nonpaged"]["data"]["series_counters"]["get_block_table"] == 0
    assert "series_counters" not in checks[f"md5 {model}/nonpaged [stock]"]["data"]  # stock has no series


# the series' own test cases (patches 0021, 0028, 0048, 0049, 0050, 0055) and the upstream ops
# its hot code touches; every one runs cases on the CPU backend against the CPU reference
SERIES_OPS = ["SSM_CONV_UPDATE", "SSM_CONV_UPDATE_IDS", "MOE_SWIGLU_DOWN", "MOE_WEIGHTED_COMBINE", "MUL_MAT_ID_RAGGED_MOE", "BF16_STREAM_SEGMENT"]
TOUCHED_OPS = ["GATED_DELTA_NET", "SSM_CONV"]


@pytest.mark.parametrize("op", SERIES_OPS + TOUCHED_OPS)
def test_op_oracle_on_cpu(real_builds, tmp_path, op):
    """CPU against the CPU reference (`-b CPU`); the MoE cases keep their small f32 case on CPU
    (gates.op_params: the others are NVFP4 with 128-256 experts, minutes each on 2 cores)."""
    ctx = make_ctx(tmp_path, PROFILE)
    c = op_gate(*values(ctx), op, "CPU", "paged")
    assert c.status == PASS, (c.got, c.detail)
    passed, total = (int(x) for x in c.got.split("/"))
    assert passed == total > 0
    if op.startswith(("MOE_", "MUL_MAT_ID")):
        assert c.data["params"] == "type_a=f32" and c.check == f"op {op} (type_a=f32) [CPU]" and total == 1


def test_op_oracle_series_cases_do_not_exist_in_stock(real_builds, tmp_path):
    """The series' own cases are the series': stock's test-backend-ops has none of them."""
    ctx = make_ctx(tmp_path, PROFILE)
    for op in SERIES_OPS:
        c = op_gate(*values(ctx), op, "CPU", "stock")
        assert c.status == ERROR and c.got == "0/0" and "no test case ran" in c.detail, (op, c.got, c.detail)  # closed world: never a pass


def test_kl_lossy_path_bounded_by_the_nonpaged_path(real_builds, tmp_path):
    """KLD(f16 MoE on the paged path || f32) <= KLD(the same on the non-paged path || f32)."""
    ctx = make_ctx(tmp_path, PROFILE)
    c = kl_gate(*values(ctx), engine="paged", path="paged")
    assert c.status == PASS, (c.got, c.detail)
    assert c.data["baseline"]["path"] == "nonpaged" and c.data["candidate"]["env"]["LLAMA_KV_PAGED"] == "1"
    cand, base = c.data["candidate"]["stats"]["kld"][0], c.data["baseline"]["stats"]["kld"][0]
    assert 0 < cand <= base  # f16 is lossy against f32, and the paged path adds nothing to it


def test_gated_sweep_paged_server_against_stock(real_builds, tmp_path):
    """The same-session sweep: the real paged llama-server (LLAMA_KV_PAGED=1) against stock on
    the small MoE hybrid, 3 repeats, pre/post gates, and its dated report."""
    import csv
    import json

    import yaml

    from ports import free_port

    port = free_port()
    prof = tmp_path / "p.yaml"
    prof.write_text(yaml.safe_dump({"extends": PROFILE, "lock": {"dir": str(tmp_path / "lock"), "poll_s": 0.5, "timeout_s": 60}, "serving": {"port": port, "calibrate": {"enabled": False}}}))  # the profile's shape, 3 blocks 0-2
    r = run_parity("--artifacts", str(tmp_path / "runs"), "snapshot", "-p", str(prof), "--json", timeout=1800)
    assert r.returncode == 0, r.stderr[-2000:]
    (run,) = (tmp_path / "runs").iterdir()
    rows = list(csv.DictReader(open(run / "parity_summary.tsv"), delimiter="\t"))
    got = {(x["engine"], x["n"], x["repeat"]) for x in rows if x["kind"] == "row"}
    assert got == {(e, n, str(i)) for e in ("paged", "stock") for n in ("1", "4") for i in range(3)}
    assert all(float(x["decode_agg_tps"]) > 0 and x["valid"] == "True" for x in rows if x["kind"] == "row")
    assert {x["n"] for x in rows if x["kind"] == "ratio" and x["engine"] == "paged" and x["reference"] == "stock"} == {"1", "4"}
    gates = list(csv.DictReader(open(run / "gate_summary.tsv"), delimiter="\t"))  # the users' layout
    assert {g["phase"] for g in gates} == {"pre", "post"} and all(g["status"] == "ok" for g in gates)
    server = json.loads((run / "servers" / "paged-r0.json").read_text())
    assert server["env"]["LLAMA_KV_PAGED"] == "1" and "LLAMA_KV_PAGED" not in json.loads((run / "servers" / "stock-r0.json").read_text())["env"]
    # the paged server ran the paged attention path (the series' exit-time counter)
    from parity.gates.completion import series_counters

    assert series_counters((run / "servers" / "paged-r0.log").read_text(errors="replace"))["get_block_table"] > 0
    rep = run_parity("--artifacts", str(tmp_path / "runs"), "report", str(run), "-p", str(prof), "--title", "real paged vs stock", "--out-dir", str(tmp_path / "reports"), timeout=600)
    assert rep.returncode == 0, rep.stderr[-2000:]
    (md,) = [p for p in (tmp_path / "reports").rglob("*.md") if p.name != "BENCHMARK.md"]
    text = md.read_text()
    assert "| paged | 1 | 3 |" in text and "| stock | 4 | 3 |" in text and "Overall: **pass**" in text


def test_no_tool_loses_its_last_lines_on_a_busy_box(real_builds, tmp_path):
    """The pin keeps llama.cpp's leaked async logger: without the source fixup 10 of 20 KL runs
    lost their statistics here (three CPU hogs on a loaded box); both engines carry the fixup."""
    from parity.config import load_profile
    from parity.gates import perplexity
    from parity.models.synth import ensure_model

    from tests.conftest import kl_runs_losing_their_tail

    prof = load_profile(PROFILE)
    ref, model = ensure_model(prof, "tiny-qwen35moe-f32"), ensure_model(prof, "tiny-qwen35moe")
    text = str(perplexity.__file__).rsplit("/gates/", 1)[0] + "/defaults/kl-text.txt"
    lost = kl_runs_losing_their_tail({n: b.bin_dir for n, b in real_builds.items()}, ref, model, text, tmp_path, timeout=600)
    assert lost == 0, f"{lost} of 20 runs lost the end of their output"
