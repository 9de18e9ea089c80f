"""Run a matrix: each target is `parity --host HOST campaign run CAMPAIGN --profile P`
(parity.hosts.registry.delegate: over SSH, or one sbatch job on a Slurm host), its run dir
pulled into <matrix run>/targets/<name>/.  Hosts run at the same time (one thread
each), a host's targets one after another.  Then the cross-hardware report."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from parity.errors import ParityError
from parity.context import Run, run_session
from parity.hosts.registry import delegate
from parity.matrix.report import write_report
from parity.matrix.spec import load_matrix
from parity.runners import ssh


@dataclass
class MatrixRequest:
    file: str
    profile: str | None = None  # overrides the matrix's profile: (where hosts resolve)


def target_argv(mx, t) -> list[str]:
    prof = t.profile or mx.profile
    return ["campaign", "run", mx.campaign, *(["--profile", prof] if prof else []), "--json"]


def run_matrix(run: Run, profile, mx) -> dict:
    """Each target delegated to its host (profile: where hosts resolve), pulled into run's dir; the report."""
    rd = run.dir
    rd.update(matrix={"name": mx.name, "file": mx.source, "sha256": mx.sha256, "campaign": mx.campaign,
                      "targets": [t.__dict__ for t in mx.targets]})  # fmt: skip
    rows: dict[str, dict] = {}

    def one(t) -> None:
        rd.record_step(t.name, "running", kind="target", host=t.host)
        prefix, dest = f"[{t.name}] ", rd.path / "targets" / t.name
        row = {"target": t.name, "host": t.host, "kind": _kind(profile, t.host), "profile": t.profile or mx.profile}
        try:
            res = delegate(t.host, profile, target_argv(mx, t), dest, echo_stdout=False, prefix=prefix)
            row.update(exit_code=res.rc, error=None)
        except ParityError as e:
            run.out.info(f"{prefix}error: {e}")
            row.update(exit_code=e.exit_code, error=str(e))
        pulled = sorted(p for p in dest.iterdir() if (p / "manifest.json").is_file()) if dest.is_dir() else []
        row["run_dir"] = str(pulled[-1].relative_to(rd.path)) if pulled else None
        rows[t.name] = row
        rd.record_step(t.name, "complete" if row["exit_code"] == 0 else "failed", exit_code=row["exit_code"], run_dir=row["run_dir"])

    def host_thread(host: str) -> None:
        for t in mx.targets:
            if t.host == host and not ssh.abort_event.is_set():
                one(t)

    threads = [threading.Thread(target=host_thread, args=(h,), daemon=True, name=f"matrix-{h}") for h in mx.hosts]
    try:
        for th in threads:
            th.start()
        for th in threads:
            while th.is_alive():
                th.join(0.2)
    except KeyboardInterrupt:
        ssh.abort_event.set()  # SSH runs stop their remote group, Slurm jobs are cancelled; run dirs still come back
        for th in threads:
            th.join(180)
        raise
    table = [rows.get(t.name, {"target": t.name, "host": t.host, "exit_code": None, "run_dir": None, "error": "not run"}) for t in mx.targets]
    rd.write_json("matrix.json", table)
    report = write_report(rd.path, mx.name, table)
    doc = {"matrix": mx.name, "run_dir": str(rd.path), "targets": table, "report": report["files"]}
    bad = failures(table, report["targets"])
    if bad:
        err = ParityError(f"matrix {mx.name}: failed on {'; '.join(bad)}; the cross-hardware report is written: {rd.path}/{report['files']['markdown']}")
        err.exit_code = next((r["exit_code"] for r in table if r.get("exit_code")), 1)
        err.summary = doc
        raise err
    return doc


def failures(table: list[dict], targets: list[dict]) -> list[str]:
    """Each target that is not a result: a non-zero exit, no run dir pulled, or one the report
    could not read (exit 0 without a readable run is never green)."""
    errors = {t["target"]: t.get("error") for t in targets}
    out = []
    for r in table:
        if r.get("exit_code") != 0:
            out.append(f"{r['target']} (exit {r.get('exit_code')})")
        elif not r.get("run_dir"):
            out.append(f"{r['target']} (exit 0 but no run directory came back)")
        elif errors.get(r["target"]):
            out.append(f"{r['target']} (its run directory: {errors[r['target']]})")
    return out


def _kind(profile, host: str) -> str:
    cfg = profile.host(host) if profile is not None else None
    return cfg.kind if cfg is not None else "ssh"


def run_request(req: MatrixRequest, open_context) -> dict:
    mx = load_matrix(req.file)
    ctx = open_context(req.profile or mx.profile)
    with run_session(ctx, "matrix", f"{mx.name}-matrix"):
        return run_matrix(ctx.as_run(), ctx.profile, mx)
