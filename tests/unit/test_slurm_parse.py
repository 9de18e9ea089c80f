"""parity.hosts.slurm.commands parsers on output captured from a real Slurm 22.05 (tests/data/slurm/,
from the single-node cluster of tests/slurmd.py), and the Slurm host's profile section."""

from __future__ import annotations

import pytest
import yaml

from conftest import DATA
from parity.errors import ConfigError
from parity.hosts.slurm import commands as sl

S = DATA / "slurm"


def read(name: str) -> str:
    return (S / name).read_text()


def test_sbatch_parsable_job_id():
    assert sl.parse_sbatch(read("sbatch-parsable.txt")) == read("sbatch-parsable.txt").strip()
    assert sl.parse_sbatch("812;cluster-b\n") == "812"
    with pytest.raises(ValueError):
        sl.parse_sbatch(read("sbatch-bad-partition.txt"))


@pytest.mark.parametrize(
    "name, state, reason, rc, sig, node, terminal",
    [
        ("scontrol-job-pending.txt", "PENDING", "Resources", 0, 0, "", False),
        ("scontrol-job-running.txt", "RUNNING", "", 0, 0, "vm", False),
        ("scontrol-job-completed.txt", "COMPLETED", "", 0, 0, "vm", True),
        ("scontrol-job-timeout.txt", "TIMEOUT", "TimeLimit", 143, 0, "vm", True),
        ("scontrol-job-cancelled.txt", "CANCELLED", "", 0, 15, "vm", True),
        ("scontrol-job-cancelled-pending.txt", "CANCELLED", "Resources", 0, 0, "", True),
    ],
)
def test_scontrol_show_job(name, state, reason, rc, sig, node, terminal):
    info = sl.parse_scontrol_job(read(name))
    assert (info.state, info.reason, info.exit_code, info.signal, info.node, info.terminal) == (state, reason, rc, sig, node, terminal)
    assert info.partition == "parity" and info.job_id.isdigit() and info.name.startswith("cap-")


def test_scontrol_fields_with_spaces_and_time_limits():
    t = sl.parse_scontrol_job(read("scontrol-job-timeout.txt"))
    assert (t.run_time, t.time_limit) == ("00:01:08", "00:01:00")
    f = sl.parse_keyvals(read("scontrol-job-running.txt"))
    assert f["UserId"] == "root(0)" and f["AllocNode:Sid"].startswith("localhost:") and f["Command"] == "(null)"


def test_unknown_job_and_disabled_accounting_are_none():
    assert sl.parse_scontrol_job(read("scontrol-job-invalid.txt")) is None
    assert sl.parse_sacct(read("sacct-disabled.txt")) is None


def test_sacct_line():
    info = sl.parse_sacct("41|CANCELLED by 0|0:15|gpu-node-3|00:12:01\n")
    assert (info.job_id, info.state, info.signal, info.node, info.run_time) == ("41", "CANCELLED", 15, "gpu-node-3", "00:12:01")


@pytest.mark.parametrize(
    "name, kind",
    [
        ("sbatch-bad-partition.txt", "usage"),
        ("sbatch-bad-gres.txt", "usage"),
        ("sbatch-controller-down.txt", "unreachable"),
        ("scontrol-controller-down.txt", "unreachable"),
        ("scontrol-job-invalid.txt", "other"),
    ],
)
def test_errors_are_classified(name, kind):
    assert sl.classify_error(read(name)) == kind


def test_error_line_drops_the_tool_prefix():
    assert sl.error_line(read("sbatch-bad-partition.txt")) == "Batch job submission failed: Invalid partition name specified"


def test_sbatch_argv_from_the_host_section():
    from parity.config import SlurmConfig

    cfg = SlurmConfig(partition="gpu", gres="gpu:b200:1", account="proj", time="02:00:00", sbatch_args=["--exclusive"])
    argv = sl.sbatch_argv("/w/job.sh", job_name="parity-x", output="/w/o", error="/w/e", chdir="/w/src", cfg=cfg)
    assert argv[:2] == ["sbatch", "--parsable"] and argv[-2:] == ["--exclusive", "/w/job.sh"]
    assert {"--partition=gpu", "--gres=gpu:b200:1", "--account=proj", "--time=02:00:00", "--chdir=/w/src"} <= set(argv)
    assert not any(a.startswith(("--qos", "--gpus")) for a in argv)


