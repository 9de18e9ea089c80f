"""One OpenBLAS thread in parity's own process; the commands it starts keep the caller's setting."""

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


SHOW = ["sh", "-c", "echo OPENBLAS=${OPENBLAS_NUM_THREADS-unset}"]


def _env(callers: str | None = None) -> dict[str, str]:
    """This environment with OPENBLAS_NUM_THREADS as a caller sets it (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    return env if callers is None else {**env, "OPENBLAS_NUM_THREADS": callers}


def _threads_after_numpy(limit: bool) -> int:
    code = f"from parity import openblas\n{'openblas.limit()' if limit else ''}\nimport numpy, os\nprint(len(os.listdir('/proc/self/task')))"
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), check=True).stdout)


@pytest.mark.skipif((os.cpu_count() or 1) < 2 or not os.path.isdir("/proc/self/task"), reason="OpenBLAS starts no pool thread on one core")
def test_limit_keeps_numpy_to_one_thread():
    assert _threads_after_numpy(limit=False) > 1
    assert _threads_after_numpy(limit=True) == 1


@pytest.mark.parametrize("callers, seen", [(None, "unset"), ("4", "4"), ("1", "1")])
def test_the_command_parity_starts_gets_the_callers_setting(tmp_path, callers, seen):
    r = subprocess.run([sys.executable, "-m", "parity", "lock", "run", "--lock-dir", str(tmp_path / "lock"), "--", *SHOW],
                       capture_output=True, text=True, env=_env(callers), cwd=REPO, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert f"OPENBLAS={seen}" in r.stdout + r.stderr


def test_callers_environ_drops_only_what_limit_added(monkeypatch):
    from parity import openblas

    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.setattr(openblas, "_set_here", False)
    openblas.limit()
    assert os.environ["OPENBLAS_NUM_THREADS"] == "1" and "OPENBLAS_NUM_THREADS" not in openblas.callers_environ()
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "8")  # changed since: the caller's own
    assert openblas.callers_environ()["OPENBLAS_NUM_THREADS"] == "8"
    monkeypatch.setattr(openblas, "_set_here", False)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    openblas.limit()
    assert openblas.callers_environ()["OPENBLAS_NUM_THREADS"] == "1"


def test_a_parity_process_limits_itself_first():
    code = ("import atexit, os, sys\nsys.argv = ['parity', '--version']\n"
            "atexit.register(lambda: print('OPENBLAS=' + os.environ.get('OPENBLAS_NUM_THREADS', 'unset'), 'numpy' in sys.modules))\n"
            "from parity.cli import entry\nentry()")  # fmt: skip
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), cwd=REPO, timeout=120)
    assert "OPENBLAS=1 False" in r.stdout, r.stdout + r.stderr
