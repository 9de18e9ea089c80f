"""`parity --host NAME ...` for a `kind: slurm` host: the same command, run by one sbatch
job on the node Slurm allocates, followed until it ends, its run dir brought back as an
SSH run's is (parity.hosts.delegation).

Slurm does the queueing, the exclusive allocation, the time limit, the cancellation.
parity writes a batch script into <workdir>/jobs/<id>/ (workdir: a filesystem the
login node and the compute nodes share), submits it with the host's sbatch options,
reads the job's state (scontrol show job, sacct when scontrol forgot it) every poll_s,
prints each state change and the job's output, and when the job ends copies the run
dir the job's parity announced into the local --artifacts root, adding
`remote` and `slurm` (job id, state, reason, node, exit code) to its manifest.

Inside the job parity is the ordinary one: it takes the GPU owner-file lock and runs
the idle preflight on the node (users of a node are not all Slurm jobs), records the
node's hardware class, and records SLURM_JOB_ID in its manifest.

Ends: Ctrl-C cancels the job (scancel), waits for it to end, pulls the run dir, exits
130.  A job Slurm ends (time limit, preemption, node failure, a cancel from outside)
leaves its run dir `interrupted` with Slurm's state and reason; `--resume` continues it
(the run dir stays in <workdir>/runs).  sbatch refusing the options (partition, gres,
account...) is one line, exit 2; a controller that does not answer is one line, exit 4.
"""

from __future__ import annotations

import os
import shlex
import socket
import sys
import time
import uuid
from pathlib import Path

from parity.context import RUN_DIR_MARK
from parity.errors import InfraError, UsageError
from parity.hosts.slurm import commands as sl
from parity.artifacts import RunDir
from parity.gpu.lock import LOCK_DIR_ENV
from parity.hosts.delegation import DELEGATED_ENV, Delegated, RUN_DIR_FILE_ENV, annotate, ensure_remote_parity, split_root, uploaded_argv
from parity.hosts.slurm.login import login_runner
from parity.runners import ssh
from parity.runners.lifetime import TAG_ENV

PROGRESS_EVERY_S = 60.0  # a "still running" line at most this often


def delegate(host: str, profile, argv: list[str], local_root: Path, *, echo_stdout: bool = True, prefix: str = "", out=None):
    cfg = profile.host(host) if profile is not None else None
    if cfg is None or cfg.kind != "slurm":
        raise UsageError(f"--host {host}: not a kind: slurm host in the profile")
    runner = login_runner(host, cfg)
    try:
        return Submission(runner, cfg, prefix, echo_stdout).run(argv, Path(local_root), out)
    finally:
        runner.close()


