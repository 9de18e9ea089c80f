"""Shared fixtures.  Heavy ones (real llama.cpp builds, synthesized models) are
session-scoped and cached under ~/.cache/parity, so CI builds once per machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from parity.runners.local import LocalRunner

# pytest keeps its assert-rewritten test modules in __pycache__ only where bytecode may be
# written; with PYTHONDONTWRITEBYTECODE set (as on the CI box) each of make test's 4 workers
# rewrote every module again (collection 3.5 -> 1.3 CPU-s a process).  make setup's compileall
# writes the same folders; the processes the tests start keep the setting.
sys.dont_write_bytecode = False

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"


def run_parity(*args: str, env: dict | None = None, cwd: str | Path | None = None, timeout: float = 600, input: str | None = None):
    """Run the real CLI in a subprocess; returns CompletedProcess (text)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "parity", *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=cwd or REPO,
        timeout=timeout,
        input=input,
        stdin=None if input is not None else subprocess.DEVNULL,
    )


# The files that hold most of the suite's minutes (vLLM starts, full campaigns, real sweeps),
# longest first: collected first, so that `make test`'s workers (pytest-xdist, --dist loadfile,
# --no-loadscope-reorder) start them at once and the short files fill in behind them.  Only the
# order changes; a file not named here keeps its place after them.
LONGEST_FIRST = [  # by their seconds in a warm four-worker run (2026-11-26, 2-core box: 258 s down to 24)
    "integration/test_capacity_real.py",  # ~7 min alone (2026-11-29): llama-server then vLLM, 6 blocks each
    "integration/test_workloads_real.py",
    "integration/test_replay_real.py",
    "integration/test_remote_cli.py",
    "integration/test_bisect_series.py",
    "integration/test_real_engine.py",
    "integration/test_slurm_cli.py",
    "integration/test_bisect_canary.py",
    "integration/test_vllm_real.py",
    "integration/test_endpoint_real.py",
    "integration/test_real_series.py",
    "integration/test_adaptive.py",
    "unit/test_shared_writers.py",
    "unit/test_fuzz_inputs.py",
    "integration/test_levers_real.py",
    "integration/test_lock_contention.py",
    "integration/test_slurm_smoke.py",
    "integration/test_matrix_cli.py",
    "integration/test_workloads_cli.py",
    "integration/test_snapshot.py",
    "integration/test_gates_prepost.py",
    "integration/test_report_real.py",
    "unit/test_build_before_lock.py",
    "integration/test_plan_agreement.py",
    "integration/test_gates_real.py",
    "unit/test_build_cache.py",
    "integration/test_bisect_pin_build.py",
    "integration/test_build_llama.py",
]


# xdist (LoadScopeScheduling._reschedule) gives a worker whose file has at most 2 tests left its
# next file at once: with N >= 3 workers, file N+1 waits behind the series bisection (2 tests,
# most of a cold run).  That place gets a short file: with test_slurm_cli.py there (its minutes are
# Slurm's waits, not CPU), a cold run ended on 3 minutes of an idle box after the bisection.
BEHIND_THE_BISECTION = "unit/test_server_metrics.py"


