"""Kill a real `parity campaign run` after its second step, resume it, and only
the remaining steps run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO

CAMPAIGN = """
name: resumable
vars: {marks: /nowhere}
steps:
  - {name: one, kind: shell, with: {argv: [sh, -c, 'echo run >> "$0/one"', "${marks}"]}}
  - {name: two, kind: shell, with: {argv: [sh, -c, 'echo run >> "$0/two"', "${marks}"]}}
  - name: three
    kind: shell
    with: {argv: [sh, -c, 'echo run >> "$0/three"; test -e "$0/go" || sleep 60', "${marks}"]}
  - {name: four, kind: shell, with: {argv: [sh, -c, 'echo run >> "$0/four"', "${marks}"]}}
"""


def lines(p: Path) -> int:
    return len(p.read_text().splitlines()) if p.exists() else 0


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_resume_runs_only_the_remaining_steps(tmp_path, sig):
    camp, marks, arts = tmp_path / "c.yaml", tmp_path / "marks", tmp_path / "runs"
    camp.write_text(CAMPAIGN)
    marks.mkdir()
    base = [sys.executable, "-m", "parity", "--artifacts", str(arts), "campaign", "run", str(camp), "--var", f"marks={marks}"]
    proc = subprocess.Popen(base, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 60
    while lines(marks / "three") == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert lines(marks / "three") == 1
    proc.send_signal(sig)
    proc.communicate(timeout=30)
    if sig == signal.SIGKILL:  # nobody stopped the step's own process group: do it like an operator would
        import os

        for pid in subprocess.run(["pgrep", "-f", f"test -e {marks}/go"], capture_output=True, text=True).stdout.split():
            os.kill(int(pid), signal.SIGKILL)
    (run_dir,) = list(arts.iterdir())
    man = json.loads((run_dir / "manifest.json").read_text())
    assert [man["steps"][s]["status"] for s in ("one", "two")] == ["complete", "complete"]
    assert "four" not in man["steps"]
    assert man["steps"]["three"]["status"] == ("interrupted" if sig == signal.SIGINT else "running")
    if sig == signal.SIGINT:
        assert proc.returncode == 130 and man["status"] == "interrupted"

    plan = subprocess.run(base + ["--resume", str(run_dir), "--dry-run", "--json"], cwd=REPO, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert plan.returncode == 0, plan.stderr
    assert [s["skip"] for s in json.loads(plan.stdout)["steps"]] == [True, True, False, False]

    (marks / "go").write_text("")
    r = subprocess.run(base + ["--resume", str(run_dir)], cwd=REPO, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    assert r.returncode == 0, r.stderr
    assert [lines(marks / n) for n in ("one", "two", "three", "four")] == [1, 1, 2, 1]
    man = json.loads((run_dir / "manifest.json").read_text())
    assert man["status"] == "complete" and man["resumed"] is True
    assert all(man["steps"][s]["status"] == "complete" for s in ("one", "two", "three", "four"))
    assert "[skip] one" in r.stdout and "[skip] two" in r.stdout


def test_resume_refuses_another_campaigns_run_dir(tmp_path):
    a, b, arts = tmp_path / "a.yaml", tmp_path / "b.yaml", tmp_path / "runs"
    a.write_text("name: a\nsteps:\n  - {name: x, kind: shell, with: {argv: ['true']}}\n")
    b.write_text("name: b\nsteps:\n  - {name: x, kind: shell, with: {argv: ['true']}}\n")
    run = lambda *args: subprocess.run([sys.executable, "-m", "parity", "--artifacts", str(arts), "campaign", "run", *args], cwd=REPO, capture_output=True, text=True, stdin=subprocess.DEVNULL)  # noqa: E731
    assert run(str(a)).returncode == 0
    (run_dir,) = list(arts.iterdir())
    r = run(str(b), "--resume", str(run_dir))
    assert r.returncode == 2 and "not a run of campaign 'b'" in r.stderr
    r = run(str(a), "--resume", str(tmp_path))
    assert r.returncode == 2 and "not a parity run directory" in r.stderr


def test_resumes_of_one_run_dir_at_once_run_its_steps_once(tmp_path):
    """Three `--resume DIR` started together: one resumes, the others stop at once with one line
    (before, two or three passed the checks and ran the remaining steps side by side)."""
    camp, marks, arts = tmp_path / "c.yaml", tmp_path / "marks", tmp_path / "runs"
    marks.mkdir()
    camp.write_text("name: twice\nvars: {marks: /nowhere}\nsteps:\n"
                    "  - {name: one, kind: shell, with: {argv: [sh, -c, 'test -e \"$0/ok\" || exit 1; echo run >> \"$0/one\"; "
                    "while [ ! -e \"$0/go\" ]; do sleep 0.1; done', \"${marks}\"]}}\n")  # fmt: skip
    base = [sys.executable, "-m", "parity", "--artifacts", str(arts), "campaign", "run", str(camp), "--var", f"marks={marks}"]
    first = subprocess.run(base, cwd=REPO, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    assert first.returncode != 0
    (run_dir,) = list(arts.iterdir())
    (marks / "ok").write_text("")
    # each interpreter up first, then all three start parity at once (the checks race in the first ~0.1 s)
    together = ["-c", "import runpy, sys, time, os\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.002)\n"
                      "sys.argv = ['parity'] + sys.argv[2:]\nrunpy.run_module('parity', run_name='__main__', alter_sys=True)", str(tmp_path / "start")]  # fmt: skip
    procs = [subprocess.Popen([sys.executable, *together, *base[3:], "--resume", str(run_dir)], cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]  # fmt: skip
    time.sleep(1.0)
    (tmp_path / "start").write_text("")
    deadline = time.monotonic() + 120
    while lines(marks / "one") == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(3)  # time for a second resume to reach the step too, were it let through
    (marks / "go").write_text("")
    results = sorted((p.wait(timeout=120), p.stderr.read()) for p in procs)
    assert lines(marks / "one") == 1
    (ok, _), *refused = results
    assert ok == 0
    for rc, err in refused:
        assert rc == 2 and len(err.strip().splitlines()) == 1, err
        assert "another parity is resuming it" in err or "still running (pid" in err
    assert json.loads((run_dir / "manifest.json").read_text())["steps"]["one"]["status"] == "complete"
