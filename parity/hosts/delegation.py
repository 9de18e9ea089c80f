"""--host NAME: run the same parity command on a remote host and pull its run dir back.

The remote side is a parity installed there (`hosts.NAME.parity`) or a venv in
`<workdir>/venv` bootstrapped from a source archive of this checkout (version
stamped: a changed local parity re-bootstraps).  The command line is the local
one minus --host, with `--artifacts <workdir>/runs`; local files named on it
(campaign and profile YAML) are uploaded and their paths rewritten.  The remote
parity writes its run dir path into $PARITY_RUN_DIR_FILE; that directory is
copied into the local --artifacts root, and the remote exit code is returned.
The lock is taken remotely, because the remote parity runs the lock.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import socket
import sys
import tarfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from parity.context import RUN_DIR_MARK
from parity.errors import InfraError, UsageError
from parity.artifacts import RunDir
from parity.gpu.lock import LOCK_DIR_ENV
from parity.llamacpp import git as gitmod
from parity.paths import PARITY_ROOT
from parity.runners.local import LocalRunner
from parity.runners.ssh import ConnectionLost
from parity.results import BadResultFile, read_manifest

ROOT_VALUE_OPTS = ("--artifacts", "--host")
ROOT_FLAGS = ("-v", "--verbose", "--version")
DELEGATED_ENV = "PARITY_DELEGATED"  # set on remote commands: never fan out again
RUN_DIR_FILE_ENV = "PARITY_RUN_DIR_FILE"
INTERRUPT_GRACE_S = 30.0  # the remote parity needs time to stop servers and release its lock


# --------------------------------------------------------------------------- argv


def split_root(argv: list[str]) -> tuple[list[str], list[str]]:
    """(root options, the rest starting at the subcommand)."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ROOT_VALUE_OPTS:
            i += 2
        elif a.split("=", 1)[0] in ROOT_VALUE_OPTS or a in ROOT_FLAGS or (a.startswith("-v") and set(a[1:]) == {"v"}):
            i += 1
        else:
            break
    return argv[:i], argv[i:]


def remote_argv(argv: list[str], remote_artifacts: str, upload, runs_map=None) -> list[str]:
    """The remote command line: root options without --host/--artifacts plus
    `--artifacts remote_artifacts`; every token naming an existing local file is
    replaced by upload(path) (which returns the remote path); `--resume DIR`
    becomes the same run dir under the remote artifacts root."""
    root, rest = split_root(argv)
    kept, i = [], 0
    while i < len(root):
        a = root[i]
        if a in ROOT_VALUE_OPTS:
            i += 2
            continue
        if a.split("=", 1)[0] not in ROOT_VALUE_OPTS:
            kept.append(a)
        i += 1
    out, i = [], 0
    while i < len(rest):
        a = rest[i]
        if a == "--resume" and i + 1 < len(rest):
            out += [a, f"{remote_artifacts}/{Path(rest[i + 1].rstrip('/')).name}"]
            i += 2
            continue
        if a.startswith("--resume="):
            out.append(f"--resume={remote_artifacts}/{Path(a.split('=', 1)[1].rstrip('/')).name}")
        elif a.startswith("--") and "=" in a and os.path.isfile(a.split("=", 1)[1]):
            name, val = a.split("=", 1)
            out.append(f"{name}={upload(val)}")
        elif not a.startswith("-") and os.path.isfile(a):
            out.append(upload(a))
        else:
            out.append(a)
        i += 1
    return kept + ["--artifacts", remote_artifacts] + out


# --------------------------------------------------------------------------- bootstrap


NOT_SHIPPED = ("tests/", "docs/", "benchmarks/", ".github/")  # nothing a remote parity runs reads them


