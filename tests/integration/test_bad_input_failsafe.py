"""Bad input from issue 17 (cases 4 and 6) through the real CLI: exactly one line on
stderr, exit 2, no traceback -- out-of-range ports and timeouts, unusable --artifacts and
lock dirs, a non-UTF-8 profile, and an SSH peer that accepts and never sends a banner."""

from __future__ import annotations

import socket
import sys
import textwrap
import threading

import pytest
import yaml

from tests.conftest import run_parity

CAMPAIGN = "steps:\n  - {name: t, kind: shell, with: {argv: ['true']}}\n"

# (id, argv, files to write under tmp, substring the one line must contain)
CASES = [
    ("serving-port-70000", ["config", "show", "--profile", "{tmp}/p.yaml"], {"p.yaml": "extends: smoke\nserving: {port: 70000}\n"}, "serving.port: not a TCP port (1..65535): 70000"),
    ("host-port-0", ["config", "show", "--profile", "{tmp}/p.yaml"], {"p.yaml": "extends: smoke\nhosts: {dgx: {hostname: dgx, port: 0}}\n"}, "hosts.dgx.port: not a TCP port"),
    ("gates-timeout-0", ["config", "show", "--profile", "{tmp}/p.yaml"], {"p.yaml": "extends: smoke\ngates: {timeout_s: 0}\n"}, "gates.timeout_s: must be a finite number of seconds > 0, got 0"),
    ("op-timeout-negative", ["config", "show", "--profile", "{tmp}/p.yaml"], {"p.yaml": "extends: smoke\ngates: {op_timeout_s: -1}\n"}, "gates.op_timeout_s: must be a finite number of seconds > 0"),
    ("kl-timeout-0", ["config", "show", "--profile", "{tmp}/p.yaml"], {"p.yaml": "extends: smoke\ngates: {kl: {timeout_s: 0}}\n"}, "gates.kl.timeout_s: must be"),
    ("ready-timeout-0", ["config", "show", "--profile", "{tmp}/p.yaml"], {"p.yaml": "extends: smoke\nengines: {paged: {ready_timeout_s: 0}}\n"}, "engines.paged.ready_timeout_s: must be"),
    ("request-timeout-nan", ["config", "show", "--profile", "{tmp}/p.yaml"], {"p.yaml": "extends: smoke\nserving: {request_timeout_s: .nan}\n"}, "serving.request_timeout_s: must be a finite number"),
    ("lock-poll-inf", ["config", "show", "--profile", "{tmp}/p.yaml"], {"p.yaml": "extends: smoke\nlock: {poll_s: .inf}\n"}, "lock.poll_s: must be a finite number"),
    ("connect-timeout-0", ["config", "show", "--profile", "{tmp}/p.yaml"], {"p.yaml": "extends: smoke\nhosts: {dgx: {hostname: dgx, connect_timeout_s: 0}}\n"}, "hosts.dgx.connect_timeout_s: must be"),
    ("negative-retries", ["config", "show", "--profile", "{tmp}/p.yaml"], {"p.yaml": "extends: smoke\ngates: {op_retries: -1}\n"}, "gates.op_retries: must be 0 or more"),
    ("lock-run-timeout-negative", ["lock", "run", "--lock-dir", "{tmp}/lk", "--timeout", "-3", "--", "true"], {}, "--timeout -3.0: must be a finite number of seconds > 0"),
    ("lock-acquire-timeout-0", ["lock", "acquire", "--lock-dir", "{tmp}/lk", "--timeout", "0"], {}, "--timeout 0.0: must be"),
    ("lock-wait-timeout-nan", ["lock", "wait", "--lock-dir", "{tmp}/lk", "--timeout", "nan"], {}, "--timeout nan: must be"),
    ("campaign-lock-step-timeout", ["campaign", "run", "{tmp}/c.yaml", "--profile", "{tmp}/p.yaml"],
     {"c.yaml": "steps:\n  - {name: l, kind: lock, with: {timeout_s: -1}}\n", "p.yaml": "extends: smoke\nlock: {dir: {tmp}/lk, preflight: false}\n"}, "lock step with.timeout_s -1: must be"),
    ("campaign-shell-timeout", ["campaign", "run", "{tmp}/c.yaml"], {"c.yaml": "steps:\n  - {name: s, kind: shell, with: {argv: ['true'], timeout_s: 0}}\n"}, "shell step with.timeout_s 0: must be"),
    ("non-utf8-profile", ["config", "show", "--profile", "{tmp}/p.yaml"], {"p.yaml": b"extends: smoke\n# caf\xe9 latin-1\n"}, "not UTF-8 text (byte 0xe9"),
    ("non-utf8-campaign", ["campaign", "run", "{tmp}/c.yaml"], {"c.yaml": b"name: caf\xe9\nsteps: []\n"}, "not UTF-8 text"),
    ("artifacts-under-a-file", ["--artifacts", "{tmp}/file/runs", "campaign", "run", "{tmp}/c.yaml"], {"file": "x", "c.yaml": CAMPAIGN}, "cannot create the run directory"),
    ("artifacts-is-a-file", ["--artifacts", "{tmp}/file", "campaign", "run", "{tmp}/c.yaml"], {"file": "x", "c.yaml": CAMPAIGN}, "artifacts dir {tmp}/file"),
    ("artifacts-under-proc", ["--artifacts", "/proc/parity-runs", "campaign", "run", "{tmp}/c.yaml"], {"c.yaml": CAMPAIGN}, "artifacts dir /proc/parity-runs"),
    ("lock-dir-parent-under-a-file", ["lock", "acquire", "--lock-dir", "{tmp}/file/sub/lk", "--no-wait"], {"file": "x"}, "lock dir {tmp}/file/sub/lk"),
    ("lock-dir-under-proc", ["lock", "run", "--lock-dir", "/proc/parity-nope/lk", "--", "true"], {}, "lock dir /proc/parity-nope/lk"),
    ("lock-owner-is-a-directory", ["lock", "status", "--lock-dir", "{tmp}/lk"], {"lk/owner/keep": ""}, "owner file {tmp}/lk/owner is a directory"),
    ("lock-owner-is-a-directory-acquire", ["lock", "acquire", "--lock-dir", "{tmp}/lk", "--no-wait"], {"lk/owner/keep": ""}, "is a directory"),
]