def pytest_collection_modifyitems(config, items):
    workers = int(getattr(config, "workerinput", {}).get("workercount", 0))  # the scheduler orders by the workers' collections
    order = LONGEST_FIRST[:workers] + [BEHIND_THE_BISECTION] + LONGEST_FIRST[workers:] if workers else LONGEST_FIRST
    rank = {name: i for i, name in enumerate(order)}

    def key(item):
        rel = Path(str(item.fspath)).relative_to(REPO / "tests").as_posix() if str(item.fspath).startswith(str(REPO / "tests")) else ""
        return rank.get(rel, len(rank))

    items.sort(key=key)  # stable: within a file, and among the others, the collected order


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    """The temp dirs of old sessions (pytest keeps the last tmp_path_retention_count) go to a
    detached `rm -rf` instead of being deleted by pytest after the last test: a suite leaves
    tens of thousands of files (git trees, copies of llama.cpp), and on this box's ext4 (mounted
    with `discard`) unlinking 40k files took 7 s when idle and 141 s beside a cold build.  Dirs
    with a .lock (a session still running) stay."""
    import re

    factory = getattr(session.config, "_tmp_path_factory", None)
    if hasattr(session.config, "workerinput") or factory is None:
        return
    base = getattr(factory, "_basetemp", None)  # None: no test made a temp dir (nothing was numbered)
    if base is not None:
        _no_run_took_the_users_lock(session, base)
    if session.config.option.basetemp:
        return
    m = re.fullmatch(r"pytest-(\d+)", base.name) if base else None
    if not m:
        return
    keep = int(session.config.getini("tmp_path_retention_count"))
    trash = base.parent / f"parity-trash-{os.getpid()}"
    for old in base.parent.glob("pytest-*"):
        n = old.name[len("pytest-"):]
        if n.isdigit() and int(n) <= int(m.group(1)) - keep and not old.is_symlink() and not (old / ".lock").exists():
            trash.mkdir(exist_ok=True)
            old.rename(trash / old.name)
    if any(base.parent.glob("parity-trash-*")):
        subprocess.Popen(["sh", "-c", f'rm -rf "{base.parent}"/parity-trash-*'], start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _no_run_took_the_users_lock(session, base: Path) -> None:
    """A test's run must take a lock of its own, never ~/gpu_bench_lock (the profiles' default):
    on the GB10 that is the real GPU lock, and a suite run there would hold up, or wait on, a
    benchmark.  Four tests took it before this check.  A run dir whose lock.json names it fails
    the session (~0.6 s to look through a whole suite's 49k temp files)."""
    import json

    from parity.config import LockConfig, expand_path

    users = expand_path(LockConfig().dir)
    took = []
    for p in base.rglob("lock.json"):
        try:
            if json.loads(p.read_text()).get("dir") == users:
                took.append(str(p.parent))
        except (OSError, ValueError, AttributeError):
            continue
    if took:
        tw = session.config.get_terminal_writer()
        tw.line()
        tw.line(f"these runs took the user's own GPU lock {users} (give them a lock dir of their own): {', '.join(sorted(took))}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session", autouse=True)
def _isolated_series_registry(tmp_path_factory):
    """The series-tree registry (parity.llamacpp.mirror) of a test run is its own, never the
    user's ~/.config/parity/series-trees.yaml (CLI subprocesses inherit it too)."""
    if "PARITY_SERIES_TREES" not in os.environ:
        os.environ["PARITY_SERIES_TREES"] = str(tmp_path_factory.mktemp("series-registry") / "series-trees.yaml")
    yield


os.environ.pop("PARITY_PROFILE", None)  # the suite's commands without -p mean smoke, whatever this shell's default


@pytest.fixture(scope="session", autouse=True)
def _history_store_off():
    """Runs of the suite keep out of a history store (each would add ~0.2 CPU-s of DuckDB at its
    end); the history tests name their own store with PARITY_HISTORY or --store."""
    os.environ.setdefault("PARITY_HISTORY", "off")
    yield


SHARED = REPO.parent / "shared"


def shared_or_skip(*rel: str) -> Path:
    """A path under ../shared (the project's test data beside the checkout): skipped with one
    line when it is missing (a fresh clone), a failure in CI, where it must be there."""
    for r in rel:
        if not (SHARED / r).exists():
            if os.environ.get("CI"):
                pytest.fail(f"../shared/{r} is missing (CI must provide ../shared)")
            pytest.skip(f"no ../shared/{r} beside this checkout (the users' real series and pin)")
    return SHARED


USERS_SERIES = ("localai-paged/Makefile", "localai-paged/patches/paged", "llama.cpp-pin/llama.cpp-0ed235ea.tar.gz")


def needs_shared(*rel: str):
    """The mark of a test (or one parametrized case: pytest.param(..., marks=needs_shared(...)))
    that reads ../shared/<rel> (default: the users' series and pin, what the localai-paged-cpu
    profile builds): shared_or_skip before it runs."""
    return pytest.mark.needs_shared(*(rel or USERS_SERIES))


def pytest_configure(config):
    config.addinivalue_line("markers", "needs_shared(*paths): reads ../shared/PATH; skipped with one line where it is missing, "
                                       "a failure in CI")


def pytest_runtest_setup(item):
    for mark in item.iter_markers("needs_shared"):
        shared_or_skip(*mark.args)


def vllm_venv_or_skip():
    """parity's cached vLLM CPU venv (installed on first use); skipped with one line when vLLM
    cannot be installed here (no index to download torch or vllm from)."""
    from parity.engines import vllm_install
    from parity.ui import Output

    try:
        vllm_install.ensure_vllm(Output(json_mode=True))
    except vllm_install.VllmInstallError as e:
        if e.step in ("torch", "vllm"):
            pytest.skip(f"vLLM cannot be installed here: {e}")
        raise
    return vllm_install.venv()


def kl_runs_losing_their_tail(bin_dirs: dict, ref: str, model: str, text: str, tmp_path: Path, timeout: float) -> int:
    """How many of 20 KL runs (10 per engine in bin_dirs' stock and paged, three CPU hogs
    beside them) lost their last statistics line: llama.cpp's leaked async logger dropped the
    end of the output at exit before the source fixup."""
    from parity.gates import perplexity

    env = {"PATH": "/usr/bin:/bin", "GGML_NO_BACKTRACE": "1"}
    logits = tmp_path / "base.kld"
    tool = str(bin_dirs["stock"] / "llama-perplexity")
    base = subprocess.run(perplexity.base_argv(tool, ref, text, 128, 4, str(logits), ["-t", "1"]), env=env, capture_output=True, timeout=timeout)
    assert base.returncode == 0 and logits.stat().st_size > 0, base.stderr[-500:]
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(3)]
    try:
        lost = 0
        for name in ("stock", "paged"):
            argv = perplexity.kl_argv(str(bin_dirs[name] / "llama-perplexity"), model, str(logits), 128, 4, ["-t", "1"])
            for _ in range(10):
                r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
                assert r.returncode == 0, r.stderr[-500:]
                lost += "Same top p:" not in r.stdout  # the last statistics line
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    return lost