def source_files(root: Path) -> list[str]:
    """This checkout's files (git ls-files incl. untracked, not ignored) but NOT_SHIPPED;
    without git, the package, pyproject.toml and campaigns/."""
    names: list[str] = []
    if (root / ".git").exists():
        names = gitmod.listed_files(LocalRunner(), root)
    if not names:
        for top in ("parity", "campaigns"):
            for p in (root / top).rglob("*"):
                if p.is_file() and "__pycache__" not in p.parts:
                    names.append(str(p.relative_to(root)))
        names.append("pyproject.toml")
    keep = [n for n in names if not n.startswith(NOT_SHIPPED) and (root / n).is_file()]
    return sorted(set(keep))


def _shipped(root: Path | None):
    root = Path(root or PARITY_ROOT)
    for name in source_files(root):
        yield name, (root / name).read_bytes(), os.access(root / name, os.X_OK)


def _stamp_add(h, name: str, data: bytes) -> None:
    h.update(name.encode() + b"\0" + hashlib.sha256(data).digest())


def source_stamp(root: Path | None = None) -> str:
    """The shipped files' names and contents, hashed: a remote copy with this stamp is current."""
    h = hashlib.sha256()
    for name, data, _ in _shipped(root):
        _stamp_add(h, name, data)
    return h.hexdigest()[:16]


def source_archive(root: Path | None = None) -> tuple[bytes, str]:
    """(tar.gz bytes, stamp) of the shipped files: built only when the remote copy is not current
    (gzip of the tree is most of a delegated start's own time)."""
    h = hashlib.sha256()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data, executable in _shipped(root):
            _stamp_add(h, name, data)
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            info.mode = 0o755 if executable else 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue(), h.hexdigest()[:16]


def ensure_remote_parity(runner, out=None) -> tuple[list[str], str]:
    """(argv prefix that runs parity remotely, remote cwd)."""
    cfg = runner.cfg
    workdir = runner.expand(cfg.workdir)
    runner.makedirs(workdir)
    if cfg.parity:
        exe = runner.expand(cfg.parity)
        found = runner.exists(exe) if "/" in exe else runner.which(exe)
        if not found:
            raise UsageError(f"--host {runner.host}: remote parity {cfg.parity!r} not found (hosts.{runner.host}.parity); fix the path or drop it to bootstrap a venv")
        return [exe], workdir
    stamp = source_stamp()
    venv, src = f"{workdir}/venv", f"{workdir}/src"
    stamp_file, py = f"{venv}/.parity-stamp", f"{venv}/bin/python"
    want = f"{stamp} {cfg.python}"
    if runner.exists(py) and runner.exists(stamp_file) and runner.read_text(stamp_file).strip() == want:
        return [py, "-m", "parity"], src
    archive, stamp = source_archive()
    want = f"{stamp} {cfg.python}"
    say = out.info if out is not None else (lambda m: sys.stderr.write(m + "\n"))
    say(f"bootstrapping parity {stamp} on {runner.host} in {workdir}")
    tgz = f"{workdir}/parity-src-{stamp}.tar.gz"
    runner.put_bytes(archive, tgz)
    unpack = 'set -e; rm -rf "$1.new"; mkdir -p "$1.new"; tar -xzf "$2" -C "$1.new"; rm -rf "$1"; mv "$1.new" "$1"; rm -f "$2"'
    _check(runner, runner.run(["sh", "-c", unpack, "sh", src, tgz], timeout=cfg.bootstrap_timeout_s), "unpack the source archive")
    if not runner.exists(py):
        # no pip in it: nothing is installed there (the .pth files below are the whole install)
        res = runner.run([cfg.python, "-m", "venv", "--without-pip", "--system-site-packages", venv], timeout=cfg.bootstrap_timeout_s)
        if res.rc == 127:
            raise UsageError(f"--host {runner.host}: remote python {cfg.python!r} not found (hosts.{runner.host}.python)")
        _check(runner, res, "create the venv")
    site = runner.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], timeout=cfg.bootstrap_timeout_s)
    _check(runner, site, "locate the venv's site-packages")
    venv_site = site.stdout.strip()
    _inherit_packages(runner, cfg.python, venv_site)
    runner.write_text(f"{venv_site}/_parity_src.pth", src + "\n")  # `python -m parity` imports from src
    # every remote start imports ~100 modules: compiled once here, not at each start where the
    # environment sets PYTHONDONTWRITEBYTECODE (a Slurm job inherits the submitter's)
    _check(runner, runner.run([py, "-m", "compileall", "-q", f"{src}/parity"], timeout=cfg.bootstrap_timeout_s), "compile the source")
    check = runner.run([py, "-c", "import parity, typer, yaml, rich; print(parity.__file__)"], cwd=workdir, timeout=cfg.bootstrap_timeout_s)
    missing = missing_module(check.stdout + check.stderr)
    if missing and missing != "parity":
        raise UsageError(f"--host {runner.host}: hosts.{runner.host}.python ({cfg.python}) lacks the {missing!r} package parity needs; install parity's dependencies there (see pyproject.toml)")
    if not check.ok or not check.stdout.strip().startswith(src + "/"):
        raise InfraError(f"--host {runner.host}: bootstrapped parity does not import from {src}: {check.tail(3)}")
    runner.write_text(stamp_file, want + "\n")
    return [py, "-m", "parity"], src


