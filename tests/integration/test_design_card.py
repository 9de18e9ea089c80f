"""The design card's commands as the users type them, with their GB10 profile made the default
($PARITY_PROFILE=gb10-qwen36): each plans and answers go / no-go -- on a box without their files,
a NO GO that names the missing files -- and never an option error.  `parity gate --dry-run` shows
the gate set it would run; a `--npl` above serving.parallel sizes the server for the largest N.
Fakes: tests/fakes/bin (nvidia-smi as an idle GB10, docker with nothing running, nsys)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from parity.config import load_profile

REPO = Path(__file__).resolve().parents[2]
FAKES = REPO / "tests" / "fakes" / "bin"
GB10_SOURCE = Path("~/LocalAI/backend/cpp/llama-cpp-localai-paged/Makefile").expanduser()  # gb10-qwen36's source
CARD = [["gate", "--model", "moe"], ["snapshot", "--npl", "8,32,128"], ["profile", "--graph-node"]]


def parity(tmp_path: Path, *args, fakes: bool = True, **env) -> subprocess.CompletedProcess:
    """The CLI in tmp_path (no parity.yaml above it) with a lock dir and artifacts of the test's own."""
    e = dict(os.environ, PYTHONPATH=str(REPO), PARITY_ARTIFACTS=str(tmp_path / "runs"),
             PARITY_LOCK_DIR=str(tmp_path / "lock"), PARITY_NO_NVML="1", **env)
    if fakes:
        e.update(PATH=f"{FAKES}{os.pathsep}{os.environ['PATH']}", FAKE_NVIDIA_SMI="gb10-idle", FAKE_DOCKER="none")
    e.pop("PARITY_GPU_LOCK", None)
    return subprocess.run([sys.executable, "-m", "parity", *args], capture_output=True, text=True, cwd=tmp_path, env=e,
                          timeout=300, stdin=subprocess.DEVNULL)


def error_line(r) -> str:
    lines = r.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("parity: error: ") and "Traceback" not in r.stderr, r.stderr[-2000:]
    return lines[-1]


@pytest.mark.parametrize("card", CARD, ids=[c[0] for c in CARD])
def test_the_cards_commands_plan_on_the_gb10_default(tmp_path, card):
    r = parity(tmp_path, *card, "--dry-run", "--json", PARITY_PROFILE="gb10-qwen36")
    doc = json.loads(r.stdout)  # the plan is printed whatever the verdict
    g = doc["go_no_go"]
    assert json.loads((Path(doc["run_dir"]) / "manifest.json").read_text())["config"]["name"] == "gb10-qwen36"
    if r.returncode == 0:  # the GB10 itself, its files in place
        assert g["go"] is True
        return
    assert r.returncode == 2 and g["exit_code"] == 2, r.stderr[-2000:]
    assert "dry run: NO GO" in error_line(r)
    missing = [c["path"] for c in g["paths"].values() if not c["ok"]]
    assert missing and {x["kind"] for x in g["reasons"]} <= {"path", "port"}
    assert all(p.startswith("<") or not Path(p).exists() for p in missing), missing  # each names a file not there


def test_gate_dry_run_on_gb10_names_the_checks_and_the_md5s_they_are_held_to(tmp_path):
    r = parity(tmp_path, "gate", "--model", "moe", "--path", "all", "--kl", "--dry-run", "--json",
               PARITY_PROFILE="gb10-qwen36")
    doc = json.loads(r.stdout)
    md5 = {c["path"]: c for c in doc["checks"] if c["kind"] == "md5"}
    assert md5["paged"]["expected"].startswith("8cb0ce23777bf55f92f63d0292c756b0 ")  # the canonical md5s per path
    assert md5["nonpaged"]["expected"].startswith("07db32c2bcb78d17a43ed18bc22705cd ")
    (cmd,) = md5["paged"]["commands"]
    argv = cmd["argv"]
    assert argv[argv.index("-m") + 1].endswith("q36-35b-a3b-nvfp4.gguf") and argv[argv.index("-c") + 1] == "4096"
    assert "-no-cnv" not in argv  # the chat form, as the canonical md5s were recorded
    assert cmd["env"]["LLAMA_KV_PAGED"] == "1" and "LLAMA_KV_PAGED" not in md5["nonpaged"]["commands"][0]["env"]
    ops = [c["op"] for c in doc["checks"] if c["kind"] == "op"]
    assert "MUL_MAT_ID" in ops and all(c["commands"][0]["argv"][-2:] == ["-b", "CUDA0"] for c in doc["checks"]
                                       if c["kind"] == "op")
    kl = [c for c in doc["checks"] if c["kind"] == "kl"]
    assert kl and "KLD <= KLD(moe/nonpaged)" in kl[0]["expected"]  # the non-paged path bounds the paged one
    assert len(kl[0]["commands"]) == 3  # the reference logits, the candidate, the baseline
    assert doc["files"]["model moe-f16"] == load_profile("gb10-qwen36").models["moe-f16"].path  # the KL reference
    assert doc["lock"] == str(tmp_path / "lock")
    assert not (tmp_path / "lock").exists()  # a dry run takes no lock