def _check_one_line_exit_2(r, expected: str) -> None:
    lines = r.stderr.splitlines()
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("parity: error: "), lines[0]
    assert "Traceback" not in r.stderr + r.stdout
    assert expected in lines[0], lines[0]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2(case, tmp_path):
    _, argv, files, expected = case
    fill = lambda s: s.replace("{tmp}", str(tmp_path))  # noqa: E731
    for rel, content in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(textwrap.dedent(fill(content)))
    env = {"PARITY_REGISTRY": str(tmp_path / "registry.yaml"), "PARITY_NO_NVML": "1"}
    r = run_parity("--artifacts", str(tmp_path / "runs"), *[fill(a) for a in argv], env=env, timeout=120)
    _check_one_line_exit_2(r, fill(expected))


@pytest.fixture
def silent_peer():
    """A TCP server on 127.0.0.1 that accepts connections and never says a word."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join(5)
    for c in held:
        c.close()
    srv.close()


def test_ssh_peer_without_a_banner_is_one_line_exit_2(silent_peer, tmp_path):
    prof = tmp_path / "p.yaml"
    entry = {"hostname": "127.0.0.1", "port": silent_peer, "user": "nobody", "connect_timeout_s": 1.0,
             "known_hosts": str(tmp_path / "known_hosts"), "workdir": str(tmp_path / "w"), "python": sys.executable}
    prof.write_text(yaml.safe_dump({"extends": "smoke", "hosts": {"silent": entry}}))
    r = run_parity("--host", "silent", "config", "show", "--profile", str(prof), timeout=120)
    _check_one_line_exit_2(r, "no SSH banner within connect_timeout_s (1s)")
