"""`parity --host NAME ...` for a kind: slurm host against a real single-node Slurm
(tests/slurmd.py: Debian's slurm-wlm 22.05 and munge on localhost): one sbatch job runs
parity on the node, is followed, and its run dir comes back as an SSH run's does."""

from __future__ import annotations

import json
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from conftest import REPO, slurm_host_entry


def parity(*args, timeout=600, cwd=REPO, **kw):
    return subprocess.run([sys.executable, "-m", "parity", *args], capture_output=True, text=True, cwd=cwd,
                          stdin=subprocess.DEVNULL, timeout=timeout, **kw)


def pids(pattern: str) -> list[str]:
    return subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()


def wait_until(pred, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not pred() and time.monotonic() < deadline:
        time.sleep(0.2)
    return pred()


def manifest(run: Path) -> dict:
    return json.loads((run / "manifest.json").read_text())


def one_error_line(stderr: str) -> str:
    errors = [ln for ln in stderr.splitlines() if ln.startswith("parity: error: ")]
    assert len(errors) == 1, stderr
    assert "Traceback" not in stderr
    return errors[0]


def test_campaign_runs_as_a_job_and_its_run_dir_comes_back(slurm_cluster, slurm_profile, tmp_path):
    camp = tmp_path / "small.yaml"
    camp.write_text("name: small\nsteps:\n  - {name: synth, kind: synth, with: {models: [tiny]}}\n"
                    "  - {name: say, kind: shell, with: {argv: [sh, -c, 'echo \"job=$SLURM_JOB_ID\"; hostname; sleep 6']}}\n")  # seen RUNNING at poll_s 1
    arts = tmp_path / "runs"
    r = parity("--artifacts", str(arts), "--host", "slurm-local", "campaign", "run", str(camp), "--profile", str(slurm_profile), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)  # the job's parity printed exactly one JSON document
    (local,) = list(arts.iterdir())
    m = manifest(local)
    job = re.search(r"slurm job (\d+) submitted", r.stderr).group(1)
    assert re.search(rf"slurm job {job} RUNNING on {slurm_cluster.node}", r.stderr) and f"slurm job {job} COMPLETED" in r.stderr
    assert m["status"] == "complete" and m["slurm"]["job_id"] == job and m["slurm"]["state"] == "COMPLETED"
    assert m["slurm"]["node"] == slurm_cluster.node and m["slurm"]["partition"] == slurm_cluster.partition
    assert m["remote"]["host"] == "slurm-local" and m["remote"]["exit_code"] == 0
    assert doc["run_dir"] == m["remote"]["path"] != str(local)
    assert (local / "steps" / "say.log").read_text().startswith(f"job={job}\n")
    remote = Path(m["remote"]["path"])
    assert sorted(str(p.relative_to(remote)) for p in remote.rglob("*")) == sorted(str(p.relative_to(local)) for p in local.rglob("*"))
    assert job not in slurm_cluster.jobs()


def test_bad_partition_is_one_line_exit_2(slurm_profile, tmp_path):
    camp = tmp_path / "c.yaml"
    camp.write_text("name: c\nsteps:\n  - {name: say, kind: shell, with: {argv: ['true']}}\n")
    r = parity("--artifacts", str(tmp_path / "runs"), "--host", "slurm-bad-partition", "campaign", "run", str(camp), "--profile", str(slurm_profile))
    assert r.returncode == 2, r.stderr
    line = one_error_line(r.stderr)
    assert "--host slurm-bad-partition: sbatch: Batch job submission failed: Invalid partition name specified" in line


def test_dead_controller_is_one_line_exit_4(slurm_cluster, tmp_path):
    """A slurm.conf naming a controller port nobody listens on (hosts.NAME.slurm.env SLURM_CONF)."""
    from sshd import free_port

    conf = tmp_path / "slurm.conf"
    conf.write_text(re.sub(r"SlurmctldPort=\d+", f"SlurmctldPort={free_port()}", slurm_cluster.conf.read_text()))
    prof = tmp_path / "profile.yaml"
    prof.write_text(yaml.safe_dump({"extends": "smoke", "hosts": {"dead": slurm_host_entry(slurm_cluster, tmp_path / "work", env={"SLURM_CONF": str(conf)})}}))
    camp = tmp_path / "c.yaml"
    camp.write_text("name: c\nsteps:\n  - {name: say, kind: shell, with: {argv: ['true']}}\n")
    r = parity("--artifacts", str(tmp_path / "runs"), "--host", "dead", "campaign", "run", str(camp), "--profile", str(prof))
    assert r.returncode == 4, r.stderr
    line = one_error_line(r.stderr)
    assert "--host dead: sbatch: the Slurm controller is unreachable (Batch job submission failed: Unable to contact slurm controller" in line


def test_sigint_cancels_the_job_and_leaves_nothing(slurm_cluster, slurm_profile, tmp_path):
    m = f"{random.randint(100, 999)}.{random.randint(1000, 9999)}"
    camp = tmp_path / "sleeper.yaml"
    camp.write_text(f"name: sleeper\nsteps:\n  - {{name: nap, kind: shell, with: {{argv: [sleep, '{m}']}}}}\n")
    arts = tmp_path / "runs"
    proc = subprocess.Popen(
        [sys.executable, "-m", "parity", "--artifacts", str(arts), "--host", "slurm-local", "campaign", "run", str(camp), "--profile", str(slurm_profile)],
        cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert wait_until(lambda: pids(f"^sleep {m}"), 120), proc.communicate(timeout=5)
    assert slurm_cluster.jobs()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, err
    job = re.search(r"slurm job (\d+) submitted", err).group(1)
    assert f"cancelling slurm job {job}" in err
    assert job not in slurm_cluster.jobs()  # Slurm has no such job pending, running or completing
    assert not pids(m)  # the step's process, the job's parity, the batch shell
    (local,) = list(arts.iterdir())
    man = manifest(local)
    assert man["status"] == "interrupted" and f"slurm job {job} cancelled (scancel)" in man["error"]
    assert man["slurm"]["state"] == "CANCELLED" and man["steps"]["nap"]["status"] == "interrupted"


def test_job_over_its_time_limit_is_interrupted_and_resume_finishes_it(slurm_cluster, slurm_profile, tmp_path):
    """slurm-short has --time=1: step a (20 s) ends inside the minute, step b (75 s) cannot
    (Slurm enforces the limit within about 30 s of it); Slurm ends the job (TIMEOUT), the run is
    interrupted with Slurm's reason.  --resume on slurm-local (same cluster and workdir, no
    limit: more time, as a user would ask for) runs b only and completes the run; b sleeps only
    while its `slept` file is missing, so the resumed b is quick (its 75 s proved nothing new)."""
    slept = tmp_path / "slept"
    camp = tmp_path / "long.yaml"
    camp.write_text("name: long\nsteps:\n  - {name: a, kind: shell, with: {argv: [sleep, '20']}}\n"
                    f"  - {{name: b, kind: shell, with: {{argv: [sh, -c, 'test -e {slept} || exec sleep 75.5']}}}}\n")
    arts = tmp_path / "runs"
    rest = ("campaign", "run", str(camp), "--profile", str(slurm_profile))
    r = parity("--artifacts", str(arts), "--host", "slurm-short", *rest)
    assert r.returncode == 4, r.stderr
    line = one_error_line(r.stderr)
    (local,) = list(arts.iterdir())
    assert "was ended by Slurm: TIMEOUT (TimeLimit)" in line and f"--resume {local}" in line
    m = manifest(local)
    assert m["status"] == "interrupted" and "TIMEOUT (TimeLimit)" in m["error"]
    assert m["slurm"]["state"] == "TIMEOUT" and m["slurm"]["time_limit"] == "00:01:00"
    assert m["steps"]["a"]["status"] == "complete" and m["steps"]["b"]["status"] == "interrupted"
    assert not pids("^sleep 75.5")
    first_job = m["slurm"]["job_id"]
    slept.touch()

    r2 = parity("--artifacts", str(arts), "--host", "slurm-local", *rest, "--resume", str(local))
    assert r2.returncode == 0, r2.stderr
    assert list(arts.iterdir()) == [local]
    m2 = manifest(local)
    assert m2["status"] == "complete" and m2["resumed"] and m2["slurm"]["state"] == "COMPLETED"
    assert m2["slurm"]["job_id"] != first_job and m2["previous"]["status"] == "interrupted"
    assert m2["steps"]["b"]["status"] == "complete"
    said = r2.stdout + r2.stderr
    assert "[skip] a (shell)" in said and "[step] a" not in said and "[step] b (shell)" in said  # a was complete


def test_a_controller_restart_while_following_is_waited_out(slurm_cluster, slurm_profile, tmp_path):
    """slurmctld stops while the job runs (slurmd keeps running it) and comes back within
    controller_timeout_s: parity says so, keeps following, and the job completes."""
    camp = tmp_path / "nap.yaml"
    camp.write_text("name: nap\nsteps:\n  - {name: nap, kind: shell, with: {argv: [sleep, '30.25']}}\n")
    prof = tmp_path / "profile.yaml"  # scontrol itself retries for ~18 s before it gives up
    prof.write_text(yaml.safe_dump({"extends": "smoke", "hosts": {"patient": slurm_host_entry(slurm_cluster, tmp_path / "work", controller_timeout_s=120.0)}}))
    arts = tmp_path / "runs"
    proc = subprocess.Popen(
        [sys.executable, "-m", "parity", "--artifacts", str(arts), "--host", "patient", "campaign", "run", str(camp), "--profile", str(prof)],
        cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert wait_until(lambda: pids("^sleep 30.25"), 120)
        slurm_cluster.stop_ctld()
        time.sleep(25)
    finally:
        slurm_cluster.start_ctld()
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "the Slurm controller is unreachable" in err and "still trying for up to 120s" in err
    (local,) = list(arts.iterdir())
    assert manifest(local)["status"] == "complete" and manifest(local)["slurm"]["state"] == "COMPLETED"


def test_a_slurm_host_in_a_campaign_fan_out(slurm_cluster, slurm_profile, tmp_path):
    """hosts: [slurm-local] in a campaign: the fan-out delegates to the Slurm host as to an SSH one."""
    camp = tmp_path / "fan.yaml"
    camp.write_text("name: fan\nhosts: [slurm-local]\nsteps:\n  - {name: say, kind: shell, with: {argv: [sh, -c, 'echo \"job=$SLURM_JOB_ID\"']}}\n")
    arts = tmp_path / "runs"
    r = parity("--artifacts", str(arts), "campaign", "run", str(camp), "--profile", str(slurm_profile), "--json")
    assert r.returncode == 0, r.stderr
    (parent,) = list(arts.iterdir())
    (row,) = json.loads((parent / "hosts.json").read_text())
    assert row["host"] == "slurm-local" and row["exit_code"] == 0 and row["status"] == "complete"
    sub = parent / row["run_dir"]
    job = manifest(sub)["slurm"]["job_id"]
    assert "[slurm-local] slurm job " in r.stderr and (sub / "steps" / "say.log").read_text() == f"job={job}\n"
