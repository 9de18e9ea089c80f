"""A dry run as a go/no-go, as the users' DRY_RUN=1: could the real run start now?

The users' harness validates its paths and the idle preflight, records hardware.txt and
exits non-zero when it could not run.  go_no_go() checks the same things for parity -- the
GPU lock (held, by whom), the idle preflight (compute processes by pid, running containers),
the files the run needs (models, binaries, tools) and the ports its servers would bind -- and
writes hardware.txt/json, preflight.txt (the users' four lines) and go_no_go.json into the
dry run's own run directory (status `dry-run`).  The verdict says which exit code the real
run would have met: 2 when it could never start as configured (a missing path: retrying
will not help), 4 when it cannot start now (lock held, GPU or docker busy, port taken: the
real run would wait for the lock and time out with 4).
"""

from __future__ import annotations

from pathlib import Path

from parity.errors import EXIT_INFRA, EXIT_OK, EXIT_USAGE, InfraError, UsageError
from parity.context import Run
from parity.ports import port_free
from parity.gpu.hardware import write_hardware
from parity.gpu.lock import AUTO, GpuLock, preflight

LATER = "on the first real run"  # a placeholder for what the real run makes first (a build, an install): fine


def _lock_reason(lock_cfg) -> tuple[str, str | None]:
    """(description, reason or None) of the GPU lock (lock_cfg: the profile's lock section) as the
    real run would find it."""

    lock = GpuLock(lock_cfg, run_id="dry-run")
    st = lock.read()
    if lock.adopt_inherited():
        return f"held for this process by its parent: {lock.record}", None
    if st.state == "legacy":
        return st.describe(), f"GPU lock {lock.dir} {st.describe()}"
    if st.state == "held" and st.reclaim != AUTO:
        return st.describe(), f"GPU lock {lock.dir} {st.describe()}"
    return st.describe(), None


def _path_reason(runner, name: str, path: str) -> str | None:
    if path.startswith("<") and path.endswith(">"):
        return None if LATER in path else path[1:-1]  # "<what: why>" names itself
    return None if runner.exists(path) else f"{name}: {path} does not exist"


def missing(runner, paths: dict[str, str]) -> list[str]:
    """What of paths {what: path or "<placeholder>"} is not there: the go/no-go's path reasons, and
    the real run's refusal (refuse_missing) before its run dir, in the same words."""
    return [why for name, path in paths.items() if (why := _path_reason(runner, name, str(path)))]


def refuse_missing(runner, paths: dict[str, str]) -> None:
    """The real run's first check: a UsageError (exit 2) naming what the dry run's go/no-go would
    call missing, before any run directory, lock or build."""
    problems = missing(runner, paths)
    if problems:
        raise UsageError("; ".join(problems))


def command_paths(runner, commands: list[dict]) -> dict[str, str]:
    """{what: path} for go_no_go from dry-run server commands [{"engine", "argv", "model_error"?, "error"?}]
    (parity.serving.snapshot.dry_run's "commands"): each binary (a bare name is looked up on PATH),
    and each command that could not be resolved or whose model file is missing."""
    paths: dict[str, str] = {}
    for c in commands:
        e = c.get("engine", "?")
        if c.get("error"):
            paths[f"command of {e}"] = f"<{e}: {c['error']}>"
            continue
        def where(exe: str) -> str:
            return exe if "/" in exe or exe.startswith("<") else (runner.which(exe) or f"<{exe} of {e}: not on PATH>")

        if not c.get("argv"):  # a server parity does not start (an endpoint): no binary, only its own start/stop commands
            paths.update({f"{key} command of {e}": where(str(c[key][0])) for key in ("start", "stop") if c.get(key)})
            continue
        exe = str(c["argv"][0])
        paths[f"server of {e}" if exe.startswith("<") else f"{Path(exe).name} of {e}"] = where(exe)
        if c.get("model_error"):
            paths[f"model of {e}"] = f"<model of {e}: {c['model_error']}>"
    return paths


def not_answering(commands: list[dict]) -> list[dict]:
    """Reasons for go_no_go(more=...): a server parity does not start (dry-run commands with
    "spawned" false and "answering"), not answering now, with no start command of its own."""
    return [{"kind": "server", "what": f"engine {c['engine']}: {c['ready']} does not answer ({c['answering']}) and it has no start command: start it first"}
            for c in commands if not c.get("spawned", True) and c.get("answering") != "HTTP 200" and not c.get("start")]  # fmt: skip


