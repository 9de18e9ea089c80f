"""A dry run and the real run cannot disagree, and a refused command leaves nothing behind
(issue 56: N4, N5, N6, N15, the campaign's shell step; N14, a URL's password never shown).
Every case runs the real CLI in a subprocess: the dry run, then the real run, on the same state."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

FAKES = Path(__file__).resolve().parents[1] / "fakes" / "bin"
NO_CUDA = "/usr/bin:/bin"  # no nvidia-smi on PATH (and below: no /dev/nvidia0)
needs_no_cuda = pytest.mark.skipif(os.path.exists("/dev/nvidia0") or bool(shutil.which("nvidia-smi", path=NO_CUDA)), reason="a CUDA device is here")


def error_line(stderr: str) -> str:
    (line,) = [ln for ln in stderr.splitlines() if ln.startswith("parity: error: ")]
    return line[len("parity: error: "):]


def no_go_reasons(stderr: str) -> str:
    """The reasons of a dry run's NO GO line, without its evidence suffix."""
    said = error_line(stderr)
    assert said.startswith("dry run: NO GO: "), said
    return said[len("dry run: NO GO: "):].rsplit(" (evidence: ", 1)[0]


def run_dirs(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


@pytest.fixture
def prof(tmp_path):
    p = tmp_path / "prof.yaml"
    p.write_text(f"extends: smoke\nlock: {{dir: {tmp_path / 'lock'}}}\nprofiling: {{ntg: [8, 4], npl: 2, npp: 16}}\n")
    return str(p)


# ------------------------------------------------------------------ N4: profile's tracer and --blocks


@needs_no_cuda
def test_profile_cupti_dry_run_on_a_box_without_cuda_is_the_real_runs_refusal(parity_cli, prof, tmp_path):
    runs = tmp_path / "runs"
    env = {"PATH": NO_CUDA, "PARITY_ARTIFACTS": str(runs)}
    args = ("profile", "--graph-node", "--tracer", "cupti", "-p", prof, "--model", "tiny", "--blocks", "1")
    dry = parity_cli(*args, "--dry-run", env=env)
    real = parity_cli(*args, env=env)
    assert real.returncode == 2 and "kernel tracing needs a CUDA device" in error_line(real.stderr), real.stderr
    assert dry.returncode == 2 and no_go_reasons(dry.stderr) == error_line(real.stderr), dry.stderr
    assert [d for d in run_dirs(runs) if not d.endswith("-dry-run")] == []  # the real run stopped before its run dir


def test_profile_blocks_0_is_refused_by_the_planner_dry_or_not(smoke_profile):
    """--blocks 0 (and a step's blocks/npl/npp 0) is refused, never read as profiling.blocks (3)."""
    from parity.errors import UsageError
    from parity.profiles import capture as cap

    for dry in (True, False):
        with pytest.raises(UsageError, match=r"^--blocks must be a positive integer, got 0$"):
            cap.make_plan(smoke_profile, None, None, graph_node=True, blocks=0, dry=dry)
    for key in ("blocks", "npl", "npp"):
        with pytest.raises(UsageError, match=f"must be a positive integer, got 0"):
            cap.check_step(smoke_profile, None, None, {key: 0})


def test_profile_blocks_0_on_the_command_line(parity_cli, prof, tmp_path):
    r = parity_cli("profile", "--graph-node", "--tracer", "nsys", "--blocks", "0", "--dry-run", "--json", "-p", prof, "--model", "tiny",
                   env={"PARITY_ARTIFACTS": str(tmp_path / "runs")})  # fmt: skip
    assert r.returncode == 2 and error_line(r.stderr) == "--blocks must be a positive integer, got 0" and r.stdout == ""
    assert run_dirs(tmp_path / "runs") == []


# ------------------------------------------------------------------ N5: the campaign's model files


def test_campaign_dry_run_takes_snapshots_model_rule(parity_cli, tmp_path):
    """An hf model not made yet (an empty cache): the real run makes it before the lock, so the
    campaign's dry run says GO, as snapshot's and profile's do for the same state."""
    prof = tmp_path / "smoke-here.yaml"
    prof.write_text(f"extends: smoke\nlock: {{dir: {tmp_path / 'lock'}}}\n")
    env = {"PARITY_CACHE": str(tmp_path / "empty-cache"), "PARITY_ARTIFACTS": str(tmp_path / "runs"), "PATH": f"{FAKES}{os.pathsep}{os.environ['PATH']}",
           "PARITY_NO_NVML": "1", "FAKE_NVIDIA_SMI": "h100-idle", "FAKE_DOCKER": "none"}  # fmt: skip
    campaign = parity_cli("campaign", "run", "campaigns/smoke.yaml", "--dry-run", "--json", "-p", str(prof), env=env)
    snapshot = parity_cli("snapshot", "--dry-run", "--json", "-p", str(prof), env=env)
    profile = parity_cli("profile", "--graph-node", "--tracer", "nsys", "--dry-run", "--json", "-p", str(prof), env=env)
    for r in (campaign, snapshot, profile):
        assert r.returncode == 0 and json.loads(r.stdout)["go_no_go"]["go"], r.stderr
    paths = json.loads(campaign.stdout)["go_no_go"]["paths"]
    assert paths["model tiny-hf"] == {"path": "<model tiny-hf: made on the first real run>", "ok": True}
    assert not (tmp_path / "empty-cache" / "models").exists()  # a dry run makes nothing


# ------------------------------------------------------------------ N6: an endpoint's start program


def endpoint_profile(tmp_path, start: str) -> Path:
    p = tmp_path / "ep.yaml"
    p.write_text(f"""extends: smoke
lock: {{dir: {tmp_path / 'lock'}}}
engines:
  ep: {{kind: endpoint, base_url: "http://127.0.0.1:9", start: "{start} --port 9", max_model_len: 2048, ready_probe_timeout_s: 1, ready_timeout_s: 2}}
serving: {{engines: [ep]}}
""")
    return p


def test_endpoint_start_program_missing_is_refused_by_the_real_run_as_by_the_dry_run(parity_cli, tmp_path):
    prof, runs = endpoint_profile(tmp_path, str(tmp_path / "no-such-serve")), tmp_path / "runs"
    env = {"PARITY_ARTIFACTS": str(runs)}
    args = ("snapshot", "-p", str(prof), "--npl", "1", "--repeat", "1", "--no-gates")
    dry = parity_cli(*args, "--dry-run", env=env)
    line = f"start command of ep: {tmp_path / 'no-such-serve'} does not exist"
    assert dry.returncode == 2 and no_go_reasons(dry.stderr) == line, dry.stderr
    real = parity_cli(*args, env=env, timeout=120)
    assert real.returncode == 2 and error_line(real.stderr) == line, real.stderr
    assert [d for d in run_dirs(runs) if not d.endswith("-dry-run")] == []  # no lock taken, no hardware.txt, no run dir
    assert not (tmp_path / "lock").exists() or not any((tmp_path / "lock").iterdir())
    # a campaign with that snapshot step: the same line before its first step
    camp = tmp_path / "c.yaml"
    camp.write_text(f"name: epc\nprofile: {prof}\nsteps:\n  - {{name: first, kind: shell, with: {{argv: [touch, {tmp_path / 'ran'}]}}}}\n"
                    "  - {name: snap, kind: snapshot, with: {npl: [1], repeat: 1}}\n")  # fmt: skip
    cdry = parity_cli("campaign", "run", str(camp), "--dry-run", env=env)
    creal = parity_cli("campaign", "run", str(camp), env=env, timeout=120)
    assert cdry.returncode == 2 and no_go_reasons(cdry.stderr) == line, cdry.stderr
    assert creal.returncode == 2 and error_line(creal.stderr) == line, creal.stderr
    assert not (tmp_path / "ran").exists() and [d for d in run_dirs(runs) if not d.endswith("-dry-run")] == []


# ------------------------------------------------------------------ the campaign's shell step


def test_shell_step_with_an_unknown_key_is_refused_by_the_dry_run_as_by_the_real_run(parity_cli, tmp_path):
    camp = tmp_path / "sh.yaml"
    camp.write_text(f"name: sh\nsteps:\n  - {{name: first, kind: shell, with: {{argv: [touch, {tmp_path / 'ran'}]}}}}\n"
                    "  - {name: typo, kind: shell, with: {run: echo hi}}\n")  # fmt: skip
    env = {"PARITY_ARTIFACTS": str(tmp_path / "runs")}
    dry = parity_cli("campaign", "run", str(camp), "--dry-run", "-p", "smoke", env=env)
    real = parity_cli("campaign", "run", str(camp), "-p", "smoke", env=env)
    assert real.returncode == 2 and dry.returncode == 2, (dry.stderr, real.stderr)
    assert error_line(dry.stderr) == error_line(real.stderr) == f"{camp}: steps.typo: campaign: with.run: unknown shell option (known: argv, cwd, env, log, timeout_s)"
    assert not (tmp_path / "ran").exists() and run_dirs(tmp_path / "runs") == []


# ------------------------------------------------------------------ N15: nothing left behind


@pytest.mark.parametrize("name, body", [("bad.sqlite", b"not a database\n"), ("kern.csv", b"a,b\n1,2\n"), ("empty.sqlite", b"")])
def test_profile_analyze_of_a_bad_capture_leaves_no_run_dir(parity_cli, tmp_path, name, body):
    (tmp_path / name).write_bytes(body)
    r = parity_cli("profile", "analyze", str(tmp_path / name), env={"PARITY_ARTIFACTS": str(tmp_path / "runs")})
    assert r.returncode == 2 and len([ln for ln in r.stderr.splitlines() if ln.strip()]) == 1, r.stderr
    assert not (tmp_path / "runs").exists()


def test_gate_on_an_endpoint_leaves_no_run_dir(parity_cli, tmp_path):
    prof = endpoint_profile(tmp_path, "true")
    r = parity_cli("gate", "-p", str(prof), "-e", "ep", env={"PARITY_ARTIFACTS": str(tmp_path / "runs")})
    assert r.returncode == 2 and error_line(r.stderr).startswith("gates on engine ep: the gates run an engine's own binaries, not applicable"), r.stderr
    assert not (tmp_path / "runs").exists()


# ------------------------------------------------------------------ N14: a URL's password is never shown


def test_endpoint_base_url_with_credentials_is_refused_without_its_password(parity_cli, tmp_path):
    p = tmp_path / "cred.yaml"
    p.write_text('extends: smoke\nengines:\n  ep: {kind: endpoint, base_url: "http://admin:hunter2@127.0.0.1:8000"}\nserving: {engines: [ep]}\n')
    for args in (("config", "show"), ("snapshot", "--dry-run"), ("doctor",)):
        r = parity_cli(*args, "-p", str(p), env={"PARITY_ARTIFACTS": str(tmp_path / "runs")})
        assert r.returncode == 2 and "hunter2" not in r.stderr + r.stdout and "admin" not in r.stderr, r.stderr
        assert error_line(r.stderr).endswith("engines.ep.base_url: credentials in the URL are not supported (parity's client sends none): "
                                             "give http://HOST:PORT, got 'http://<redacted>@127.0.0.1:8000'")  # fmt: skip


def test_what_parity_prints_or_writes_carries_no_url_password(tmp_path, capsys):
    from parity import redact
    from parity.artifacts import RunDir
    from parity.ui import Output

    for raw, shown in [("http://u:pw@h:1/x", "http://<redacted>@h:1/x"), ("git clone https://ghp_tok@github.com/a/b", "git clone https://<redacted>@github.com/a/b"),
                       ("http://h:1/v1?token=abc&n=2", "http://h:1/v1?token=<redacted>&n=2"), ("http://h:8000/health", "http://h:8000/health"), ("a=b c", "a=b c")]:  # fmt: skip
        assert redact.text(raw) == shown
    rd = RunDir.create(tmp_path, "x", argv=["parity", "bisect", "--repo", "https://me:s3cret@git.example/llama.cpp"],
                       config={"sources": {"s": {"url": "https://me:s3cret@git.example/l"}}, "engines": {"e": {"env": {"HF_TOKEN": "hf_s3cret"}}}})  # fmt: skip
    rd.update(error="git clone https://me:s3cret@git.example/l failed")
    text = rd.manifest_path.read_text()
    assert "s3cret" not in text and json.loads(text)["argv"][-1] == "https://<redacted>@git.example/llama.cpp"
    out = Output()
    out.info("cloning https://me:s3cret@git.example/l")
    out.warn("see http://x:s3cret@h:1")
    seen = capsys.readouterr()
    assert "s3cret" not in seen.out + seen.err and "cloning https://<redacted>@git.example/l" in seen.out
