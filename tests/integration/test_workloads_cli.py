"""`parity snapshot --workload` through the real CLI without a server: the plan names the
workload and its points; bad input is one line and exit 2."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_parity

PROFILE = """extends: smoke
serving:
  parallel: 4
  gen: 32
  workloads:
    sp: {kind: shared-prefix, groups: 2, group_size: 4, prefix_tokens: 64, suffix_tokens: 8}
    ol: {kind: open-loop, rates: [1, 2.5], requests_per_rate: 8, slo: {ttft_ms: 500}}
"""


@pytest.fixture
def profile(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text(PROFILE)
    return p


def test_dry_run_names_the_workload_and_its_points(profile):
    r = run_parity("snapshot", "--profile", str(profile), "--workload", "ol", "--engines", "stock", "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["npl"] == [1.0, 2.5]
    w = doc["workload"]
    assert (w["name"], w["kind"], w["points"], w["slo"]["ttft_ms"]) == ("ol", "open-loop", ["1 req/s", "2.5 req/s"], 500)
    r = run_parity("snapshot", "--profile", str(profile), "--workload", "ol", "--engines", "stock", "--dry-run")
    assert r.returncode == 0 and "workload ol (open-loop): points 1 req/s; 2.5 req/s" in r.stderr + r.stdout


@pytest.mark.parametrize(
    "args,text,body",
    [
        (["--workload", "nope"], "--workload nope: no such workload in profile smoke (serving.workloads: sp, ol)", PROFILE),
        (["--workload", "ol", "--npl", "1,4"], "--npl does not apply to a workload run", PROFILE),
        (["--workload", "sp"], "workload sp: 8 requests in flight exceed --parallel 4: llama-server would queue them; raise --parallel", PROFILE),
        (["--workload", "sp", "--parallel", "8", "--ctx", "640"], "workload sp: a request needs 104 tokens (prompt + generated) but engine stock gives 80", PROFILE),
        (["--workload", "x"], "serving.workloads.x.rates: must be a non-empty list of distinct positive request rates", "extends: smoke\nserving:\n  workloads:\n    x: {kind: open-loop, rates: [1, -2]}\n"),
        (["--workload", "x"], "serving.workloads.x.kind: must be one of 'shared-prefix' | 'prefill-under-decode' | 'open-loop' | 'multi-turn', got 'burst'", "extends: smoke\nserving:\n  workloads:\n    x: {kind: burst}\n"),
    ],
)
def test_bad_workload_input_is_one_line_and_exit_2(tmp_path, args, text, body):
    p = tmp_path / "p.yaml"
    p.write_text(body)
    r = run_parity("snapshot", "--profile", str(p), "--engines", "stock", "--dry-run", *args)
    assert r.returncode == 2, r.stderr
    assert text in r.stderr and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