def users_preflight_txt(pf: dict | None, lock_raw: str | None) -> str:
    """preflight.txt as the users' harness writes it: docker=N, local_ai_worker=N, compute=N, owner line."""
    d = (pf or {}).get("detail", {}).get("docker", {}) or {}
    g = (pf or {}).get("detail", {}).get("gpu", {}) or {}
    containers = d.get("containers") or []
    local_ai = sum(1 for c in containers if "local-ai-worker" in c)
    owner = (lock_raw or "").strip() or "FREE-no-lock-file"
    return f"docker={len(containers)}\nlocal_ai_worker={local_ai}\ncompute={len(g.get('apps') or [])}\n{owner}\n"


def go_no_go(run: Run, lock_cfg, hardware_class: str | None, *, paths: dict[str, str] | None = None, ports=(),
             gpu: bool = True, more=()) -> dict:  # fmt: skip
    """Check the lock (lock_cfg: the profile's lock section) and idle GPU/docker (gpu=True: the run
    takes the GPU), `paths` {what: path} (a dry_tool_path placeholder for a build to come is fine)
    and `ports`; `more`: the caller's own reasons it cannot start now (a server it does not start,
    not answering); write the evidence into run.dir when there is one; hardware_class: the
    profile's, which the hardware record warns about.
    {"go", "exit_code", "reasons": [{"kind": lock|gpu|docker|path|port|server|gpus, "what"}], ...}
    (path and gpus, a GPU the run names that is not there: exit 2)."""

    reasons: list[dict] = list(more)
    lock_state, why = _lock_reason(lock_cfg) if gpu else ("not checked (nothing in this run takes the GPU)", None)
    if why:
        reasons.append({"kind": "lock", "what": why})
    pf = preflight(run.runner, lock_cfg) if gpu else None
    if pf and not pf["gpu_idle"]:
        reasons.append({"kind": "gpu", "what": f"GPU busy: {pf['gpu']}"})
    if pf and not pf["docker_idle"]:
        reasons.append({"kind": "docker", "what": f"docker busy: {pf['docker']}"})
    checked = {}
    for name, path in (paths or {}).items():
        problem = _path_reason(run.runner, name, str(path))
        checked[name] = {"path": str(path), "ok": problem is None}
        if problem:
            reasons.append({"kind": "path", "what": problem})
    port_state = {}
    for port in dict.fromkeys(ports):
        port_state[port] = port_free(port)
        if not port_state[port]:
            reasons.append({"kind": "port", "what": f"port {port} is in use (another server?)"})
    hw = write_hardware(run.runner, run.out, run.dir, hardware_class, bandwidth=False)  # hardware.txt/json, as the users' dry run records it
    code = EXIT_OK if not reasons else EXIT_USAGE if any(r["kind"] in ("path", "gpus") for r in reasons) else EXIT_INFRA
    doc = {
        "go": not reasons,
        "exit_code": code,
        "reasons": reasons,
        "lock": lock_state,
        "preflight": None if pf is None else {k: v for k, v in pf.items() if k != "detail"},
        "paths": checked,
        "ports": port_state,
        "hardware_class": hw.get("hardware_class"),
    }
    if run.dir is not None:
        raw = GpuLock(lock_cfg).owner_file
        run.dir.write_text("preflight.txt", users_preflight_txt(pf, raw.read_text(errors="replace") if raw.is_file() else None))
        run.dir.write_json("go_no_go.json", doc)
        run.dir.update(go_no_go={"go": doc["go"], "exit_code": code, "reasons": [r["what"] for r in reasons]})
    return doc


def raise_if_no_go(doc: dict, run_dir: str | None = None) -> None:
    """The dry run's exit: UsageError (2) for a missing path, InfraError (4) for a busy GPU/lock/port."""
    if doc["go"]:
        return
    where = f" (evidence: {run_dir})" if run_dir else ""
    msg = "dry run: NO GO: " + "; ".join(r["what"] for r in doc["reasons"]) + where
    raise (UsageError if doc["exit_code"] == EXIT_USAGE else InfraError)(msg)
