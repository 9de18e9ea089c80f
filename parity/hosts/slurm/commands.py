"""The Slurm client commands parity uses: sbatch, scontrol show job, sacct, scancel.
Pure `parse_*` functions over their captured text (samples from a real Slurm 22.05 in
tests/data/slurm/), and thin functions that run them through a Runner
(local on a login node, SSH to one).  Slurm does the scheduling; parity only reads it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from parity.errors import InfraError, UsageError

# states after which Slurm will not run the job again (without a requeue)
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "SPECIAL_EXIT", "REVOKED"}
# terminal states in which Slurm, not the job, ended the run: the run is interrupted and can be resumed
ENDED_BY_SLURM = {"TIMEOUT", "PREEMPTED", "NODE_FAIL", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "CANCELLED", "REVOKED"}

# sbatch / scontrol error text -> bad input (exit 2) or the controller is not answering (exit 4)
_USAGE = re.compile(r"invalid partition|invalid generic resource|invalid account|invalid qos|time limit is invalid|"
                    r"requested node configuration is not available|invalid feature|invalid (job )?constraint|"
                    r"unrecognized option|invalid option|invalid (--)?\w+ specification|invalid user", re.I)
_UNREACHABLE = re.compile(r"unable to contact slurm controller|socket timed out|connection refused|"
                          r"communication connection failure|zero bytes were transmitted", re.I)


@dataclass
class JobInfo:
    job_id: str
    state: str  # PENDING RUNNING COMPLETING COMPLETED FAILED CANCELLED TIMEOUT ...
    reason: str = ""  # why pending / why ended (None -> "")
    exit_code: int | None = None  # the batch script's exit code (ExitCode=rc:signal)
    signal: int | None = None
    node: str = ""
    partition: str = ""
    run_time: str = ""
    time_limit: str = ""
    name: str = ""

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def parse_sbatch(text: str) -> str:
    """The job id from `sbatch --parsable` ("123" or "123;cluster")."""
    for line in text.strip().splitlines():
        m = re.fullmatch(r"\s*(\d+)(;\S+)?\s*", line)
        if m:
            return m.group(1)
    raise ValueError(f"no job id in sbatch output: {text.strip()[:200]!r}")


def parse_keyvals(line: str) -> dict[str, str]:
    """`scontrol show -o` fields: Key=Value separated by spaces (a value runs to the next ` Key=`)."""
    out: dict[str, str] = {}
    for m in re.finditer(r"(?:^|\s)([A-Za-z][A-Za-z0-9_/:]*)=(.*?)(?=\s+[A-Za-z][A-Za-z0-9_/:]*=|\s*$)", line.strip()):
        out[m.group(1)] = m.group(2)
    return out


def parse_scontrol_job(text: str) -> JobInfo | None:
    """`scontrol show job -o ID`; None for "Invalid job id specified" (unknown or purged)."""
    for line in text.splitlines():
        if line.startswith("JobId="):
            f = parse_keyvals(line)
            rc, sig = _exit_code(f.get("ExitCode", ""))
            reason = f.get("Reason", "")
            return JobInfo(
                job_id=f["JobId"], state=f.get("JobState", "UNKNOWN"), reason="" if reason in ("None", "(null)") else reason,
                exit_code=rc, signal=sig, node=_null(f.get("NodeList", "")), partition=_null(f.get("Partition", "")),
                run_time=f.get("RunTime", ""), time_limit=f.get("TimeLimit", ""), name=f.get("JobName", ""),
            )  # fmt: skip
    return None


def parse_sacct(text: str) -> JobInfo | None:
    """`sacct -n -P -X -j ID -o JobID,State,ExitCode,NodeList,Elapsed`; None when accounting is off
    ("Slurm accounting storage is disabled") or the job is not there."""
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 3 and re.fullmatch(r"\d+", parts[0]):
            state = parts[1].split()[0]  # "CANCELLED by 0"
            rc, sig = _exit_code(parts[2])
            return JobInfo(job_id=parts[0], state=state, reason=parts[1], exit_code=rc, signal=sig,
                           node=parts[3] if len(parts) > 3 else "", run_time=parts[4] if len(parts) > 4 else "")  # fmt: skip
    return None


def classify_error(text: str) -> str:
    """'usage' (bad input), 'unreachable' (controller down) or 'other'."""
    if _UNREACHABLE.search(text):
        return "unreachable"
    if _USAGE.search(text):
        return "usage"
    return "other"


def error_line(text: str) -> str:
    """The most telling line of a Slurm command's error output."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "failed:" in ln or "error:" in ln:
            return re.sub(r"^\S+: error: ", "", ln)
    return lines[-1] if lines else "no output"


def _exit_code(value: str) -> tuple[int | None, int | None]:
    m = re.fullmatch(r"(\d+):(\d+)", value.strip())
    return (int(m.group(1)), int(m.group(2))) if m else (None, None)


def _null(v: str) -> str:
    return "" if v in ("(null)", "None") else v


# --------------------------------------------------------------------------- through a Runner


def _fail(where: str, what: str, res) -> None:
    text = res.stdout + res.stderr
    if res.rc == 127:
        raise UsageError(f"{where}: {what.split()[0]} not found (is this a Slurm login node? hosts.NAME.hostname names one)")
    kind = classify_error(text)
    if kind == "usage":
        raise UsageError(f"{where}: {what}: {error_line(text)}")
    if kind == "unreachable" or res.timed_out:
        raise InfraError(f"{where}: {what}: the Slurm controller is unreachable ({error_line(text) if text.strip() else 'timed out'})")
    raise InfraError(f"{where}: {what} failed (exit {res.rc}): {error_line(text)}")


def sbatch_argv(script: str, *, job_name: str, output: str, error: str, chdir: str, cfg) -> list[str]:
    """sbatch options from a SlurmConfig (parity.config); the script path last."""
    argv = ["sbatch", "--parsable", f"--job-name={job_name}", f"--output={output}", f"--error={error}", f"--chdir={chdir}"]
    for opt, val in (("partition", cfg.partition), ("gres", cfg.gres), ("gpus", cfg.gpus), ("account", cfg.account), ("qos", cfg.qos), ("time", cfg.time)):
        if val not in (None, ""):
            argv.append(f"--{opt}={val}")
    return argv + [str(a) for a in cfg.sbatch_args] + [script]


def submit(runner, argv: list[str], where: str, timeout: float = 120, env: dict | None = None) -> str:
    res = runner.run(argv, timeout=timeout, env=env)
    if not res.ok:
        _fail(where, "sbatch", res)
    try:
        return parse_sbatch(res.stdout)
    except ValueError as e:
        raise InfraError(f"{where}: sbatch: {e}") from None


def job_info(runner, job_id: str, where: str, timeout: float = 60, env: dict | None = None) -> JobInfo | None:
    """The job's state from scontrol (sacct when scontrol no longer knows it); None when
    neither knows it.  An unreachable controller raises InfraError."""
    res = runner.run(["scontrol", "show", "job", "-o", job_id], timeout=timeout, env=env)
    if res.ok:
        return parse_scontrol_job(res.stdout)
    if "invalid job id" not in (res.stdout + res.stderr).lower():
        _fail(where, "scontrol show job", res)
    acct = runner.run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "JobID,State,ExitCode,NodeList,Elapsed"], timeout=timeout, env=env)
    return parse_sacct(acct.stdout) if acct.ok else None


def cancel(runner, job_id: str, where: str, timeout: float = 60, env: dict | None = None) -> None:
    res = runner.run(["scancel", job_id], timeout=timeout, env=env)
    if not res.ok:
        _fail(where, f"scancel {job_id}", res)