def missing_module(output: str) -> str | None:
    """The module a failed `python -c "import ..."` could not find, if that was why."""
    m = re.search(r"ModuleNotFoundError: No module named '([^']+)'", output)
    return m.group(1) if m else None


def _inherit_packages(runner, base_python: str, venv_site: str) -> None:
    """--system-site-packages gives the venv its base interpreter's packages; when
    hosts.NAME.python is itself a venv, that base is not it.  A .pth file lists the
    configured python's own site directories, so the packages it imports are there."""
    code = "import json, site, sysconfig; print(json.dumps([*site.getsitepackages(), sysconfig.get_paths()['purelib'], sysconfig.get_paths()['platlib']]))"
    base = runner.run([base_python, "-c", code], timeout=runner.cfg.bootstrap_timeout_s)
    _check(runner, base, f"list the site-packages of {base_python}")
    dirs = list(dict.fromkeys(json.loads(base.stdout.strip().splitlines()[-1])))
    runner.write_text(f"{venv_site}/_parity_base.pth", "".join(d + "\n" for d in dirs))


def _check(runner, res, what: str) -> None:
    if res.timed_out:
        raise InfraError(f"--host {runner.host}: could not {what}: not done within hosts.{runner.host}.bootstrap_timeout_s ({runner.cfg.bootstrap_timeout_s:g}s): {res.tail(3) or 'no output'}")
    if not res.ok:
        raise InfraError(f"--host {runner.host}: could not {what} (exit {res.rc}): {res.tail(3)}")


# --------------------------------------------------------------------------- delegate


@dataclass
class Delegated:
    host: str
    rc: int
    local_run_dir: str | None
    remote_run_dir: str | None
    stdout: str


def uploaded_argv(runner, argv: list[str], workdir: str) -> list[str]:
    """argv for the remote side: every local file it names put under <workdir>/inputs/<digest>/
    (once each), run dirs under <workdir>/runs."""
    uploaded: dict[str, str] = {}

    def upload(path: str) -> str:
        if path not in uploaded:
            digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]
            dest = f"{workdir}/inputs/{digest}/{Path(path).name}"
            runner.put(path, dest)
            uploaded[path] = dest
        return uploaded[path]

    return remote_argv(argv, f"{workdir}/runs", upload)


