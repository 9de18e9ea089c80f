"""Pure parts of remote runs: host resolution, remote argv, the remote shell text."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from conftest import DATA
from parity.config import load_profile, profile_from_dict
from parity.hosts.delegation import missing_module, remote_argv, source_archive, source_stamp, split_root
from parity.runners.ssh import inner_script, resolve_host, wrapper_script


def test_split_and_rewrite_root_options(tmp_path):
    camp = tmp_path / "my camp.yaml"
    camp.write_text("x")
    argv = ["-vv", "--host", "gb10", "--artifacts=/local/runs", "campaign", "run", str(camp), "--only", "a",
            "--resume", "/local/runs/20260101_000000_x/", "--var", "k=v", "--profile=" + str(camp)]
    assert split_root(argv)[1][0] == "campaign"
    up = lambda p: f"/r/inputs/{p.rsplit('/', 1)[-1]}"  # noqa: E731
    out = remote_argv(argv, "/r/runs", up)
    assert out == ["-vv", "--artifacts", "/r/runs", "campaign", "run", "/r/inputs/my camp.yaml", "--only", "a",
                   "--resume", "/r/runs/20260101_000000_x", "--var", "k=v", "--profile=/r/inputs/my camp.yaml"]


def test_resolve_host_profile_then_ssh_config(tmp_path, monkeypatch):
    prof = profile_from_dict({"hosts": {"box": {"hostname": "10.0.0.2", "user": "u", "identity_file": "~/k"}}})
    h = resolve_host("box", prof)
    assert (h.hostname, h.user, h.port, h.host_key_policy) == ("10.0.0.2", "u", 22, "reject") and not h.identity_file.startswith("~")
    cfg = tmp_path / "config"
    cfg.write_text("Host gb10\n  HostName dgx.example\n  User mudler\n  Port 2222\n  IdentityFile ~/.ssh/id_gb10\n"
                   "  StrictHostKeyChecking accept-new\n  UserKnownHostsFile /tmp/kh other\n")
    monkeypatch.setenv("PARITY_SSH_CONFIG", str(cfg))
    h = resolve_host("gb10", load_profile("smoke"))
    assert (h.hostname, h.user, h.port, h.host_key_policy, h.known_hosts) == ("dgx.example", "mudler", 2222, "accept-new", "/tmp/kh")
    assert h.identity_file.endswith("/.ssh/id_gb10")
    assert resolve_host("plain.example", None).hostname == "plain.example"


def _run_wrapper(script: str, **kw) -> subprocess.CompletedProcess:
    """Run like an ssh channel does: stdin stays open while the command runs (the
    wrapper's watchdog takes EOF on stdin for a dropped connection and kills the group)."""
    r, w = os.pipe()
    try:
        return subprocess.run(["sh", "-c", script], stdin=r, capture_output=True, text=True, timeout=60, **kw)
    finally:
        os.close(r)
        os.close(w)


def test_wrapper_quotes_every_word_and_reports_pgid(tmp_path):
    words = ["a b", "it's", "$(touch pwned)", "`touch pwned2`", "x;y", '"', "*", ""]
    r = _run_wrapper(wrapper_script(inner_script(["printf", "%s|", *words], {"V": "$(touch pwned3) 'q'"}, ["HOME"], str(tmp_path))), cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == "|".join(words) + "|"
    assert r.stderr.startswith("__PARITY_PGID__ ")
    assert not list(tmp_path.glob("pwned*"))
    r = _run_wrapper(wrapper_script(inner_script(["sh", "-c", "echo \"$V\"; exit 5"], {"V": "a'b"}, [], None)))
    assert (r.returncode, r.stdout) == (5, "a'b\n")


def _hup_default():
    # as sshd starts a session: a suite run under nohup (SIGHUP ignored, which exec inherits and
    # sh cannot undo) made the command ignore the watchdog's HUP, and both tests saw 137 (KILL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def test_wrapper_stops_the_command_when_stdin_closes():
    """EOF on the channel's stdin (the connection dropped) stops the command's group."""
    script = wrapper_script(inner_script(["sleep", "30"], {}, [], None), grace_s=0.5)
    p = subprocess.Popen(["sh", "-c", script], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=_hup_default)
    pgid = int(p.stderr.readline().split()[1])
    deadline = time.monotonic() + 10
    while os.getpgid(pgid) != pgid and time.monotonic() < deadline:  # the inner command has its own group
        time.sleep(0.05)
    p.stdin.close()
    assert p.wait(timeout=20) == 129  # SIGHUP: a dropped connection is a hangup
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)


def test_wrapper_stops_the_command_when_stdin_is_at_eof_from_the_start():
    """The watchdog can see EOF before the command has made its own group: it must wait
    for the group, not kill a group that does not exist yet (missed 16 of 20 before)."""
    script = wrapper_script(inner_script(["sleep", "30"], {}, [], None), grace_s=0.5)
    for _ in range(10):
        r = subprocess.run(["sh", "-c", script], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=20, preexec_fn=_hup_default)
        assert r.returncode == 129, r.stderr  # SIGHUP


def test_source_archive_is_stamped_by_content():
    data, stamp = source_archive()
    again, stamp2 = source_archive()
    assert stamp == stamp2 and len(stamp) == 16 and data[:2] == b"\x1f\x8b"
    import io
    import tarfile

    names = tarfile.open(fileobj=io.BytesIO(data)).getnames()
    assert "parity/cli/__init__.py" in names and "pyproject.toml" in names and "campaigns/smoke.yaml" in names
    assert not any(n.startswith(("tests/", "docs/", "benchmarks/")) for n in names)
    assert stamp == source_stamp()


def test_the_stamp_follows_what_is_shipped_only(tmp_path):
    for name, text in {"parity/x.py": "A = 1\n", "docs/a.md": "one\n", "pyproject.toml": "[project]\n"}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    first = source_stamp(tmp_path)
    (tmp_path / "docs" / "a.md").write_text("two\n")
    assert source_stamp(tmp_path) == first  # a docs edit leaves the remote copy current
    (tmp_path / "parity" / "x.py").write_text("A = 2\n")
    assert source_stamp(tmp_path) != first
    assert source_archive(tmp_path)[1] == source_stamp(tmp_path)


def test_missing_module_from_the_bootstrap_import_check():
    captured = (DATA / "remote" / "import-check-no-typer.out").read_text()
    assert missing_module(captured) == "typer"
    assert missing_module("Traceback ...\nAttributeError: module 'yaml' has no attribute 'x'") is None