class Submission:
    def __init__(self, runner, cfg, prefix: str, echo_stdout: bool):
        self.runner, self.cfg, self.slurm = runner, cfg, cfg.slurm
        self.prefix, self.echo_stdout = prefix, echo_stdout
        self.where = f"--host {runner.host}"
        self.job_id: str | None = None
        self.offsets = {"stdout": 0, "stderr": 0}
        self.announced: list[str] = []
        self.error_lines: list[str] = []  # the job's parity's own error line

    def say(self, msg: str) -> None:
        sys.stderr.write(f"{self.prefix}{msg}\n")
        sys.stderr.flush()

    # ---- the whole delegation -------------------------------------------------------
    def run(self, argv: list[str], local_root: Path, out):
        r = self.runner
        parity_cmd, cwd = ensure_remote_parity(r, out)
        workdir = r.expand(self.cfg.workdir)
        args = uploaded_argv(r, argv, workdir)
        jobdir = f"{workdir}/jobs/{time.strftime('%Y%m%d_%H%M%S')}-{uuid.uuid4().hex[:8]}"
        r.makedirs(jobdir)
        self.files = {"stdout": f"{jobdir}/job.out", "stderr": f"{jobdir}/job.err", "run_dir": f"{jobdir}/run_dir"}
        r.write_text(f"{jobdir}/job.sh", self.script(parity_cmd + args, cwd))
        sub = sl.sbatch_argv(f"{jobdir}/job.sh", job_name=job_name(argv), output=self.files["stdout"], error=self.files["stderr"], chdir=cwd, cfg=self.slurm)
        part = f" (partition {self.slurm.partition})" if self.slurm.partition else ""
        info, interrupted = None, False
        try:  # from the submission on: a Ctrl-C the moment the job starts must cancel it too (two CPU hogs showed it)
            self.job_id = sl.submit(r, sub, self.where, env=self.slurm.env)
            self.say(f"slurm job {self.job_id} submitted on {r.host}{part}; script {jobdir}/job.sh")
            info = self.follow()
        except KeyboardInterrupt:
            if self.job_id is None:  # sbatch had not answered: no job id to cancel
                raise
            interrupted = True
            info = self.cancel("the submitting parity was interrupted")
        except InfraError as e:  # bounded waits ran out: the job must not outlive us
            if self.job_id is None:  # the submission itself failed
                raise
            info = self.cancel(str(e))
            self.pull(local_root, info, why=str(e))
            raise
        local_dir = self.pull(local_root, info, why=f"interrupted: the submitting parity was interrupted; slurm job {self.job_id} cancelled (scancel)" if interrupted else None)
        if interrupted:
            raise KeyboardInterrupt
        remote_dir = self.remote_dir()
        finished = local_dir is not None and run_status(local_dir) == "complete"
        if finished and (info is None or info.state in sl.ENDED_BY_SLURM):  # the work was done before Slurm stepped in
            self.say(f"slurm job {self.job_id}: the run completed; Slurm then recorded {describe(info, self.job_id)}")
            return Delegated(r.host, 0, str(local_dir), remote_dir, "")
        if info is None or info.state != "COMPLETED" and info.state in sl.ENDED_BY_SLURM:
            what = describe(info, self.job_id)
            where = f"; run dir {r.host}:{remote_dir} pulled back to {local_dir} (interrupted): continue it with --resume {local_dir}" if local_dir else "; the job's parity had not started a run dir"
            raise InfraError(f"{self.where}: {what}{where}")
        for line in self.error_lines:
            sys.stderr.write(f"{self.prefix}{line}\n")
        rc = info.exit_code if info.exit_code is not None else 1
        return Delegated(r.host, rc, str(local_dir) if local_dir else None, remote_dir, "")

    def script(self, cmd: list[str], cwd: str) -> str:
        env = {RUN_DIR_FILE_ENV: self.files["run_dir"], DELEGATED_ENV: socket.gethostname()}
        if self.cfg.lock_dir:  # the host's own lock dir wins over the profile's lock.dir
            env[LOCK_DIR_ENV] = self.runner.expand(self.cfg.lock_dir)
        if os.environ.get("PARITY_DEBUG"):
            env["PARITY_DEBUG"] = os.environ["PARITY_DEBUG"]
        lines = ["#!/bin/sh", "# written by parity (parity.hosts.slurm.job): one parity command on the allocated node",
                 f"cd {shlex.quote(cwd)} || exit 2", f"unset {TAG_ENV}"]  # fmt: skip
        lines += [f"export {k}={shlex.quote(str(v))}" for k, v in env.items()]
        lines.append("exec " + " ".join(shlex.quote(c) for c in cmd))
        return "\n".join(lines) + "\n"

    # ---- following --------------------------------------------------------------------
    def follow(self) -> sl.JobInfo | None:
        """Poll until the job is in a terminal state; bounded by the host's timeouts."""

        s, start = self.slurm, time.monotonic()
        last_state, last_line, unreachable_since = None, 0.0, None
        while True:
            if ssh.abort_event.is_set():  # a fan-out was interrupted (threads get no KeyboardInterrupt)
                raise KeyboardInterrupt
            try:
                info = sl.job_info(self.runner, self.job_id, self.where, env=self.slurm.env)
                unreachable_since = None
            except InfraError as e:  # the controller is not answering: wait for it, bounded
                unreachable_since = unreachable_since or time.monotonic()
                if time.monotonic() - unreachable_since > s.controller_timeout_s:
                    raise InfraError(f"{e} for more than controller_timeout_s ({s.controller_timeout_s:g}s) while following job {self.job_id}") from None
                if last_state != "unreachable":
                    self.say(f"slurm job {self.job_id}: {e}; still trying for up to {s.controller_timeout_s:g}s")
                    last_state = "unreachable"
                self.stream()
                time.sleep(s.poll_s)
                continue
            self.stream()
            if info is None:  # neither scontrol nor sacct knows it any more
                return None
            state = f"{info.state} {info.reason}".strip()
            now = time.monotonic()
            if state != last_state or now - last_line >= PROGRESS_EVERY_S:
                node = f" on {info.node}" if info.node and info.state != "PENDING" else ""
                self.say(f"slurm job {self.job_id} {info.state}{node}" + (f" ({info.reason})" if info.reason else "")
                         + (f", run time {info.run_time} of {info.time_limit}" if info.state == "RUNNING" else ""))  # fmt: skip
                last_state, last_line = state, now
            if info.terminal:
                time.sleep(min(1.0, s.poll_s))  # the last lines reach the shared filesystem
                self.stream()
                return info
            if info.state == "PENDING" and now - start > s.pending_timeout_s:
                raise InfraError(f"{self.where}: slurm job {self.job_id} still pending ({info.reason or 'no reason given'}) after pending_timeout_s ({s.pending_timeout_s:g}s); cancelled")
            if now - start > self.cfg.command_timeout_s:
                raise InfraError(f"{self.where}: slurm job {self.job_id} ran past hosts.{self.runner.host}.command_timeout_s ({self.cfg.command_timeout_s:g}s); cancelled")
            time.sleep(s.poll_s)

    def stream(self) -> None:
        """Print what the job wrote since the last look (its stdout to stdout, stderr to stderr)."""
        for name in ("stdout", "stderr"):
            try:
                text = self.runner.read_text(self.files[name])
            except (OSError, InfraError):
                continue
            new = text[self.offsets[name] :]
            cut = new.rfind("\n") + 1  # whole lines only
            self.offsets[name] += cut
            for line in new[:cut].splitlines():
                if name == "stderr" and line.startswith(RUN_DIR_MARK + " "):
                    self.announced.append(line[len(RUN_DIR_MARK) + 1 :].strip())
                    continue
                if name == "stdout" and not self.echo_stdout:
                    continue
                if name == "stderr" and line.startswith("parity: error: "):  # said at the end, unless our own line supersedes it
                    self.error_lines.append(line)
                    continue
                f = sys.stdout if name == "stdout" else sys.stderr
                f.write(f"{self.prefix}{line}\n")
                f.flush()

    def cancel(self, why: str) -> sl.JobInfo | None:
        """scancel the job and wait (bounded by kill_grace_s) until Slurm says it ended."""
        self.say(f"cancelling slurm job {self.job_id} ({why})")
        try:
            sl.cancel(self.runner, self.job_id, self.where, env=self.slurm.env)
        except InfraError as e:
            self.say(f"could not cancel slurm job {self.job_id}: {e}")
            return None
        deadline = time.monotonic() + self.slurm.kill_grace_s
        info = None
        while time.monotonic() < deadline:
            try:
                info = sl.job_info(self.runner, self.job_id, self.where, env=self.slurm.env)
            except InfraError:
                pass
            if info is None or info.terminal:
                break
            time.sleep(min(1.0, self.slurm.poll_s))
        self.stream()
        return info

    # ---- the run dir ------------------------------------------------------------------
    def remote_dir(self) -> str | None:
        try:
            text = self.runner.read_text(self.files["run_dir"]).strip()
        except (OSError, InfraError):
            text = ""
        return text or (self.announced[0] if self.announced else None)

    def pull(self, local_root: Path, info: sl.JobInfo | None, why: str | None = None) -> Path | None:
        remote_dir = self.remote_dir()
        if not remote_dir:
            return None
        local_dir = local_root / Path(remote_dir).name
        self.runner.get(remote_dir, str(local_dir))
        annotate(local_dir, self.runner, remote_dir, None if info is None else info.exit_code)
        record_job(local_dir, self.job_id, info, why)
        self.say(f"run dir ({self.runner.host}:{remote_dir}) -> {local_dir}")
        return local_dir


