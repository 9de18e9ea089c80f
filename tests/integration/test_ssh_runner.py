"""SSHRunner against a real sshd on 127.0.0.1 (tests/sshd.py)."""

from __future__ import annotations

import random
import subprocess
import threading
import time

import pytest

from parity.config import load_profile
from parity.errors import InfraError, UsageError

HOSTILE = ["a b", "it's", 'say "hi"', "x;y", "$(id)", "`id`", "back\\slash", "*", "~", "-n", ""]


def remote_pids(pattern: str) -> list[str]:
    """PIDs whose command line matches pattern (the server is this machine)."""
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
    return out


def wait_gone(pattern: str, timeout: float = 10.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while (pids := remote_pids(pattern)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return pids


@pytest.fixture
def runner(ssh_profile):
    from parity.runners.ssh import SSHRunner

    r = SSHRunner.for_host("local-ssh", load_profile(str(ssh_profile)))
    yield r
    r.close()


def marker() -> str:
    return f"{random.randint(100, 999)}.{random.randint(1000, 9999)}"


def test_run_streams_lines_and_exit_codes(runner):
    lines = []
    res = runner.run(["sh", "-c", "echo one; echo two >&2; echo three; exit 7"], on_line=lambda s, l: lines.append((s, l)))
    assert res.rc == 7 and not res.ok
    assert res.stdout == "one\nthree\n" and res.stderr == "two\n"  # the pgid marker line is not output
    assert ("stdout", "one") in lines and ("stderr", "two") in lines and ("stdout", "three") in lines
    assert runner.run(["true"]).rc == 0
    missing = runner.run(["parity-no-such-command"])
    assert missing.rc == 127 and "not found" in missing.stderr


def test_lines_arrive_while_the_command_runs(runner):
    seen = []
    res = runner.run(["sh", "-c", "echo first; sleep 1; echo second"], on_line=lambda s, l: seen.append((l, time.monotonic())))
    assert res.ok and [l for l, _ in seen] == ["first", "second"]
    assert seen[1][1] - seen[0][1] > 0.7  # streamed, not delivered at the end


def test_hostile_arguments_env_and_cwd_are_quoted(runner, tmp_path):
    odd_dir = tmp_path / "dir with 'quotes' and $(x);"
    odd_dir.mkdir()
    hostile = HOSTILE + [f"$(touch {tmp_path}/pwned)", f"; touch {tmp_path}/pwned2"]
    res = runner.run(["printf", "%s\\n", *hostile], env={"ODD": "v a l;$(id)'\""}, cwd=str(odd_dir))
    assert res.ok, res.stderr
    assert res.stdout.split("\n")[:-1] == hostile
    res = runner.run(["sh", "-c", 'printf "%s|%s" "$ODD" "$PWD"'], env={"ODD": "v a l;$(id)'\""}, cwd=str(odd_dir))
    assert res.stdout == f"v a l;$(id)'\"|{odd_dir}"
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()
    with pytest.raises(UsageError):
        runner.run(["true"], env={"BAD NAME": "x"})
    assert runner.run(["cat"], input_text="line 1\nline 'two'\n").stdout == "line 1\nline 'two'\n"


def test_timeout_kills_the_remote_group(runner):
    m = marker()
    t0 = time.monotonic()
    res = runner.run(["sh", "-c", f"sleep {m} & sleep {m}; echo never"], timeout=1.0)
    assert res.timed_out and res.rc is None and time.monotonic() - t0 < float(m)  # not waited for the sleeps
    assert "never" not in res.stdout
    assert wait_gone(f"^sleep {m}") == [] and wait_gone(m) == []


def test_interrupt_kills_the_remote_group(runner):
    m = marker()
    errors = []

    def go():
        try:
            runner.run(["sleep", m], on_line=lambda s, l: None)
        except KeyboardInterrupt:
            errors.append("interrupted")

    from parity.runners import ssh

    t = threading.Thread(target=go)
    t.start()
    deadline = time.monotonic() + 10
    while not remote_pids(f"^sleep {m}") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert remote_pids(f"^sleep {m}")
    ssh.abort_event.set()
    try:
        t.join(15)
    finally:
        ssh.abort_event.clear()
    assert errors == ["interrupted"]
    assert wait_gone(f"^sleep {m}") == []


def test_dropped_connection_leaves_nothing_behind(runner):
    m = marker()
    out = []

    def go():
        try:
            runner.run(["sh", "-c", f"sleep {m} & sleep {m}"])
        except InfraError as e:
            out.append(str(e))

    t = threading.Thread(target=go)
    t.start()
    deadline = time.monotonic() + 10
    while len(remote_pids(f"^sleep {m}")) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(remote_pids(f"^sleep {m}")) == 2
    runner._client.get_transport().close()  # the network goes away
    t.join(15)
    assert out and "connection lost" in out[0]
    assert wait_gone(f"^sleep {m}") == []  # the remote watchdog killed the group
    assert wait_gone(m) == []  # and the wrapper shells are gone too


def test_spawn_and_stop(runner, tmp_path):
    m = marker()
    log = tmp_path / "spawn log.txt"
    p = runner.spawn(["sh", "-c", f"echo started; exec sleep {m}"], log_path=str(log))
    assert p.pid > 0 and p.poll() is None
    deadline = time.monotonic() + 5
    while "started" not in (log.read_text() if log.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert log.read_text() == "started\n"
    p.stop(grace_s=2)
    assert wait_gone(f"^sleep {m}") == []
    assert p.poll() is not None


def test_put_get_recursive_and_files(runner, tmp_path):
    src = tmp_path / "src dir;$(x)"
    (src / "sub 'q'").mkdir(parents=True)
    (src / "a.txt").write_text("alpha\n")
    (src / "sub 'q'" / "b.bin").write_bytes(bytes(range(256)) * 10)
    (src / "run.sh").write_text("#!/bin/sh\necho ok\n")
    (src / "run.sh").chmod(0o755)
    remote = f"{runner.expand(runner.cfg.workdir)}/put test/x"
    runner.put(str(src), remote)
    assert runner.exists(f"{remote}/sub 'q'/b.bin")
    assert runner.run([f"{remote}/run.sh"]).stdout == "ok\n"
    back = tmp_path / "back"
    runner.get(remote, str(back))
    assert (back / "a.txt").read_text() == "alpha\n"
    assert (back / "sub 'q'" / "b.bin").read_bytes() == bytes(range(256)) * 10
    assert (back / "run.sh").stat().st_mode & 0o111
    runner.write_text(f"{remote}/w.txt", "written 'text'\n")
    assert runner.read_text(f"{remote}/w.txt") == "written 'text'\n"
    assert not runner.exists(f"{remote}/nope")
    assert runner.which("sh") and runner.which("parity-no-such-tool") is None
    assert runner.expand("~/x") == runner.home().rstrip("/") + "/x"
    with pytest.raises(InfraError):
        runner.get(f"{remote}/nope", str(tmp_path / "nope"))


@pytest.mark.parametrize(
    "host, words",
    [
        ("closed-port", "connection refused"),
        ("wrong-key", "authentication refused"),
        ("unknown-key", "unknown host key"),
    ],
)
def test_bad_hosts_are_usage_errors(ssh_profile, host, words):
    from parity.runners.ssh import SSHRunner

    r = SSHRunner.for_host(host, load_profile(str(ssh_profile)))
    with pytest.raises(UsageError) as e:
        r.run(["true"])
    assert words in str(e.value) and "\n" not in str(e.value)


def test_accept_new_records_the_key_and_ssh_config_hosts_work(ssh_profile, sshd_server, monkeypatch):
    from parity.runners.ssh import SSHRunner

    prof = load_profile(str(ssh_profile))
    known = prof.hosts["accept-new"].known_hosts
    r = SSHRunner.for_host("accept-new", prof)
    assert r.run(["true"]).ok
    r.close()
    assert f"[127.0.0.1]:{sshd_server.port} ssh-ed25519" in open(known).read()
    # a host that is only in an ssh config file (HostName, Port, User, IdentityFile, UserKnownHostsFile)
    monkeypatch.setenv("PARITY_SSH_CONFIG", str(sshd_server.ssh_config))
    r = SSHRunner.for_host("local-ssh", None)
    assert r.run(["echo", "via ssh config"]).stdout == "via ssh config\n"
    r.close()
