"""The smoke campaign as a Slurm job (tests/slurmd.py's real single-node Slurm) against the same
campaign run locally: the run dirs hold the same files.  Its own file so that pytest-xdist runs it
beside test_slurm_cli.py (each worker starts its own cluster: about 2 s)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from test_slurm_cli import manifest, parity


@pytest.mark.slow
def test_smoke_campaign_as_a_job_has_the_files_of_a_local_run(slurm_profile, tmp_path, engine_bins, tiny_model):
    """campaigns/smoke.yaml submitted as a job (the node reuses ~/.cache/parity: same machine)
    and the same campaign run locally: the run dirs hold the same files.  One block of paged and
    stock (the block rotation is test_snapshot's; the campaign with real vLLM in it runs over
    SSH in test_remote_cli, and vLLM serving in five other tests: two more vLLM starts here
    would show nothing about Slurm), with its own lock dir and port, so neither run waits on
    another suite's smoke run."""
    from sshd import free_port

    doc = yaml.safe_load(slurm_profile.read_text())
    doc["hosts"]["slurm-local"]["lock_dir"] = str(tmp_path / "lock")
    doc["lock"] = {"dir": str(tmp_path / "lock")}
    doc["serving"] = {"repeat": 1, "port": free_port(), "engines": ["paged", "stock"]}
    prof = tmp_path / "one-block.yaml"
    prof.write_text(yaml.safe_dump(doc))
    arts, local_arts = tmp_path / "runs", tmp_path / "local-runs"
    camp = str(REPO / "campaigns" / "smoke.yaml")
    r = parity("--artifacts", str(arts), "--host", "slurm-local", "campaign", "run", camp, "--profile", str(prof), "--json", timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    # run from tmp_path so its report ledger (./reports) is its own; PYTHONPATH keeps this checkout's parity
    loc = parity("--artifacts", str(local_arts), "campaign", "run", camp, "--profile", str(prof), "--json", timeout=1800, cwd=tmp_path,
                 env={**os.environ, "PYTHONPATH": str(REPO)})
    assert loc.returncode == 0, loc.stderr[-3000:]
    (job_run,) = list(arts.iterdir())
    (local_run,) = list(local_arts.iterdir())
    assert manifest(job_run)["status"] == "complete" and manifest(job_run)["slurm"]["state"] == "COMPLETED"

    def files(run: Path) -> set[str]:
        # report phase numbers continue from each side's ledger; gates/kl-base-*.txt is the log of
        # filling the KL reference-logits cache, written only by the run that filled it (on a cold
        # cache: the job, which ran first); the serving block numbers: whether block 0 became the
        # calibration trial (and r1 followed) depends on each run's windows, not on where it ran
        names = {re.sub(r"phase\d+", "phaseN", str(p.relative_to(run))) for p in run.rglob("*") if p.is_file() and not p.name.startswith("kl-base-")}
        return {re.sub(r"-r\d+([-.])", r"-rK\1", n) for n in names}

    assert files(job_run) == files(local_run)
