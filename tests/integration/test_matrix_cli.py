"""`parity matrix run`: the same gated campaign on an SSH host (the tests' real sshd) and a
Slurm host (the tests' real single-node Slurm) at the same time, one cross-hardware report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO, slurm_host_entry

CAMPAIGN = """name: mini-parity
steps:
  - {name: pre-gates, kind: gate, with: {phase: pre, models: [tiny], engines: [paged, stock], paths: [paged], ops: [RMS_NORM], kl: false, backend: CPU}}
  - {name: snapshot, kind: snapshot, with: {engines: [paged, stock], repeat: 3}}
  - {name: post-gates, kind: gate, always_run: true, with: {phase: post, models: [tiny], engines: [paged, stock], paths: [paged], ops: [RMS_NORM], kl: false, backend: CPU}}
"""


def parity(*args, timeout=1800):
    return subprocess.run([sys.executable, "-m", "parity", *args], capture_output=True, text=True, cwd=REPO, stdin=subprocess.DEVNULL, timeout=timeout)


@pytest.fixture
def matrix_file(sshd_server, slurm_cluster, tmp_path) -> Path:
    """Two hosts on this one machine stand for two machines: each its own workdir, GPU lock
    dir and (in its target profile) server port."""
    from sshd import free_port

    hosts = {
        "local-ssh": sshd_server.host_entry(tmp_path / "work-ssh", lock_dir=str(tmp_path / "lock-ssh")),
        "slurm-local": {**slurm_host_entry(slurm_cluster, tmp_path / "work-slurm"), "lock_dir": str(tmp_path / "lock-slurm")},
    }
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump({"extends": "smoke", "name": "matrix-hosts", "hosts": hosts}))
    for name in ("ssh", "slurm"):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump({"extends": "smoke", "name": f"smoke-{name}", "serving": {"port": free_port()}}))
    (tmp_path / "mini.yaml").write_text(CAMPAIGN)
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump({
        "name": "cpu-x2", "campaign": "mini.yaml", "profile": "hosts.yaml",
        "targets": [{"host": "local-ssh", "profile": "ssh.yaml"}, {"host": "slurm-local", "profile": "slurm.yaml"}],
    }))  # fmt: skip
    return path


@pytest.mark.slow
def test_matrix_over_an_ssh_and_a_slurm_host_writes_one_report(matrix_file, tmp_path, engine_bins, tiny_model):
    arts = tmp_path / "runs"
    r = parity("--artifacts", str(arts), "matrix", "run", str(matrix_file), "--json")
    assert r.returncode == 0, r.stderr[-4000:]
    doc = json.loads(r.stdout)
    (run,) = list(arts.iterdir())
    assert doc["run_dir"] == str(run)
    assert [t["target"] for t in doc["targets"]] == ["local-ssh", "slurm-local"] and all(t["exit_code"] == 0 for t in doc["targets"])
    assert "[local-ssh] " in r.stderr and "[slurm-local] slurm job " in r.stderr  # progress of both, labelled

    report = json.loads((run / "cross_hardware.json").read_text())
    by = {t["target"]: t for t in report["targets"]}
    for name, t in by.items():
        p = t["provenance"]
        assert p["status"] == "complete" and p["hardware_class"] == "cpu_only" and p["series_digest"]["paged"]
        assert t["gates"]["pre"] == "pass" and t["gates"]["post"] == "pass" and t["gates"]["problems"] == []
    assert by["slurm-local"]["provenance"]["slurm_job"].endswith(f"on {slurm_cluster_node(run)} (COMPLETED)")
    assert by["local-ssh"]["provenance"]["slurm_job"] is None and by["local-ssh"]["kind"] == "ssh" and by["slurm-local"]["kind"] == "slurm"
    decode = [m for m in report["medians"] if m["metric"] == "decode_agg_tps"]
    assert {m["engine"] for m in decode} == {"paged", "stock"}
    assert all(set(m["values"]) == {"local-ssh", "slurm-local"} and all(v > 0 for v in m["values"].values()) for m in decode)
    paired = [p for p in report["paired"] if p["metric"] == "decode_agg_tps"]
    assert paired and all(set(p["values"]) == {"local-ssh", "slurm-local"} for p in paired)

    md = (run / "cross_hardware.md").read_text()
    assert "| | local-ssh | slurm-local |" in md and "| hardware_class | cpu_only | cpu_only |" in md
    assert "| paged / stock | 4 | decode_agg_tps |" in md

    # the two hosts ran at the same time: each target's run started before the other ended
    (ssh_run,) = (run / "targets" / "local-ssh").iterdir()
    (slurm_run,) = (run / "targets" / "slurm-local").iterdir()
    a, b = (json.loads((p / "manifest.json").read_text()) for p in (ssh_run, slurm_run))
    assert a["started"] < b["ended"] and b["started"] < a["ended"]


def slurm_cluster_node(run: Path) -> str:
    (slurm_run,) = (run / "targets" / "slurm-local").iterdir()
    return json.loads((slurm_run / "manifest.json").read_text())["slurm"]["node"]


def test_bad_matrix_files_are_one_line_exit_2(tmp_path):
    cases = {
        "no-campaign.yaml": ({"targets": ["a"]}, "campaign: required"),
        "missing.yaml": ({"campaign": "nope.yaml", "targets": ["a"]}, "campaign file not found"),
        "twice.yaml": ({"campaign": "c.yaml", "targets": ["a", {"host": "a"}]}, "two targets named 'a'"),
        "local.yaml": ({"campaign": "c.yaml", "targets": ["localhost"]}, "targets[0].host: required"),
        "typo.yaml": ({"campaign": "c.yaml", "targets": [{"host": "a", "profle": "x"}]}, "targets[0].profle: unknown key"),
    }
    (tmp_path / "c.yaml").write_text("name: c\nsteps:\n  - {name: s, kind: shell, with: {argv: ['true']}}\n")
    for name, (doc, words) in cases.items():
        (tmp_path / name).write_text(yaml.safe_dump(doc))
        r = parity("--artifacts", str(tmp_path / "runs"), "matrix", "run", str(tmp_path / name), timeout=120)
        assert r.returncode == 2, (name, r.stderr)
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("parity: error: ") and words in r.stderr, (name, r.stderr)
    assert not (tmp_path / "runs").exists()
