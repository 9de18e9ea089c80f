"""One plan: a dry run and the real run of snapshot, bench, gate, ab, bisect and campaign read the same
options through the same checks, so a bad option gives the same exit code and the same line to
both, before anything happens: no run directory, no build, no model file, no lock.

The profile points the cache and the lock at empty directories of the test's own, so a build,
a model synthesis or a lock taken before the refusal would leave a trace there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FAKES = REPO / "tests" / "fakes" / "bin"


@pytest.fixture
def place(tmp_path):
    lock = tmp_path / "lock"
    prof = tmp_path / "p.yaml"
    prof.write_text(f"extends: smoke\nlock: {{dir: {lock}, docker_no_daemon: idle, nvidia_smi_missing: idle}}\n")
    camp = tmp_path / "camp.yaml"
    return {"prof": prof, "lock": lock, "cache": tmp_path / "cache", "runs": tmp_path / "runs", "camp": camp, "map": tmp_path / "map.yaml"}


def parity(place, *args) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{FAKES}{os.pathsep}{os.environ['PATH']}", PARITY_NO_NVML="1", PARITY_ARTIFACTS=str(place["runs"]), PARITY_CACHE=str(place["cache"]),
               FAKE_NVIDIA_SMI="gb10-idle", FAKE_DOCKER="none")  # fmt: skip
    env.pop("PARITY_GPU_LOCK", None)
    return subprocess.run([sys.executable, "-m", "parity", *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=300, stdin=subprocess.DEVNULL)


def nothing_happened(place) -> list[str]:
    left = []
    if place["runs"].exists() and any(place["runs"].iterdir()):
        left.append(f"run dirs {sorted(p.name for p in place['runs'].iterdir())}")
    if place["cache"].exists():
        made = sorted(str(p.relative_to(place["cache"])) for p in place["cache"].rglob("*") if p.is_file())
        if made:
            left.append(f"cache files {made[:5]}")
    if place["lock"].exists() and any(place["lock"].iterdir()):
        left.append(f"lock files {sorted(p.name for p in place['lock'].iterdir())}")
    return left


# (command, bad options, what the one line must say)
CASES = [
    ("snapshot", ["--until-ci", "-1"], "--until-ci must be a positive number"),
    ("snapshot", ["--order", "xyz"], "--order must be"),
    ("snapshot", ["--max-repeats", "0", "--until-ci", "2"], "--max-repeats must be a positive integer"),
    ("snapshot", ["--budget-s", "nan", "--until-ci", "2"], "--budget-s must be a positive number"),
    ("snapshot", ["--engines", "paged,paged"], "listed twice"),
    ("snapshot", ["--engines", "paged,sglang"], "no such engine"),
    ("snapshot", ["--workload", "nope"], "nope"),
    ("snapshot", ["--model", "nope"], "nope"),
    ("snapshot", ["--allow-env", "X", "--repeat", "0"], "--repeat must be a positive integer"),
    ("snapshot", ["--npl", "8,32,128"], "raise serving.ctx (--ctx) to 40960"),
    ("snapshot", ["--npl", "8", "--parallel", "4"], "raise --parallel to 8"),
    ("gate", ["--model", "nope"], "nope"),
    ("gate", ["--form", "chat2"], "--form"),
    ("gate", ["--expect", "d41d8cd98f00b204e9800998ecf8427e"], "--expect"),
    ("bench", ["--engines", "paged,stock", "--until-ci", "-1"], "--until-ci must be a positive number"),
    ("bench", ["--engines", "paged,stock", "--order", "xyz"], "--order"),
    ("bench", ["--engines", "paged,stock", "--order", "aabb"], "--order"),
    ("bench", ["--engines", "paged,stock", "--max-repeats", "0"], "--max-repeats must be a positive integer"),
    ("bench", ["--engines", "paged,vllm"], "vllm"),
    ("bench", ["--engine", "paged", "--repeat", "3", "--until-ci", "2"], "--until-ci needs two arms"),
    ("bench", ["--model", "nope"], "nope"),
    ("ab", ["--env", "LLAMA_X=1", "--until-ci", "-1"], "--until-ci must be a positive number"),
    ("ab", ["--env", "LLAMA_X=1", "--max-repeats", "0"], "--max-repeats must be a positive integer"),
    ("ab", ["--env", "LLAMA_X=1", "--budget-s", "0"], "--budget-s must be a positive number"),
    ("ab", ["--env", "LLAMA_X=1", "--repeat", "0"], "--repeat must be a positive integer"),
    ("ab", ["--env", "LLAMA_X=1", "--order", "xyz"], "--order"),
    ("ab", ["--env", "LLAMA_X=1", "--reopen", " "], "--reopen"),
    ("ab", ["--env", "LLAMA_X=1", "--serving", "--until-ci", "2", "--order", "aabb"], "--order aabb"),
    ("ab", ["--env", "NOEQUALS"], "NAME=VALUE"),
    ("bisect", ["--criterion", "metric", "--metric", "nope"], "--metric"),
    ("bisect", ["--criterion", "metric", "--min-delta-pct", "-1"], "--min-delta-pct"),
    ("bisect", ["--criterion", "md5", "--model", "nope"], "nope"),
    ("bisect", ["--criterion", "metric", "--blocks", "0"], "--blocks"),
    ("bisect", ["--criterion", "metric", "--npl", "0"], "--npl"),
]
CAMPAIGNS = [
    ("name: c\nsteps:\n  - {name: s, kind: snapshot, with: {until_ci: -1}}\n", "step s (snapshot): with.until_ci must be a positive number"),
    ("name: c\nsteps:\n  - {name: s, kind: snapshot, with: {order: xyz}}\n", "order"),
    ("name: c\nsteps:\n  - {name: b, kind: bench, with: {engines: [paged, stock], max_repeats: 0}}\n", "with.max_repeats must be a positive integer"),
    ("name: c\nsteps:\n  - {name: g, kind: gate, with: {models: [nope]}}\n", "nope"),
    ("name: c\nsteps:\n  - {name: s, kind: snapshot, with: {engines: [paged, nope]}}\n", "nope"),
    ("name: c\nsteps:\n  - {name: p, kind: profile, with: {ntg: [8, 8]}}\n", "ntg"),
    ("name: c\nsteps:\n  - {name: l, kind: lock, with: {timeout_s: -1}}\n", "timeout_s"),
]


def one_line(r) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("parity: error:")]
    assert len(lines) == 1, r.stderr[-2000:]
    return lines[0].split(" (evidence:")[0]


@pytest.mark.parametrize("cmd,args,says", CASES, ids=[f"{c}{' '.join(a)}" for c, a, _ in CASES])
def test_the_dry_run_and_the_real_run_refuse_alike_before_anything(place, cmd, args, says):
    extra = ["--map", str(place["map"])] if cmd == "ab" else []
    dry = parity(place, cmd, "-p", str(place["prof"]), *args, *extra, "--dry-run")
    assert nothing_happened(place) == [], dry.stderr[-1500:]
    real = parity(place, cmd, "-p", str(place["prof"]), *args, *extra)
    assert (dry.returncode, real.returncode) == (2, 2), (dry.stderr[-1500:], real.stderr[-1500:])
    assert one_line(dry) == one_line(real) and says in one_line(real)
    assert nothing_happened(place) == []


@pytest.mark.parametrize("text,says", CAMPAIGNS, ids=[f"camp{i}" for i in range(len(CAMPAIGNS))])
def test_a_campaign_refuses_a_bad_step_in_its_dry_run_as_in_its_real_run(place, text, says):
    place["camp"].write_text(f"profile: {place['prof']}\n" + text)
    dry = parity(place, "campaign", "run", str(place["camp"]), "--dry-run")
    assert nothing_happened(place) == [], dry.stderr[-1500:]
    real = parity(place, "campaign", "run", str(place["camp"]))
    assert (dry.returncode, real.returncode) == (2, 2), (dry.stderr[-1500:], real.stderr[-1500:])
    assert one_line(dry) == one_line(real) and says in one_line(real)
    assert nothing_happened(place) == []


def test_the_readmes_first_dry_run_on_a_fresh_machine_says_go(place):
    """`parity snapshot -p smoke --dry-run` on a machine with nothing in its cache: the builds, the
    vLLM venv and the models the real run would make first are named as such, and it says go."""
    import json

    r = parity(place, "snapshot", "-p", "smoke", "--dry-run", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert doc["go_no_go"]["go"] is True and doc["go_no_go"]["reasons"] == []
    argv0 = {c["engine"]: c["argv"][0] for c in doc["commands"]}
    assert "built on the first real run" in argv0["paged"] and "installed on the first real run" in argv0["vllm"], argv0
    assert not (place["cache"] / "builds").exists() and not (place["cache"] / "vllm").exists()  # nothing made