class CountingRunner(LocalRunner):
    """A LocalRunner that records every argv it runs (to prove what a cache hit skips)."""

    def __init__(self):
        self.calls: list[list[str]] = []

    def run(self, argv, **kw):
        self.calls.append([str(a) for a in argv])
        return super().run(argv, **kw)


@pytest.fixture
def parity_cli():
    return run_parity


@pytest.fixture(scope="session")
def smoke_profile():
    from parity.config import load_profile

    return load_profile("smoke")


@pytest.fixture(scope="session")
def tiny_model(smoke_profile) -> Path:
    """The smoke profile's `tiny` GGUF, synthesized on first use."""
    from parity.models.synth import ensure_model

    return Path(ensure_model(smoke_profile, "tiny"))


@pytest.fixture(scope="session")
def engine_bins(smoke_profile) -> dict[str, Path]:
    """Real CPU builds of the smoke engines (paged = demo series, stock), cached."""
    from parity.llamacpp.build import ensure_built
    from parity.engines.bound import bind
    from parity.runners.local import LocalRunner
    from parity.ui import Output

    out = Output(json_mode=True)
    return {name: Path(ensure_built(bind(smoke_profile, name), LocalRunner(), out).bin_dir) for name in ("paged", "stock")}


# --------------------------------------------------------------------------- real sshd (remote runs)


@pytest.fixture(scope="session")
def sshd_server(tmp_path_factory):
    """A real OpenSSH server on 127.0.0.1 (tests/sshd.py); CI installs openssh-server."""
    import shutil

    if not Path("/usr/sbin/sshd").exists() or not shutil.which("ssh-keygen"):
        if os.environ.get("CI"):
            pytest.fail("openssh-server is required (apt-get install -y openssh-server)")
        pytest.skip("no /usr/sbin/sshd here")
    import sshd as _sshd

    server = _sshd.start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def ssh_profile(sshd_server, tmp_path_factory) -> Path:
    """A profile (extends smoke) whose hosts reach sshd_server: local-ssh (good),
    local-ssh-b (same server, own workdir), and one broken entry per bad input."""
    import yaml
    from sshd import free_port

    base = tmp_path_factory.mktemp("ssh-remote")
    empty_known = base / "known_hosts_empty"
    empty_known.write_text("")
    s = sshd_server
    hosts = {
        "local-ssh": s.host_entry(base / "work-a"),
        "local-ssh-b": s.host_entry(base / "work-b"),
        "closed-port": s.host_entry(base / "work-x", port=free_port()),
        "wrong-key": s.host_entry(base / "work-x", identity_file=str(s.wrong_key)),
        "unknown-key": s.host_entry(base / "work-x", known_hosts=str(empty_known)),
        "accept-new": s.host_entry(base / "work-a", known_hosts=str(base / "known_hosts_new"), host_key_policy="accept-new"),
        "no-parity": s.host_entry(base / "work-x", parity=str(base / "does-not-exist" / "parity")),
    }
    path = base / "profile.yaml"
    path.write_text(yaml.safe_dump({"extends": "smoke", "name": "smoke-ssh", "hosts": hosts}))
    return path


