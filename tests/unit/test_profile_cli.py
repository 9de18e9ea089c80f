"""parity profile CLI: the graph-node refusal, the exact nsys command in --dry-run, analyze."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from parity.profiles.synthetic import Kernel, write_export

GDN = "void gated_delta_net_cuda<128, false, true>(float const*)"


@pytest.fixture
def prof(tmp_path):
    p = tmp_path / "prof.yaml"
    p.write_text(f"extends: smoke\nlock: {{dir: {tmp_path / 'lock'}}}\nprofiling: {{ntg: [64, 16], npl: 4, npp: 32}}\n")
    return str(p)


@pytest.mark.parametrize("args", [["profile"], ["profile", "--no-graph-node"], ["profile", "--no-graph-node", "--dry-run"], ["profile", "--workload", "serve"]])
def test_refuses_without_graph_node(parity_cli, args):
    r = parity_cli(*args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "refusing to profile decode without --cuda-graph-trace=node" in lines[0]
    assert r.stdout == ""


def test_dry_run_shows_exact_nsys_command(parity_cli, prof, tmp_path):
    r = parity_cli("profile", "--graph-node", "--tracer", "nsys", "--blocks", "1", "--dry-run", "--json", "-p", prof, "--model", "tiny", "--npl", "2", env={"PATH": "/usr/bin:/bin", "PARITY_ARTIFACTS": str(tmp_path / "runs")})
    # the plan is printed, and the go/no-go says the real run could not start: no nsys here
    assert r.returncode == 2 and "NO GO: nsys: 'nsys' is not on PATH (profiling.nsys)" in r.stderr, r.stderr
    doc = json.loads(r.stdout)
    assert doc["tracer"] == "nsys" and doc["blocks"] == 1
    untraced = [c for c in doc["commands"] if not c["traced"]]  # the tracer's cost: the longest ntg without nsys
    assert [c["ntg"] for c in untraced] == [64] and untraced[0]["argv"][0] != "nsys"
    doc["commands"] = [c for c in doc["commands"] if c["traced"]]
    assert doc["graph_node"] is True and doc["collapsed"] is False and [c["ntg"] for c in doc["commands"]] == [64, 16]
    argv = doc["commands"][0]["argv"]
    assert argv[:8] == ["nsys", "profile", "--cuda-graph-trace=node", "--trace=cuda,nvtx", "-o", "<run>/profile/paged-bench-ntg64", "--force-overwrite", "true"]
    bench = argv[8:]
    assert Path(bench[0]).name.startswith("llama-batched-bench") or "llama-batched-bench" in bench[0]
    assert bench[bench.index("-ntg") + 1] == "64" and bench[bench.index("-npl") + 1] == "2" and bench[bench.index("-npp") + 1] == "32"
    assert doc["commands"][0]["env"]["LLAMA_KV_PAGED"] == "1"
    (run,) = (tmp_path / "runs").iterdir()  # a dry run starts nothing: its only output is its evidence
    assert run.name.endswith("-dry-run") and sorted(p.name for p in run.iterdir()) == ["go_no_go.json", "hardware.json", "hardware.txt", "manifest.json", "plan.json", "preflight.txt"]


def test_allow_collapsed_dry_run_is_marked(parity_cli, prof, tmp_path):
    import os

    fakes = Path(__file__).resolve().parents[1] / "fakes" / "bin"  # nsys, an idle GPU, no containers: a GO
    env = {"PARITY_ARTIFACTS": str(tmp_path / "runs"), "PATH": f"{fakes}{os.pathsep}{os.environ['PATH']}", "PARITY_NO_NVML": "1", "FAKE_NVIDIA_SMI": "h100-idle", "FAKE_DOCKER": "none"}
    r = parity_cli("profile", "--allow-collapsed", "--tracer", "nsys", "--dry-run", "--json", "-p", prof, "--model", "tiny", "--ntg", "8,4", env=env)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["collapsed"] is True and all("--cuda-graph-trace=node" not in c["argv"] for c in doc["commands"])
    assert doc["blocks"] == 3 and len(doc["commands"]) == 3 * 3  # profiling.blocks: per block two traced ntg and one untraced run
    assert doc["commands"][0]["label"] == "paged-bench-ntg8-collapsed-b0"


def test_gb10_dry_run_on_a_workstation_shows_the_command(parity_cli, tmp_path):
    """The GB10 model and engine source exist only on the GPU box: the plan still prints, and the
    go/no-go says this machine could not run it (exit 2: the model is missing here)."""
    r = parity_cli("profile", "--graph-node", "--tracer", "nsys", "--blocks", "1", "--dry-run", "--profile", "gb10-qwen36", "--json", env={"PARITY_ARTIFACTS": str(tmp_path / "runs")})
    assert r.returncode == 2 and "NO GO:" in r.stderr and "q36-35b-a3b-nvfp4.gguf does not exist" in r.stderr, r.stderr
    doc = [c for c in json.loads(r.stdout)["commands"] if c["traced"]]
    cmds = [c["shell"] for c in doc]
    assert len(cmds) == 2 and all("nsys profile --cuda-graph-trace=node" in c and "q36-35b-a3b-nvfp4.gguf" in c for c in cmds)
    assert all(c["env"]["LLAMA_MOE_FORCE_GRAPHS"] == "1" for c in doc)
    assert "-ntg 64" in cmds[0] and "-ntg 16" in cmds[1]


def test_bench_workload_needs_a_llama_engine(parity_cli, tmp_path):
    p = tmp_path / "v.yaml"
    p.write_text("extends: smoke\nengines: {vllm: {kind: vllm, vllm_bin: /nonexistent/vllm}}\n")
    r = parity_cli("profile", "--graph-node", "--dry-run", "-p", str(p), "--engine", "vllm")
    assert r.returncode == 2 and "--workload serve" in r.stderr


def _cap(path, ntg, npl_gdn_ns=2_000):
    ks, t = [], 0
    for _ in range(ntg):
        ks.append(Kernel(GDN, t, t + npl_gdn_ns, 1, 1))
        t += npl_gdn_ns + 100
    return str(write_export(path, ks))


def test_analyze_diff_and_compare(parity_cli, prof, tmp_path):
    long, short = _cap(tmp_path / "paged-ntg64.sqlite", 64), _cap(tmp_path / "paged-ntg16.sqlite", 16)
    other = _cap(tmp_path / "vllm-ntg64.sqlite", 64, 1_000)
    r = parity_cli("profile", "analyze", long, "--compare", other, "--diff", long, short, "--npl", "4", "--json", "-p", prof, env={"PARITY_ARTIFACTS": str(tmp_path / "runs")})
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    (d,) = doc["difference"]
    assert (d["ntg_long"], d["ntg_short"]) == (64, 16)  # read from the file names
    assert d["total"]["us_per_token"] == pytest.approx(48 * 2.0 / (48 * 4))
    assert doc["comparison"]["buckets"][0]["ratio"] == pytest.approx(0.5)
    run = Path(doc["run_dir"])
    assert (run / "profile" / "analysis.json").is_file() and (run / "profile" / "buckets.tsv").is_file() and (run / "profile" / "comparison.tsv").is_file()
    assert json.loads((run / "manifest.json").read_text())["status"] == "complete"


def test_analyze_nsys_rep_without_nsys_is_one_line(parity_cli, tmp_path):
    rep = tmp_path / "old.nsys-rep"
    rep.write_bytes(b"\0\1binary report")
    r = parity_cli("profile", "analyze", str(rep), env={"PATH": "/usr/bin:/bin", "PARITY_ARTIFACTS": str(tmp_path / "runs")})
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "nsys" in r.stderr and "not on PATH" in r.stderr


def test_analyze_missing_file(parity_cli, tmp_path):
    r = parity_cli("profile", "analyze", str(tmp_path / "nope.sqlite"), env={"PARITY_ARTIFACTS": str(tmp_path / "runs")})
    assert r.returncode == 2 and "no such file" in r.stderr and not (tmp_path / "runs").exists()


def test_cupti_dry_run_loads_the_tracer_into_the_bench_itself(parity_cli, prof, tmp_path):
    import os

    fakes = Path(__file__).resolve().parents[1] / "fakes" / "bin"  # an idle GPU, no containers; nsys on PATH, yet cupti is asked for
    env = {"PARITY_ARTIFACTS": str(tmp_path / "runs"), "PATH": f"{fakes}{os.pathsep}{os.environ['PATH']}", "PARITY_NO_NVML": "1", "FAKE_NVIDIA_SMI": "h100-idle", "FAKE_DOCKER": "none"}
    r = parity_cli("profile", "--graph-node", "--tracer", "cupti", "--engines", "paged,stock", "--blocks", "2", "--dry-run", "--json", "-p", prof, "--model", "tiny", "--ntg", "8,4", env=env)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["tracer"] == "cupti" and doc["tracer_choice"] == "asked for cupti" and doc["engines"] == ["paged", "stock"] and doc["blocks"] == 2
    traced = [c for c in doc["commands"] if c["traced"]]
    assert len(traced) == 2 * 2 * 2 and len(doc["commands"]) == 2 * 2 * 3
    for c in traced:
        assert "nsys" not in c["argv"][0] and "llama-batched-bench" in c["argv"][0]
        assert c["env"]["PARITY_CUPTI_OUT"].endswith(f"{c['label']}.cupti.%p.tsv") and "CUDA_INJECTION64_PATH" in c["env"]
    assert all("CUDA_INJECTION64_PATH" not in c["env"] for c in doc["commands"] if not c["traced"])