def test_profile_slurm_host(tmp_path):
    from parity.config import load_profile

    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump({"extends": "smoke", "hosts": {"b200": {"kind": "slurm", "slurm": {"partition": "gpu", "time": "1-00:00:00"}}, "plain": {"kind": "slurm"}}}))
    prof = load_profile(str(p))
    assert prof.host("b200").slurm.partition == "gpu" and prof.host("plain").slurm.poll_s == 10.0
    for bad, key in (({"kind": "slurm", "slurm": {"time": "soon"}}, "hosts.x.slurm.time"), ({"kind": "slurm", "slurm": {"poll_s": 0}}, "hosts.x.slurm.poll_s"),
                     ({"slurm": {"partition": "gpu"}}, "hosts.x.slurm"), ({"kind": "pbs"}, "hosts.x.kind")):  # fmt: skip
        p.write_text(yaml.safe_dump({"extends": "smoke", "hosts": {"x": bad}}))
        with pytest.raises(ConfigError) as e:
            load_profile(str(p))
        assert key in str(e.value)


def test_run_inside_a_job_records_it():
    from parity.artifacts import slurm_job

    assert slurm_job({"PATH": "/bin"}) == {}
    env = {"SLURM_JOB_ID": "12", "SLURM_JOB_PARTITION": "gpu", "SLURMD_NODENAME": "n3", "SLURM_CLUSTER_NAME": "c"}
    assert slurm_job(env) == {"slurm": {"job_id": "12", "partition": "gpu", "node": "n3", "cluster": "c"}}


def test_job_script_quotes_the_command_and_sets_the_delegation_env(tmp_path):
    from parity.config import HostConfig, SlurmConfig
    from parity.hosts.slurm.job import Submission
    from parity.hosts.slurm.login import LocalLogin

    cfg = HostConfig(kind="slurm", slurm=SlurmConfig(), workdir=str(tmp_path), lock_dir="/locks/gpu")
    sub = Submission(LocalLogin("b200", cfg), cfg, "", True)
    sub.files = {"run_dir": "/w/jobs/1/run_dir"}
    text = sub.script(["/w/venv/bin/python", "-m", "parity", "campaign", "run", "it's a file.yaml"], "/w/src")
    lines = text.splitlines()
    assert lines[0] == "#!/bin/sh" and "cd /w/src || exit 2" in lines and "unset PARITY_PROC_TAG" in lines
    assert "export PARITY_RUN_DIR_FILE=/w/jobs/1/run_dir" in lines and "export PARITY_LOCK_DIR=/locks/gpu" in lines
    assert lines[-1] == "exec /w/venv/bin/python -m parity campaign run 'it'\"'\"'s a file.yaml'"


def test_a_run_slurm_ended_is_interrupted_with_its_reason(tmp_path):
    from parity.artifacts import RunDir
    from parity.hosts.slurm.job import job_name, record_job

    assert job_name(["--artifacts", "x", "campaign", "run", "f.yaml", "--json"]) == "parity-campaign-run"
    timeout = sl.parse_scontrol_job(read("scontrol-job-timeout.txt"))
    rd = RunDir.create(tmp_path, "long", argv=["parity"], kind="campaign")
    rd.finish("interrupted", "interrupted by SIGTERM")
    record_job(rd.path, "2", timeout, None)
    m = rd.manifest()
    assert m["status"] == "interrupted" and m["slurm"]["state"] == "TIMEOUT" and m["slurm"]["job_id"] == "2"
    assert m["error"].startswith("slurm job 2 was ended by Slurm: TIMEOUT (TimeLimit) after 00:01:08 of 00:01:00") and "SIGTERM" in m["error"]
    killed = RunDir.create(tmp_path, "killed", argv=["parity"], kind="campaign")  # its parity got SIGKILL first
    killed.record_step("a", "complete")
    killed.record_step("b", "running")
    record_job(killed.path, "3", timeout, None)
    m = killed.manifest()
    assert m["status"] == "interrupted" and m["steps"]["a"]["status"] == "complete" and m["steps"]["b"]["status"] == "interrupted"
    done = RunDir.create(tmp_path, "ok", argv=["parity"], kind="campaign")
    done.finish("complete")
    record_job(done.path, "1", sl.parse_scontrol_job(read("scontrol-job-completed.txt")), None)
    assert done.manifest()["status"] == "complete" and done.manifest()["slurm"]["state"] == "COMPLETED"
