"""SSHRunner: the Runner protocol over SSH (paramiko, imported lazily).

Every remote command runs as its own session (`setsid`) whose process-group id
is reported back on stderr.  A watchdog on the remote side holds the channel's
stdin: when the connection drops (local parity killed, network gone) stdin
closes and the watchdog kills the whole group, so nothing is left behind.
A local interrupt or a timeout kills the group over a second channel
(SIGTERM, grace, SIGKILL).  Every word of a remote command is shlex-quoted.
"""

from __future__ import annotations

import os
import re
import select
import shlex
import socket
import stat
import threading
import time
import uuid
from pathlib import Path
from typing import Iterable, Mapping

from parity.decode import replace
from parity.runners.host_config import HostConfig
from parity.errors import InfraError, UsageError
from parity.runners.base import CommandResult, LineCallback

PGID_MARK = "__PARITY_PGID__"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
abort_event = threading.Event()  # set to make every running remote command stop (fan-out interrupt)


def q(word) -> str:
    return shlex.quote(str(word))


# --------------------------------------------------------------------------- host resolution


def ssh_config_path() -> Path:
    return Path(os.environ.get("PARITY_SSH_CONFIG") or "~/.ssh/config").expanduser()


def resolve_host(name: str, profile=None) -> HostConfig:
    """The profile's `hosts.NAME` entry, else ~/.ssh/config (HostName, User, Port,
    IdentityFile, UserKnownHostsFile, StrictHostKeyChecking=accept-new), else NAME
    itself as a hostname (as `ssh NAME` would)."""
    cfg = profile.host(name) if profile is not None else None
    if cfg is not None:
        cfg = replace(cfg)
        if not cfg.hostname:
            cfg.hostname = name
    else:
        cfg = HostConfig(hostname=name)
        path = ssh_config_path()
        if path.is_file():
            import paramiko

            try:
                found = paramiko.SSHConfig.from_path(str(path)).lookup(name)
            except Exception as e:  # paramiko raises several types for bad files
                raise UsageError(f"--host {name}: cannot read {path}: {e}") from None
            cfg.hostname = found.get("hostname", name)
            cfg.user = found.get("user")
            if found.get("port"):
                try:
                    cfg.port = int(found["port"])
                except ValueError:
                    raise UsageError(f"--host {name}: {path}: Port {found['port']!r} is not a number") from None
            if found.get("identityfile"):
                cfg.identity_file = found["identityfile"][0]
            if found.get("userknownhostsfile"):
                cfg.known_hosts = found["userknownhostsfile"].split()[0]
            if str(found.get("stricthostkeychecking", "")).lower() == "accept-new":
                cfg.host_key_policy = "accept-new"
            if found.get("connecttimeout"):
                cfg.connect_timeout_s = float(found["connecttimeout"])
    for attr in ("identity_file", "known_hosts"):
        val = getattr(cfg, attr)
        if val:
            setattr(cfg, attr, os.path.expanduser(os.path.expandvars(val)))
    return cfg


# --------------------------------------------------------------------------- remote command text


def inner_script(argv: list[str], env: Mapping[str, str] | None, unset: Iterable[str], cwd: str | None,
                 stdin_path: str | None = None, log_path: str | None = None) -> str:
    """The shell text that runs argv (inside the new session)."""
    parts = []
    if cwd:
        parts.append(f"cd {q(cwd)} || exit 126")
    for name in unset:
        if not _ENV_NAME.match(name):
            raise UsageError(f"not an environment variable name: {name!r}")
        parts.append(f"unset {name}")
    for k, v in (env or {}).items():
        if not _ENV_NAME.match(k):
            raise UsageError(f"not an environment variable name: {k!r}")
        parts.append(f"export {k}={q(v)}")
    redir = f" <{q(stdin_path)}" if stdin_path else " </dev/null"
    if log_path:
        redir += f" >>{q(log_path)} 2>&1"
    parts.append("exec " + " ".join(q(a) for a in argv) + redir)
    return "\n".join(parts)