def job_name(argv: list[str]) -> str:
    _, rest = split_root(argv)
    words = [a for a in rest if not a.startswith("-")][:2]
    return "parity-" + "-".join(words or ["run"])


def describe(info: sl.JobInfo | None, job_id: str) -> str:
    if info is None:
        return f"slurm job {job_id} is no longer known to Slurm (scontrol, sacct) and its end state is unknown"
    reason = f" ({info.reason})" if info.reason else ""
    return f"slurm job {job_id} was ended by Slurm: {info.state}{reason} after {info.run_time or '?'}" + (f" of {info.time_limit}" if info.time_limit else "")


def record_job(local_dir: Path, job_id: str, info: sl.JobInfo | None, why: str | None) -> None:
    """manifest.slurm gets Slurm's final word; a run Slurm (or our scancel) ended is interrupted."""

    if not (local_dir / "manifest.json").is_file():
        return
    rd = RunDir(local_dir)
    m = rd.manifest()
    slurm = dict(m.get("slurm") or {})
    slurm.update({"job_id": job_id, **({k: v for k, v in info.as_dict().items() if k != "job_id"} if info else {"state": "UNKNOWN"})})
    rd.update(slurm=slurm)
    ended_by_slurm = info is None or (info.state in sl.ENDED_BY_SLURM)
    if why or ended_by_slurm:
        reason = why or describe(info, job_id)
        if m.get("status") in ("running", "interrupted", "failed") and not (info and info.state == "COMPLETED"):
            prior = m.get("error") or ""
            rd.finish("interrupted", f"{reason}" + (f" ({prior})" if prior and prior not in reason else ""))


def run_status(local_dir: Path) -> str | None:
    try:
        return RunDir(local_dir).manifest().get("status")
    except (OSError, ValueError):
        return None
