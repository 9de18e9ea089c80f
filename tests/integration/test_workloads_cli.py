"""`parity snapshot --workload` through the real CLI without a server: the plan names the
workload and its points; bad input is one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import needs_shared, run_parity

PROFILE = """extends: smoke
serving:
  parallel: 4
  gen: 32
  workloads:
    sp: {kind: shared-prefix, groups: 2, group_size: 4, prefix_tokens: 64, suffix_tokens: 8}
    ol: {kind: open-loop, rates: [1, 2.5], requests_per_rate: 8, slo: {ttft_ms: 500}}
"""


@pytest.fixture(autouse=True)
def _own_lock(tmp_path, monkeypatch):
    """A dry run's go/no-go looks at the lock and the port: this machine's own (~/gpu_bench_lock,
    the profile's port) may be held by another suite's smoke run, which made these exit 4."""
    monkeypatch.setenv("PARITY_LOCK_DIR", str(tmp_path / "lock"))


def own_port(tmp_path, extends: str) -> str:
    """A profile file that is `extends` on a port of its own (nothing else changed)."""
    from tests.integration.test_snapshot import free_port

    p = tmp_path / f"{Path(extends).name}-own-port.yaml"
    p.write_text(f"extends: {extends}\nserving: {{port: {free_port()}}}\n")
    return str(p)


@pytest.fixture
def profile(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text(PROFILE)
    return own_port(tmp_path, str(p))


def test_dry_run_names_the_workload_and_its_points(profile):
    runs = Path(profile).parent / "runs"  # a dry run writes its run dir: not into the checkout's runs/
    arts = ("--artifacts", str(runs))
    r = run_parity(*arts, "snapshot", "--profile", str(profile), "--workload", "ol", "--engines", "stock", "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["npl"] == [1.0, 2.5]
    w = doc["workload"]
    assert (w["name"], w["kind"], w["points"], w["slo"]["ttft_ms"]) == ("ol", "open-loop", ["1 req/s", "2.5 req/s"], 500)
    r = run_parity(*arts, "snapshot", "--profile", str(profile), "--workload", "ol", "--engines", "stock", "--dry-run")
    assert r.returncode == 0 and "workload ol (open-loop): points 1 req/s; 2.5 req/s" in r.stderr + r.stdout
    assert len(list(runs.iterdir())) == 2


@pytest.mark.parametrize(
    "args,text,body",
    [
        (["--workload", "nope"], "--workload nope: no such workload in profile smoke (serving.workloads: sp, ol; built in: shared-prefix, prefill-under-decode, open-loop, multi-turn, prefill-curve, trace)", PROFILE),
        (["--workload", "ol", "--npl", "1,4"], "--npl does not apply to a workload run", PROFILE),
        (["--workload", "sp"], "workload sp: 8 requests in flight exceed --parallel 4: engine stock would queue them; raise --parallel", PROFILE),
        (["--workload", "sp", "--parallel", "8", "--ctx", "640"], "workload sp: a request needs 104 tokens (prompt + generated) but engine stock gives 80", PROFILE),
        (["--workload", "x"], "serving.workloads.x.rates: must be a non-empty list of distinct positive request rates", "extends: smoke\nserving:\n  workloads:\n    x: {kind: open-loop, rates: [1, -2]}\n"),
        (["--workload", "x"], "serving.workloads.x.kind: required key is missing (or name the workload after a built-in kind", "extends: smoke\nserving:\n  workloads:\n    x: {groups: 2}\n"),
        (["--workload", "open-loop", "--workload-opt", "rate=2"], "--workload-opt rate: unknown workload key (did you mean rates?)", PROFILE),
        (["--workload", "open-loop", "--workload-opt", "rates=[1, -2]"], "rates: must be a non-empty list of distinct positive request rates", PROFILE),
        (["--workload", "shared-prefix", "--workload-opt", "groups"], "--workload-opt 'groups': expected KEY=VALUE", PROFILE),
        (["--workload", "x"], "serving.workloads.x.kind: must be one of 'shared-prefix' | 'prefill-under-decode' | 'open-loop' | 'multi-turn' | 'prefill-curve' | 'trace', got 'burst'", "extends: smoke\nserving:\n  workloads:\n    x: {kind: burst}\n"),
        (["--workload", "prefill-curve", "--workload-opt", "n=8"], "workload prefill-curve: 8 requests in flight exceed --parallel 4", PROFILE),
        (["--workload", "prefill-curve", "--workload-opt", "lengths=[128, 4096]"], "workload prefill-curve: a request needs 4112 tokens (prompt + generated) but engine stock gives 2048", PROFILE),
        (["--workload", "prefill-curve", "--workload-opt", "lengths=[512]"], "prefill-curve.lengths: must be a list of at least two distinct prompt lengths", PROFILE),
    ],
)
def test_bad_workload_input_is_one_line_and_exit_2(tmp_path, args, text, body):
    p = tmp_path / "p.yaml"
    p.write_text(body)
    r = run_parity("snapshot", "--profile", str(p), "--engines", "stock", "--dry-run", *args)
    assert r.returncode == 2, r.stderr
    assert text in r.stderr and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


@pytest.mark.parametrize("kind", ["shared-prefix", "prefill-under-decode", "open-loop", "multi-turn", "prefill-curve"])
@pytest.mark.parametrize("profile_name", ["smoke", pytest.param("localai-paged-cpu", marks=needs_shared()), "gb10-qwen36"])
def test_every_kind_runs_by_name_on_every_embedded_profile(kind, profile_name, tmp_path):
    """No YAML: the built-in is sized for the profile, fits the context each engine gives a
    request and its --parallel (a shape that did not would be exit 2 before any plan).  gb10's
    go/no-go fails here after planning, for want of the GB10's files and GPU (2 or 4)."""
    r = run_parity("snapshot", "--profile", own_port(tmp_path, profile_name), "--workload", kind, "--dry-run", "--json", env={"PARITY_ARTIFACTS": str(tmp_path / "runs")})
    assert r.returncode in ((0,) if profile_name != "gb10-qwen36" else (0, 2, 4)), r.stderr
    assert "NO GO" in r.stderr or r.returncode == 0
    w = json.loads(r.stdout)["workload"]
    assert w["kind"] == kind and w["name"] == kind and w["points"]


def test_yaml_overrides_a_builtin_field_by_field_and_the_command_line_overrides_both(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text("extends: smoke\nserving:\n  workloads:\n    open-loop: {requests_per_rate: 5}\n")
    env = {"PARITY_ARTIFACTS": str(tmp_path / "runs")}
    plan = lambda *a: json.loads(run_parity("snapshot", "--profile", str(p), "--workload", "open-loop", "--dry-run", "--json", *a, env=env).stdout)["workload"]  # noqa: E731
    builtin = json.loads(run_parity("snapshot", "--profile", "smoke", "--workload", "open-loop", "--dry-run", "--json", env=env).stdout)["workload"]
    w = plan()
    assert w["requests_per_rate"] == 5 and w["rates"] == builtin["rates"] and w["gen"] == builtin["gen"]  # only the written key moved
    w = plan("--workload-opt", "rates=[0.5, 1]", "--workload-opt", "gen=8")
    assert (w["rates"], w["gen"], w["requests_per_rate"]) == ([0.5, 1.0], 8, 5)