def wrapper_script(inner: str, grace_s: float = 3.0) -> str:
    """Outer shell: start `inner` in its own session, report its pgid, let a
    watchdog on the channel's stdin hang up the group (SIGHUP, grace, SIGKILL) when
    the connection drops, and exit with the command's status.  Leftover group
    members die with it."""
    return (
        "exec 3<&0\n"
        f"setsid sh -c {q(inner)} 3<&- </dev/null &\n"
        "p=$!\n"
        f"printf '%s %s\\n' {PGID_MARK} \"$p\" >&2\n"
        "( while read -r _; do :; done; " + _await_group('"$p"') + kill_group_script('"$p"', grace_s, "HUP") + " ) <&3 >/dev/null 2>&1 &\n"
        "w=$!\n"
        "exec 3<&-\n"
        "wait \"$p\"; rc=$?\n"
        "kill \"$w\" 2>/dev/null\n"
        "kill -KILL -\"$p\" 2>/dev/null\n"
        "exit $rc\n"
    )


def _await_group(pid: str) -> str:
    """Until the child has called setsid (or is gone; 5 s at most): stdin can be at EOF
    before that, and a kill of a group that does not exist yet would miss the command."""
    return f"i=0; while kill -0 {pid} && ! kill -0 -{pid} && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done 2>/dev/null; "


def kill_group_script(pgid: int | str, grace_s: float, first: str = "TERM", leader_only: bool = False) -> str:
    steps = max(1, int(grace_s / 0.1))
    return (
        f"kill -{first} {'' if leader_only else '-'}{pgid} 2>/dev/null; i=0; "
        f"while kill -0 -{pgid} 2>/dev/null && [ $i -lt {steps} ]; do sleep 0.1; i=$((i+1)); done; "
        f"kill -KILL -{pgid} 2>/dev/null; true"
    )


# --------------------------------------------------------------------------- runner


def _policies():
    import paramiko

    class Reject(paramiko.MissingHostKeyPolicy):
        def missing_host_key(self, client, hostname, key):
            raise _UnknownHostKey(hostname, key.get_name(), key.get_fingerprint().hex())

    class AcceptNew(paramiko.MissingHostKeyPolicy):
        def __init__(self, path: str):
            self.path = path

        def missing_host_key(self, client, hostname, key):
            client.get_host_keys().add(hostname, key.get_name(), key)
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a") as f:
                f.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")

    return Reject, AcceptNew


def _quiet_paramiko() -> None:
    """paramiko's transport thread logs a traceback for every failed handshake; parity
    reports the failure in one line instead (PARITY_DEBUG=1 keeps paramiko's log)."""
    import logging

    log = logging.getLogger("paramiko")
    if not os.environ.get("PARITY_DEBUG") and not any(isinstance(h, logging.NullHandler) for h in log.handlers):
        log.addHandler(logging.NullHandler())
        log.propagate = False


class ConnectionLost(InfraError):
    """The SSH connection dropped while a command ran; .stdout is what arrived before."""

    def __init__(self, msg: str, stdout: str = ""):
        super().__init__(msg)
        self.stdout = stdout


class _UnknownHostKey(Exception):
    def __init__(self, hostname, kind, fp):
        super().__init__(hostname)
        self.hostname, self.kind, self.fp = hostname, kind, fp