def run_delegated(runner, argv, local_root: Path, echo_stdout: bool, prefix: str, out) -> Delegated:
    parity_cmd, cwd = ensure_remote_parity(runner, out)
    workdir = runner.expand(runner.cfg.workdir)
    args = uploaded_argv(runner, argv, workdir)
    run_dir_file = f"{workdir}/tmp/run-dir-{uuid.uuid4().hex}.txt"
    runner.makedirs(f"{workdir}/tmp")
    env = {RUN_DIR_FILE_ENV: run_dir_file, DELEGATED_ENV: socket.gethostname()}
    if os.environ.get("PARITY_DEBUG"):
        env["PARITY_DEBUG"] = os.environ["PARITY_DEBUG"]
    if runner.cfg.lock_dir:  # the host's own lock dir wins over the profile's lock.dir

        env[LOCK_DIR_ENV] = runner.expand(runner.cfg.lock_dir)

    announced: list[str] = []

    def stream(name: str, line: str) -> None:
        if name == "stderr" and line.startswith(RUN_DIR_MARK + " "):
            announced.append(line[len(RUN_DIR_MARK) + 1 :].strip())
            return
        if name == "stdout" and not echo_stdout:
            return
        f = sys.stdout if name == "stdout" else sys.stderr
        f.write(f"{prefix}{line}\n")
        f.flush()

    interrupted, lost = False, None
    try:
        res = runner.run(parity_cmd + args, env=env, cwd=cwd, on_line=stream)
    except KeyboardInterrupt:
        interrupted, res = True, None
    except ConnectionLost as e:
        lost, res = e, None
    remote_dir, local_dir, pulled = (announced[0] if announced else None), None, ""
    try:  # over a new connection when the old one dropped
        if runner.exists(run_dir_file):
            remote_dir = runner.read_text(run_dir_file).strip()
            runner.run(["rm", "-f", run_dir_file], timeout=30)
        if remote_dir and lost:
            _await_remote_end(runner, remote_dir)
        if remote_dir:
            local_dir = local_root / Path(remote_dir).name
            runner.get(remote_dir, str(local_dir))
            annotate(local_dir, runner, remote_dir, None if res is None else res.rc, lost)
            sys.stderr.write(f"{prefix}run dir ({runner.host}:{remote_dir}) -> {local_dir}\n")
    except Exception as e:  # noqa: BLE001 -- whatever the reason, say what was not pulled back
        if not (lost or interrupted):
            raise
        pulled = f"; it could not be pulled back: {e}"
        local_dir = None
    if interrupted:
        raise KeyboardInterrupt
    if lost:
        where = f"remote run dir {runner.host}:{remote_dir}" if remote_dir else "the remote run dir is unknown (the remote parity had not started one)"
        status = _status(local_dir) if local_dir else None
        got = f" ({status}), pulled back to {local_dir}" if local_dir else pulled
        raise InfraError(f"{lost}; {where}{got}")
    if res.timed_out:
        raise InfraError(f"--host {runner.host}: remote parity ran past hosts.{runner.host}.command_timeout_s ({runner.cfg.command_timeout_s:g}s) and was stopped"
                         + (f"; remote run dir {runner.host}:{remote_dir} pulled back to {local_dir}" if local_dir else ""))  # fmt: skip
    return Delegated(runner.host, res.rc, str(local_dir) if local_dir else None, remote_dir, res.stdout)


def _await_remote_end(runner, remote_dir: str) -> None:
    """After a drop the remote watchdog hangs up the remote parity (SIGHUP; SIGKILL after the
    runner's interrupt grace): wait, bounded, until its manifest is no longer `running`."""
    import time

    deadline = time.monotonic() + runner.interrupt_grace_s + runner.cfg.connect_timeout_s
    while time.monotonic() < deadline:
        try:
            if json.loads(runner.read_text(f"{remote_dir}/manifest.json")).get("status") != "running":
                return
        except (OSError, ValueError):
            return
        time.sleep(0.5)


def _status(local_dir: Path) -> str | None:
    try:
        return read_manifest(local_dir / "manifest.json").data.get("status")
    except BadResultFile:
        return None


def annotate(local_dir: Path, runner, remote_dir: str, rc: int | None, lost: Exception | None = None) -> None:
    if (local_dir / "manifest.json").is_file():
        rd = RunDir(local_dir)
        rd.update(remote={"host": runner.host, "target": runner.target, "path": remote_dir, "exit_code": rc, **({"connection_lost": str(lost)} if lost else {})})
        if lost and rd.manifest().get("status") == "running":  # its parity was killed before it could say so
            rd.finish("interrupted", f"{lost}; the remote parity did not close its run")
