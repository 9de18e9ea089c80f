"""End to end: `parity profile --graph-node --workload bench` with the fake nsys
wrapping the real CPU llama-batched-bench, and the `profile` campaign step."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
from pathlib import Path

import pytest

FAKE_BIN = Path(__file__).resolve().parent.parent / "fakes" / "bin"


def _fake_nsys_module():
    loader = importlib.machinery.SourceFileLoader("fake_nsys", str(FAKE_BIN / "nsys"))
    spec = importlib.util.spec_from_loader("fake_nsys", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


@pytest.fixture
def env_prof(tmp_path, engine_bins, tiny_model):
    prof = tmp_path / "prof.yaml"
    prof.write_text(
        "extends: smoke\n"
        f"lock: {{dir: {tmp_path / 'lock'}, poll_s: 0.2}}\n"
        f"engines: {{paged: {{bin_dir: {engine_bins['paged']}}}, stock: {{bin_dir: {engine_bins['stock']}}}}}\n"
        "profiling: {ntg: [8, 4], npl: 2, npp: 16, blocks: 1, tracer: nsys}\n"
    )
    env = {
        "PATH": f"{FAKE_BIN}{os.pathsep}{os.environ['PATH']}",
        "FAKE_NSYS_LOG": str(tmp_path / "nsys-argv.log"),
        "PARITY_ARTIFACTS": str(tmp_path / "runs"),
    }
    return str(prof), env


def test_graph_node_bench_capture_end_to_end(parity_cli, env_prof, tmp_path):
    prof, env = env_prof
    r = parity_cli("profile", "--graph-node", "--workload", "bench", "--model", "tiny", "--json", "-p", prof, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    run = Path(doc["run_dir"])
    analysis = json.loads((run / "profile" / "analysis.json").read_text())
    assert analysis["collapsed"] is False and [c["ntg"] for c in analysis["captures"]] == [8, 4]
    # nsys wrapped the real llama-batched-bench with graph-node tracing, then exported
    calls = [json.loads(x) for x in (tmp_path / "nsys-argv.log").read_text().splitlines()]
    prof_calls = [c for c in calls if c[0] == "profile"]
    assert len(prof_calls) == 2 and all(c[1] == "--cuda-graph-trace=node" for c in prof_calls)
    assert Path(prof_calls[0][prof_calls[0].index("--force-overwrite") + 2]).name == "llama-batched-bench"
    assert [c[0] for c in calls].count("export") == 2
    log = (run / "profile" / "paged-bench-ntg8.log").read_text()
    assert "llama_model_loader" in log or "llama_batched_bench" in log  # the real binary ran under nsys
    # the difference method recovers the fake's declared decode cost exactly
    fake = _fake_nsys_module()
    npl = 2
    step_ns = fake.LAYERS * sum(base + per * npl for _, base, per in fake.DECODE_STEP)
    (d,) = analysis["difference"]  # one engine, two ntg values
    assert (d["ntg_long"], d["ntg_short"], d["npl"], d["steps"]) == (8, 4, 2, 4)
    assert d["total"]["ms_per_step"] == pytest.approx(step_ns / 1e6, rel=1e-6)
    assert d["total"]["us_per_token"] == pytest.approx(step_ns / 1e3 / npl, rel=1e-6)
    assert d["total"]["launches_per_step"] == pytest.approx(fake.LAYERS * len(fake.DECODE_STEP))
    gdn = {b["bucket"]: b for b in d["buckets"]}["gdn_core"]
    assert gdn["ms_per_launch_delta"] == pytest.approx((25_000 + 400 * npl) / 1e6)
    cap8 = analysis["captures"][0]
    assert cap8["graph_node_kernels"] == 8 * fake.LAYERS * len(fake.DECODE_STEP)
    assert cap8["unmatched_top"][0]["name"].startswith("fake_unmatched_kernel")
    # the run is locked, hardware-described and complete
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["collapsed"] is False
    assert (run / "hardware.txt").is_file() and (run / "lock.json").is_file()
    assert (run / "profile" / "buckets.tsv").is_file() and (run / "profile" / "difference.tsv").is_file()
    owner = [f.read_text() for f in (tmp_path / "lock").iterdir() if f.is_file()]
    assert owner and all(o.startswith("FREE") for o in owner)  # taken, then released


def test_collapsed_capture_is_marked(parity_cli, env_prof, tmp_path):
    prof, env = env_prof
    r = parity_cli("profile", "--allow-collapsed", "--model", "tiny", "--ntg", "6,3", "--json", "-p", prof, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    run = Path(json.loads(r.stdout)["run_dir"])
    manifest = json.loads((run / "manifest.json").read_text())
    analysis = json.loads((run / "profile" / "analysis.json").read_text())
    assert manifest["collapsed"] is True and analysis["collapsed"] is True and "COLLAPSED" in analysis["note"]
    (d,) = analysis["difference"]
    assert d["collapsed"] is True
    # the collapsed reading: decode kernels vanish into opaque graph launches
    assert d["total"]["delta_launches"] == 0
    rows = (run / "profile" / "buckets.tsv").read_text().splitlines()[1:]
    assert rows and all(r.split("\t")[3] == "true" for r in rows)
    # ... into one CUPTI_ACTIVITY_KIND_GRAPH_TRACE row per decode step, as the export says
    assert [c["graph_launches"]["launches"] for c in analysis["captures"]] == [6, 3]
    assert all(c["graph_trace_mode"] == "graph" and "CUPTI_ACTIVITY_KIND_GRAPH_TRACE" in c["warning"] for c in analysis["captures"])


def test_nsys_analysis_failure_is_named_not_the_flags(parity_cli, env_prof, tmp_path):
    """nsys exits 0 after its analysis failed and leaves no kernel table: parity says so (exit 4)."""
    prof, env = env_prof
    r = parity_cli("profile", "--graph-node", "--model", "tiny", "--ntg", "4,2", "--json", "-p", prof, env={**env, "FAKE_NSYS_ANALYSIS": "fail"}, timeout=300)
    assert r.returncode == 4, r.stderr[-2000:]
    err = r.stderr.strip().splitlines()[-1]
    assert "nsys exited 0 but its analysis failed (Analysis failed with: Status: TargetProfilingFailed" in err
    assert "--trace=cuda" not in err and "graph" not in err.split("log ")[0]


def test_older_export_tables_are_read(parity_cli, env_prof, tmp_path):
    prof, env = env_prof
    r = parity_cli("profile", "--graph-node", "--model", "tiny", "--ntg", "4,2", "--json", "-p", prof, env={**env, "FAKE_NSYS_EXPORT_TABLES": "old"}, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    caps = json.loads(r.stdout)["captures"]
    assert [c["export"]["table"] for c in caps] == ["EXPORT_META_DATA"] * 2 and all(c["export"]["nsys_version"].startswith("2025.3") for c in caps)
    assert [c["graph_trace_mode"] for c in caps] == [None, None] and not any(c["collapsed"] for c in caps)


def test_profile_campaign_step(parity_cli, env_prof, tmp_path):
    prof, env = env_prof
    camp = tmp_path / "camp.yaml"
    camp.write_text("name: prof\nsteps:\n  - {name: decode-profile, kind: profile, with: {model: tiny, ntg: [4, 2], npl: 1}}\n")
    r = parity_cli("campaign", "run", str(camp), "--json", "-p", prof, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    run = Path(json.loads(r.stdout)["run_dir"])
    step = json.loads((run / "steps" / "decode-profile.json").read_text())
    assert step["collapsed"] is False and [c["label"] for c in step["captures"]] == ["paged-bench-ntg4", "paged-bench-ntg2"]
    assert (run / "profile" / "analysis.json").is_file()


def test_serve_workload_drives_the_server_under_nsys(parity_cli, env_prof, tmp_path):
    prof, env = env_prof
    Path(prof).write_text(Path(prof).read_text() + "serving: {port: 18397}\n")
    r = parity_cli("profile", "--graph-node", "--workload", "serve", "--model", "tiny", "--ntg", "6,3", "--npl", "2", "--json", "-p", prof, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    calls = [json.loads(x) for x in (tmp_path / "nsys-argv.log").read_text().splitlines() if x.startswith('["profile"')]
    assert len(calls) == 2 and all(c[1] == "--cuda-graph-trace=node" and Path(c[c.index("--force-overwrite") + 2]).name == "llama-server" for c in calls)
    # the load generator sent npl requests of ntg tokens to the server nsys wrapped
    assert [c["workload_rows"] for c in doc["captures"]] == [[{"requests": 2, "completion_tokens": 12}], [{"requests": 2, "completion_tokens": 6}]]
    assert (Path(doc["run_dir"]) / "profile" / "analysis.json").is_file()


def test_paired_blocks_give_the_tracer_cost_and_paired_buckets(parity_cli, env_prof, tmp_path):
    """Two arms x 2 blocks with the fake nsys around the real CPU llama-batched-bench: per block
    each arm runs traced at both ntg and untraced once; the tracer's cost per arm is a paired
    ratio over the blocks, and the paired bucket table adds up (kernels + remainder = engine)."""
    prof, env = env_prof
    r = parity_cli("profile", "--graph-node", "--engines", "paged,stock", "--blocks", "2", "--model", "tiny", "--ntg", "4,2", "--json", "-p", prof, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert [(c["engine"], c["block"], c["ntg"]) for c in doc["captures"]] == [("paged", 0, 4), ("paged", 0, 2), ("stock", 0, 4), ("stock", 0, 2),
                                                                                ("stock", 1, 4), ("stock", 1, 2), ("paged", 1, 4), ("paged", 1, 2)]  # ABBA
    cost = {c["engine"]: c for c in doc["tracer_cost"]}
    assert set(cost) == {"paged", "stock"} and all(c["blocks"] == 2 and c["low"] is not None and c["tracer"] == "nsys" for c in cost.values())
    assert len(doc["difference"]) == 4  # one per arm and block
    pb = doc["paired_buckets"]
    assert (pb["reference"], pb["candidate"], pb["blocks"]) == ("stock", "paged", [0, 1])
    rows = {r["bucket"]: r for r in pb["rows"]}
    k, rem, eng = rows["kernels (sum)"], rows["remainder"], rows["engine decode"]
    assert eng["delta_ms_per_token"] == pytest.approx(k["delta_ms_per_token"] + rem["delta_ms_per_token"], abs=1e-6)
    assert sum(r["delta_ms_per_token"] for r in pb["rows"] if r["kind"] == "bucket") == pytest.approx(k["delta_ms_per_token"], abs=1e-6)
    run = Path(doc["run_dir"])
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["profile"]["tracer"] == "nsys" and manifest["profile"]["engines"] == ["paged", "stock"] and manifest["profile"]["blocks"] == 2
    assert (run / "profile" / "tracer_cost.json").is_file() and (run / "profile" / "paired_buckets.json").is_file()