class SSHRunner:
    def __init__(self, name: str, cfg: HostConfig):
        self.host = name
        self.cfg = cfg
        self._client = None
        self._sftp = None
        self._home: str | None = None
        self._lock = threading.Lock()
        self.interrupt_grace_s = 5.0  # SIGTERM -> SIGKILL delay for an interrupted command

    @classmethod
    def for_host(cls, name: str, profile=None) -> "SSHRunner":
        return cls(name, resolve_host(name, profile))

    # ---- connection ------------------------------------------------------
    @property
    def target(self) -> str:
        user = f"{self.cfg.user}@" if self.cfg.user else ""
        return f"{user}{self.cfg.hostname}:{self.cfg.port}"

    def connect(self):
        with self._lock:
            if self._client is not None and self._client.get_transport() and self._client.get_transport().is_active():
                return self._client
            if self._client is not None:  # a dropped connection: its SFTP session went with it
                self._client.close()
                self._client = self._sftp = None
            self._client = self._open()
            return self._client

    def _open(self):
        import paramiko

        c, name = self.cfg, self.host
        known = c.known_hosts or os.path.expanduser("~/.ssh/known_hosts")
        client = paramiko.SSHClient()
        if os.path.isfile(known):
            try:
                client.load_host_keys(known)
            except Exception as e:
                raise UsageError(f"--host {name}: cannot read known_hosts {known}: {e}") from None
        Reject, AcceptNew = _policies()
        client.set_missing_host_key_policy(AcceptNew(known) if c.host_key_policy == "accept-new" else Reject())
        kw = dict(
            hostname=c.hostname, port=c.port, username=c.user or _local_user(), timeout=c.connect_timeout_s,
            banner_timeout=c.connect_timeout_s, auth_timeout=c.connect_timeout_s,
        )
        if c.identity_file:
            if not os.path.isfile(c.identity_file):
                raise UsageError(f"--host {name}: identity file not found: {c.identity_file}")
            kw.update(key_filename=c.identity_file, look_for_keys=False, allow_agent=False)
        where = f"--host {name} ({self.target})"
        _quiet_paramiko()
        try:
            client.connect(**kw)
        except _UnknownHostKey as e:
            client.close()
            raise UsageError(
                f"{where}: unknown host key ({e.kind} {e.fp}) not in {known}; verify it and add it "
                f"(ssh-keyscan -p {c.port} {c.hostname} >> {known}) or set host_key_policy: accept-new"
            ) from None
        except paramiko.BadHostKeyException:
            client.close()
            raise UsageError(f"{where}: host key does not match {known} (changed key or man in the middle); refusing") from None
        except paramiko.PasswordRequiredException:
            client.close()
            raise UsageError(f"{where}: identity file {c.identity_file} is encrypted; load it into ssh-agent") from None
        except paramiko.AuthenticationException as e:
            client.close()
            raise UsageError(f"{where}: authentication refused ({e}); check user and identity_file") from None
        except socket.gaierror:
            client.close()
            raise UsageError(f"{where}: cannot resolve hostname {c.hostname}") from None
        except (paramiko.ssh_exception.NoValidConnectionsError, ConnectionRefusedError):
            client.close()
            raise UsageError(f"{where}: connection refused (is sshd running on port {c.port}?)") from None
        except (socket.timeout, TimeoutError):
            client.close()
            raise UsageError(f"{where}: timed out after {c.connect_timeout_s:g}s connecting") from None
        except (paramiko.SSHException, OSError, EOFError) as e:
            transport = client.get_transport()
            no_banner = "banner" in str(e).lower() or (transport is not None and not transport.remote_version)
            client.close()
            if no_banner:  # the handshake thread's banner error can surface as a later "No existing session"
                raise UsageError(f"{where}: no SSH banner within connect_timeout_s ({c.connect_timeout_s:g}s): the peer accepted the connection but is not answering as an SSH server") from None
            raise UsageError(f"{where}: cannot connect: {e or type(e).__name__}") from None
        if c.keepalive_s:
            client.get_transport().set_keepalive(int(max(1, c.keepalive_s)))
        return client

    def close(self) -> None:
        with self._lock:
            if self._sftp is not None:
                try:
                    self._sftp.close()
                except Exception:
                    pass
            if self._client is not None:
                self._client.close()
            self._client = self._sftp = None

    def _channel(self):
        transport = self.connect().get_transport()
        try:
            return transport.open_session(timeout=self.cfg.connect_timeout_s)
        except Exception as e:
            raise InfraError(f"--host {self.host}: cannot open an SSH channel: {e}") from None

    def sftp(self):
        self.connect()
        with self._lock:
            if self._sftp is None:
                try:
                    self._sftp = self._client.open_sftp()
                except Exception as e:
                    raise InfraError(f"--host {self.host}: SFTP unavailable: {e}") from None
            return self._sftp

    def home(self) -> str:
        if self._home is None:
            self._home = self.sftp().normalize(".")
        return self._home

    def expand(self, path: str) -> str:
        """Remote path with a leading ~ expanded (quoting would keep ~ literal)."""
        path = str(path)
        if path == "~":
            return self.home()
        if path.startswith("~/"):
            return self.home().rstrip("/") + path[1:]
        return path

    # ---- commands --------------------------------------------------------
    def run(
        self,
        argv: list[str],
        *,
        env: Mapping[str, str] | None = None,
        unset: Iterable[str] = (),
        cwd: str | None = None,
        timeout: float | None = None,
        on_line: LineCallback | None = None,
        input_text: str | None = None,
    ) -> CommandResult:
        argv = [str(a) for a in argv]
        if timeout is None:
            timeout = self.cfg.command_timeout_s
        stdin_path = None
        if input_text is not None:
            stdin_path = f"/tmp/parity-stdin-{uuid.uuid4().hex}"
            self.write_text(stdin_path, input_text)
        script = wrapper_script(inner_script(argv, env, unset, cwd and self.expand(cwd), stdin_path), self.interrupt_grace_s)
        start = time.monotonic()
        chan = self._channel()
        chan.exec_command("sh -c " + q(script))
        out = _Collector(on_line)
        pgid: list[int] = []
        timed_out = False
        try:
            while True:
                if chan.recv_ready():
                    out.feed("stdout", chan.recv(65536))
                    continue
                if chan.recv_stderr_ready():
                    out.feed("stderr", chan.recv_stderr(65536), pgid)
                    continue
                if chan.exit_status_ready() or chan.closed:
                    break
                if timeout is not None and time.monotonic() - start > timeout:
                    timed_out = True
                    self._kill(pgid, chan, grace_s=2.0)
                    break
                if abort_event.is_set():
                    raise KeyboardInterrupt("aborted")
                select.select([chan], [], [], 0.2)
        except BaseException:
            self._kill(pgid, chan, grace_s=self.interrupt_grace_s)
            raise
        finally:
            if stdin_path:
                self._remove_quietly(stdin_path)
        # drain what is left after the exit status arrived
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not chan.closed and not (chan.eof_received and not chan.recv_ready() and not chan.recv_stderr_ready()):
            if chan.recv_ready():
                out.feed("stdout", chan.recv(65536))
            elif chan.recv_stderr_ready():
                out.feed("stderr", chan.recv_stderr(65536), pgid)
            else:
                select.select([chan], [], [], 0.1)
        out.flush(pgid)
        rc = None
        if not timed_out:
            rc = chan.recv_exit_status() if chan.exit_status_ready() else -1
            if rc == -1:  # paramiko's "no exit status": the channel or connection went away
                chan.close()
                raise ConnectionLost(f"--host {self.host}: SSH connection lost while running {argv[0]} (remote group stopped by its watchdog)", out.text("stdout"))
        chan.close()
        return CommandResult(argv, rc, out.text("stdout"), out.text("stderr"), time.monotonic() - start, timed_out, dict(env or {}))

    def _kill(self, pgid: list[int], chan, grace_s: float, leader_only: bool = False) -> None:
        """SIGTERM the remote group, wait, SIGKILL (second channel); closing the
        main channel also trips the remote watchdog if that channel failed."""
        if pgid:
            try:
                c2 = self._channel()
                c2.exec_command("sh -c " + q(kill_group_script(pgid[0], grace_s, leader_only=leader_only)))
                c2.recv_exit_status()
                c2.close()
            except Exception:
                pass
        try:
            chan.close()
        except Exception:
            pass

    def _remove_quietly(self, path: str) -> None:
        try:
            self.sftp().remove(path)
        except Exception:
            pass

    def spawn(
        self,
        argv: list[str],
        *,
        env: Mapping[str, str] | None = None,
        unset: Iterable[str] = (),
        cwd: str | None = None,
        log_path: str | None = None,
    ) -> "SSHProcess":
        argv = [str(a) for a in argv]
        log = self.expand(log_path) if log_path else "/dev/null"
        script = wrapper_script(inner_script(argv, env, unset, cwd and self.expand(cwd), None, log), self.interrupt_grace_s)
        chan = self._channel()
        chan.exec_command("sh -c " + q(script))
        proc = SSHProcess(self, chan, argv, log_path)
        deadline = time.monotonic() + self.cfg.connect_timeout_s
        while not proc._pgid and time.monotonic() < deadline and not chan.exit_status_ready():
            proc._pump(0.1)
        if not proc._pgid:
            chan.close()
            raise InfraError(f"--host {self.host}: could not start {argv[0]} remotely")
        return proc

    # ---- files -----------------------------------------------------------
    def makedirs(self, path: str) -> None:
        sftp, path = self.sftp(), self.expand(path)
        cur = "/" if path.startswith("/") else ""
        for part in [p for p in path.split("/") if p]:
            cur = cur + part if cur in ("", "/") else f"{cur}/{part}"
            try:
                sftp.stat(cur)
            except FileNotFoundError:
                sftp.mkdir(cur)

    def put(self, local_path: str, remote_path: str) -> None:
        sftp, remote_path = self.sftp(), self.expand(remote_path)
        local = Path(local_path)
        if local.is_dir():
            self.makedirs(remote_path)
            for child in sorted(local.iterdir()):
                self.put(str(child), f"{remote_path}/{child.name}")
            return
        self.makedirs(os.path.dirname(remote_path) or ".")
        sftp.put(str(local), remote_path)
        sftp.chmod(remote_path, local.stat().st_mode & 0o777)

    def put_bytes(self, data: bytes, remote_path: str) -> None:
        import io

        remote_path = self.expand(remote_path)
        self.makedirs(os.path.dirname(remote_path) or ".")
        self.sftp().putfo(io.BytesIO(data), remote_path)

    def get(self, remote_path: str, local_path: str) -> None:
        """Copy a remote file or directory tree (recursively) to local_path."""
        sftp, remote_path = self.sftp(), self.expand(remote_path)
        try:
            st = sftp.stat(remote_path)
        except FileNotFoundError:
            raise InfraError(f"--host {self.host}: no such remote path {remote_path}") from None
        local = Path(local_path)
        if stat.S_ISDIR(st.st_mode):
            local.mkdir(parents=True, exist_ok=True)
            for entry in sftp.listdir_attr(remote_path):
                self.get(f"{remote_path}/{entry.filename}", str(local / entry.filename))
            return
        local.parent.mkdir(parents=True, exist_ok=True)
        tmp = local.with_name(f".{local.name}.part")
        sftp.get(remote_path, str(tmp))
        os.chmod(tmp, st.st_mode & 0o777)
        os.replace(tmp, local)

    def exists(self, path: str) -> bool:
        try:
            self.sftp().stat(self.expand(path))
            return True
        except FileNotFoundError:
            return False

    def read_text(self, path: str) -> str:
        try:
            with self.sftp().open(self.expand(path), "r") as f:
                return f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            raise FileNotFoundError(f"{self.host}:{path}") from None

    def write_text(self, path: str, text: str) -> None:
        path = self.expand(path)
        tmp = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
        self.put_bytes(text.encode("utf-8"), tmp)
        self.sftp().posix_rename(tmp, path)

    def which(self, name: str) -> str | None:
        res = self.run(["sh", "-c", 'command -v "$1"', "sh", name], timeout=30)
        return res.stdout.strip() or None if res.ok else None


