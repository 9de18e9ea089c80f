"""Every wait has a bound named in the config (issue 17, case 6): the defaults bound every
*_s field, and `parity lock run` stops its command at lock.run_timeout_s with an error that
names the bound, releasing the lock."""

from __future__ import annotations

import os

import pytest

from parity.config import HostConfig, available_profiles, load_profile
from parity.decode import is_record, record_fields
from tests.conftest import run_parity


def _seconds_fields(obj, prefix=""):
    for name in record_fields(obj):
        v = getattr(obj, name)
        if is_record(v):
            yield from _seconds_fields(v, f"{prefix}{name}.")
        elif isinstance(v, dict):
            for k, item in v.items():
                if is_record(item):
                    yield from _seconds_fields(item, f"{prefix}{name}.{k}.")
        elif name.endswith("_s"):
            yield f"{prefix}{name}", v


@pytest.mark.parametrize("name", available_profiles())
def test_every_default_wait_is_bounded(name):
    prof = load_profile(name)
    prof.hosts.setdefault("default-host", HostConfig(hostname="h"))
    fields = dict(_seconds_fields(prof))
    assert "hosts.default-host.command_timeout_s" in fields and "lock.run_timeout_s" in fields
    unbounded = {k: v for k, v in fields.items() if not (isinstance(v, (int, float)) and v > 0) and not k.endswith("keepalive_s")}
    assert not unbounded


def test_lock_run_stops_its_command_at_run_timeout_s(tmp_path):
    prof = tmp_path / "p.yaml"
    prof.write_text(f"extends: smoke\nlock: {{dir: {tmp_path / 'lk'}, preflight: false, poll_s: 0.2, run_timeout_s: 1}}\n")
    marker = tmp_path / "child.pid"
    r = run_parity("lock", "run", "--profile", str(prof), "--", "sh", "-c", f'echo $$ > {marker}; exec sleep 120', timeout=120)
    assert r.returncode == 4, r.stderr
    assert "lock.run_timeout_s" in r.stderr and "process group was stopped" in r.stderr and "Traceback" not in r.stderr
    assert (tmp_path / "lk" / "owner").read_text().startswith("FREE released-by-")
    pid = int(marker.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_remote_bootstrap_step_is_bounded_by_bootstrap_timeout_s(ssh_profile, tmp_path):
    """Each bootstrap step runs under hosts.NAME.bootstrap_timeout_s; hitting it is exit 4
    naming the bound and the step."""
    import yaml

    doc = yaml.safe_load(ssh_profile.read_text())
    doc["hosts"]["local-ssh"].update(workdir=str(tmp_path / "fresh-workdir"), bootstrap_timeout_s=0.001)
    prof = tmp_path / "p.yaml"
    prof.write_text(yaml.safe_dump(doc))
    r = run_parity("--host", "local-ssh", "config", "show", "--profile", str(prof), timeout=300)
    assert r.returncode == 4, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("parity: error: --host local-ssh: could not unpack the source archive") and "hosts.local-ssh.bootstrap_timeout_s (0.001s)" in last
    assert "Traceback" not in r.stderr