@pytest.mark.skipif(GB10_SOURCE.exists(), reason="the GB10's own LocalAI checkout is here: the real commands would run")
@pytest.mark.parametrize("card", CARD, ids=[c[0] for c in CARD])
def test_the_cards_real_runs_stop_on_the_missing_source_before_the_lock(tmp_path, card):
    r = parity(tmp_path, *card, PARITY_PROFILE="gb10-qwen36")
    assert r.returncode == 2, r.stderr[-2000:]
    assert f"{GB10_SOURCE.parent}: no Makefile to read LLAMA_VERSION from" in error_line(r)
    assert not (tmp_path / "lock").exists()


def test_gate_dry_run_on_smoke_is_go_and_prints_every_command(tmp_path):
    r = parity(tmp_path, "gate", "--kl", "--dry-run", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert doc["go_no_go"]["go"] is True and doc["engines"] == ["paged", "stock"]
    md5, *ops_and_kl = doc["checks"]
    assert (md5["kind"], md5["model"], md5["path"]) == ("md5", "tiny", "paged")
    ref, gated = md5["commands"]  # the stock build defines the tiny model's md5 in the same session
    assert "reference build stock" in md5["expected"]
    assert "LLAMA_KV_PAGED" not in ref["env"] and gated["env"]["LLAMA_KV_PAGED"] == "1"
    assert [c["op"] for c in ops_and_kl if c["kind"] == "op"] == ["RMS_NORM", "SOFT_MAX"]
    assert ops_and_kl[1]["commands"][0]["argv"][1:] == ["-o", "SOFT_MAX", "-b", "CPU", "-p", "m_prec=f16"]  # op_params
    (run,) = (tmp_path / "runs").iterdir()
    assert json.loads((run / "manifest.json").read_text())["status"] == "dry-run" and (run / "plan.json").is_file()
    human = parity(tmp_path, "gate", "--dry-run")
    assert human.returncode == 0 and "gate plan: 3 check(s) on engine paged; builds: paged, stock" in human.stdout
    assert "# op SOFT_MAX: expected every case passes, no retry" in human.stdout and "go/no-go: GO" in human.stdout


def test_gate_dry_run_refuses_record(tmp_path):
    r = parity(tmp_path, "gate", "--record", "--dry-run")
    assert r.returncode == 2 and "--record writes the registry: it takes a real run, not --dry-run" in error_line(r)
    assert not (tmp_path / "runs").exists()


def test_npl_above_parallel_sizes_the_server(tmp_path):
    """smoke: serving.parallel 4, ctx 8192, ptok 64 + gen 256 a request: N=16 fits 16 slots."""
    r = parity(tmp_path, "snapshot", "--npl", "8,16", "--dry-run", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert doc["shape"]["parallel"] == 16 and doc["parallel_sized"].startswith("--parallel 16 (serving.parallel 4)")
    paged = next(c for c in doc["commands"] if c["engine"] == "paged")
    assert paged["argv"][paged["argv"].index("--parallel") + 1] == "16" and paged["request_limit"] == 8192 // 16
    human = parity(tmp_path, "snapshot", "--npl", "8,16", "--dry-run")
    assert "--parallel 16 (serving.parallel 4): sized for the largest N" in human.stdout


@pytest.mark.parametrize(
    "args, says",
    [
        (["--npl", "8,32,128"], "N=128 exceeds serving.parallel 4, and at --parallel 128 engine paged gives a "
                                "request 64 tokens (serving.ctx 8192 over 128 slots), short of ptok 64 + gen 256: "
                                "raise serving.ctx (--ctx) to 40960, or lower --npl"),
        (["--npl", "8", "--parallel", "4"], "N=8 exceeds --parallel 4: engine paged would queue requests; raise "
                                            "--parallel to 8 (or leave it out: parity sizes it for the largest N)"),
    ],
)
def test_npl_the_server_cannot_hold_names_the_key_to_raise(tmp_path, args, says):
    r = parity(tmp_path, "snapshot", *args, "--dry-run")
    assert r.returncode == 2 and error_line(r) == f"parity: error: {says}"
    assert not (tmp_path / "runs").exists()
    r = parity(tmp_path, "snapshot", "--npl", "8,32,128", "--ctx", "40960", "--dry-run", "--json")  # the key raised
    assert r.returncode == 0 and json.loads(r.stdout)["shape"]["parallel"] == 128, r.stderr[-2000:]