class _Collector:
    """Splits channel bytes into lines, calls on_line, and strips the pgid marker."""

    def __init__(self, on_line: LineCallback | None):
        self.on_line = on_line
        self.chunks: dict[str, list[str]] = {"stdout": [], "stderr": []}
        self.partial = {"stdout": b"", "stderr": b""}

    def feed(self, stream: str, data: bytes, pgid: list[int] | None = None) -> None:
        buf = self.partial[stream] + data
        *lines, self.partial[stream] = buf.split(b"\n")
        for raw in lines:
            self._line(stream, raw.decode("utf-8", "replace"), pgid)

    def _line(self, stream: str, line: str, pgid: list[int] | None) -> None:
        if stream == "stderr" and pgid is not None and not pgid and line.startswith(PGID_MARK + " "):
            pgid.append(int(line.split()[1]))
            return
        self.chunks[stream].append(line + "\n")
        if self.on_line:
            self.on_line(stream, line.rstrip("\r"))

    def flush(self, pgid: list[int] | None = None) -> None:
        for stream in ("stdout", "stderr"):
            if self.partial[stream]:
                self._line(stream, self.partial[stream].decode("utf-8", "replace"), pgid)
                self.chunks[stream][-1] = self.chunks[stream][-1][:-1]
                self.partial[stream] = b""

    def text(self, stream: str) -> str:
        return "".join(self.chunks[stream])