@pytest.fixture
def mini_build(tmp_path, monkeypatch):
    """Factory for a profile whose llama engines build tests/data/build/mini-llama (a real
    tiny CMake project with llama.cpp's option and target names) in seconds, into a
    private PARITY_CACHE.  make(engines=None, series=None, fixups=None) -> profile YAML
    path; default engines: paged (tests/data/build/mini-series) and stock."""
    import shutil

    import yaml

    monkeypatch.setenv("PARITY_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "mini-src"
    shutil.copytree(DATA / "build" / "mini-llama", src)

    def make(engines: dict | None = None, series: str | Path | None = None, fixups: str | Path | None = None) -> Path:
        targets = ["llama-completion", "test-backend-ops"]
        if engines is None:
            engines = {
                "paged": {"source": "mini", "series": str(series or DATA / "build" / "mini-series"), "targets": targets},
                "stock": {"source": "mini", "targets": targets},
            }
        doc = {"name": "mini", "sources": {"mini": {"kind": "path", "path": str(src)}}, "engines": engines}
        if fixups:
            doc["sources"]["mini"]["fixups"] = str(fixups)
        path = tmp_path / "mini-profile.yaml"
        path.write_text(yaml.safe_dump(doc))
        return path

    make.src = src
    return make


# --------------------------------------------------------------------------- real Slurm (slurm hosts)


@pytest.fixture(scope="session")
def slurm_cluster():
    """A real single-node Slurm on localhost (tests/slurmd.py: munged, slurmctld, slurmd from
    Debian's slurm-wlm and munge), shared by every Slurm test; SLURM_CONF points the client
    commands (and every parity subprocess) at it."""
    import shutil

    if not shutil.which("slurmctld") or not shutil.which("munged"):
        if os.environ.get("CI"):
            pytest.fail("slurm-wlm and munge are required (scripts/ensure-system-deps installs them)")
        pytest.skip("no slurmctld/munged here (apt-get install slurm-wlm munge)")
    import slurmd as _slurmd

    cluster = _slurmd.start_slurm()
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(cluster.conf)
    yield cluster
    cluster.stop()
    if before is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = before
    _slurmd.remove(cluster)


def slurm_host_entry(cluster, workdir: Path, **slurm) -> dict:
    """A profile `hosts:` entry submitting to the test cluster from this machine."""
    return {"kind": "slurm", "workdir": str(workdir), "python": sys.executable,
            "slurm": {"partition": cluster.partition, "poll_s": 1.0, "controller_timeout_s": 20.0, "kill_grace_s": 60.0, **slurm}}


@pytest.fixture(scope="session")
def slurm_profile(slurm_cluster, tmp_path_factory) -> Path:
    """A profile (extends smoke) whose hosts submit to slurm_cluster: slurm-local (good),
    slurm-short (--time=1), slurm-bad-partition."""
    import yaml

    base = tmp_path_factory.mktemp("slurm-remote")
    work = base / "work"  # one workdir: the bootstrapped venv is shared, run dirs stay for --resume
    hosts = {
        "slurm-local": slurm_host_entry(slurm_cluster, work),
        "slurm-short": slurm_host_entry(slurm_cluster, work, time="1"),
        "slurm-bad-partition": slurm_host_entry(slurm_cluster, work, partition="no-such-partition"),
    }
    path = base / "profile.yaml"
    path.write_text(yaml.safe_dump({"extends": "smoke", "name": "smoke-slurm", "hosts": hosts}))
    return path