class SSHProcess:
    """A long-lived remote process (own session); `pid` is its remote pgid."""

    def __init__(self, runner: SSHRunner, chan, argv: list[str], log_path: str | None):
        self.runner, self._chan, self.argv, self.log_path = runner, chan, argv, log_path
        self._pgid: list[int] = []
        self._out = _Collector(None)
        self.pid = 0

    def _pump(self, wait_s: float) -> None:
        if self._chan.recv_stderr_ready():
            self._out.feed("stderr", self._chan.recv_stderr(65536), self._pgid)
        elif self._chan.recv_ready():
            self._chan.recv(65536)
        else:
            select.select([self._chan], [], [], wait_s)
        if self._pgid and not self.pid:
            self.pid = self._pgid[0]

    def poll(self) -> int | None:
        self._pump(0)
        if self._chan.exit_status_ready():
            return self._chan.recv_exit_status()
        return None

    def wait(self, timeout: float | None = None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (rc := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                return None
            self._pump(0.2)
        return rc

    def stop(self, grace_s: float = 10.0, leader_only: bool = False) -> int | None:
        if self.poll() is None:
            self.runner._kill(self._pgid, self._chan, grace_s, leader_only)
        return self._chan.recv_exit_status() if self._chan.exit_status_ready() else None



def _local_user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except Exception:
        return str(os.getuid())
