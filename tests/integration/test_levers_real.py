"""`parity ab` on the users' real series on CPU (../shared, profile localai-paged-cpu): a runtime
lever the series documents as bit-exact (LLAMA_PAGED_NO_BT_CACHE=1, patch 0029: "cache OFF ==
cache ON"; the paged decode reads its block table on CPU too) gives equal md5s per path and a
verdict with its interval; a build lever (the series without its last patch, 0055) builds its
own arm, then comes from the cache; the lever map then refuses a REJECTED row without --reopen.
Small shapes (npl 1,2, TG 8, 2 blocks) keep it cheap; the variant build is long only the first
time on a machine (ccache, then the build cache)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import run_parity, shared_or_skip

pytestmark = pytest.mark.slow

SMALL = ["--model", "tiny-qwen35moe", "--npl", "1,2", "--npp", "32", "--ntg", "8", "--repeat", "2", "--gate-models", "tiny,tiny-qwen35moe"]


@pytest.fixture(scope="module")
def shared() -> Path:
    return shared_or_skip("localai-paged/Makefile", "localai-paged/patches/paged", "llama.cpp-pin/llama.cpp-0ed235ea.tar.gz")


def _profile(tmp_path: Path) -> Path:
    p = tmp_path / "p.yaml"
    p.write_text(f"extends: localai-paged-cpu\nlock: {{dir: {tmp_path}/lock, poll_s: 0.5}}\nlevers: {{map: {tmp_path}/levers.yaml}}\n")
    return p


def _ab(tmp_path: Path, *args: str):
    return run_parity("--artifacts", str(tmp_path / "runs"), "ab", "--profile", str(_profile(tmp_path)), "--engine", "paged", *args, "--json", timeout=3600)


def _check_verdict(doc: dict) -> None:
    assert doc["verdict"] in ("GO", "NO-GO", "FLAT", "INCONCLUSIVE") and doc["why"]
    pts = doc["measurement"]["points"]
    assert [p["point"] for p in pts] == ["PP=32 TG=8 B=1", "PP=32 TG=8 B=2"]
    for p in pts:
        assert p["n_blocks"] == 2 and p["low"] <= p["ratio"] <= p["high"] and len(p["ratios"]) == 2
    k = doc["key"]
    assert k["point"] in {p["point"] for p in pts} and k["low"] <= k["ratio"] <= k["high"] and f"[{k['low']:.4f}, {k['high']:.4f}]" in k["text"]


def test_runtime_lever_bit_exact(shared, tmp_path):
    r = _ab(tmp_path, "--env", "LLAMA_PAGED_NO_BT_CACHE=1", *SMALL)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    run = Path(doc["run_dir"])
    assert doc["arms"] == {"A": "paged", "B": "paged+lever"} and doc["lever"] == "LLAMA_PAGED_NO_BT_CACHE=1" and doc["lever_kind"] == "runtime"
    assert doc["builds"]["paged"]["key"] == doc["builds"]["paged+lever"]["key"]  # one build, two arms
    md5 = [p for ph in doc["gates"]["phases"] for p in ph["md5"]]
    assert {(p["phase"], p["model"], p["path"]) for p in md5} == {(ph, m, path) for ph in ("pre", "post") for m in ("tiny", "tiny-qwen35moe") for path in ("paged", "nonpaged")}
    for p in md5:  # equal, real (non-empty) md5s per path; arm B really ran with the lever's env
        a, b = p["arms"]["paged"], p["arms"]["paged+lever"]
        assert p["status"] == "equal" and a["md5"] == b["md5"] != "d41d8cd98f00b204e9800998ecf8427e"
        assert b["env"]["LLAMA_PAGED_NO_BT_CACHE"] == "1" and "LLAMA_PAGED_NO_BT_CACHE" not in a["env"]
        assert (b["env"].get("LLAMA_KV_PAGED") == "1") == (p["path"] == "paged")
    assert doc["gates"]["ok"] and doc["gates"]["kind"] == "BE" and doc["gates"]["summary"] == "md5 8/8 equal"
    _check_verdict(doc)
    bench = json.loads((run / "bench.json").read_text())
    assert bench["reference"] == "paged" and bench["engines"] == ["paged", "paged+lever"]
    assert bench["env"]["paged+lever"]["LLAMA_PAGED_NO_BT_CACHE"] == "1" and "LLAMA_PAGED_NO_BT_CACHE" not in bench["env"]["paged"]
    assert json.loads((run / "summary.json").read_text())["verdict"] == doc["verdict"]
    report = (run / doc["report"]).read_text()
    assert "# Phase 1 (" in report and doc["key"]["text"] in report and "md5 8/8 equal" in report and "per-block ratios" in report
    rows = yaml.safe_load((tmp_path / "levers.yaml").read_text())["levers"]
    assert len(rows) == 1 and rows[0]["lever"] == "LLAMA_PAGED_NO_BT_CACHE=1" and rows[0]["verdict"] == doc["verdict"] and rows[0]["artifact"] == str(run)
    assert rows[0]["pin"] == "0ed235ea2c17a19fc8238668653946721ed136fd" and rows[0]["hardware_class"] == doc["hardware_class"]
    assert "LLAMA_PAGED_NO_BT_CACHE=1" in (tmp_path / "levers.md").read_text()


def test_build_lever_cached_then_map_refuses(shared, tmp_path):
    from parity.llamacpp.build import OK_MARKER

    args = ("--series-without", "0055", *SMALL, "--gate-models", "tiny", "--no-post-gates")
    r = _ab(tmp_path, *args)
    assert r.returncode == 0, r.stderr[-3000:]
    first = json.loads(r.stdout)
    b = first["builds"]["paged+lever"]
    assert first["lever"] == "series-without=0055" and first["lever_kind"] == "build" and b["key"] != first["builds"]["paged"]["key"]
    prov = json.loads((Path(b["bin_dir"]).parent.parent / "build.json").read_text())
    assert prov["series_selection"] == "without 0055" and len(prov["patches"]) == 45 and "0055" not in " ".join(p["name"][:4] for p in prov["patches"])
    assert (Path(b["bin_dir"]).parent.parent / OK_MARKER).is_file()
    _check_verdict(first)
    # the user closes the lever in the map (their edit, their word), then asks again
    path = tmp_path / "levers.yaml"
    path.write_text(path.read_text().replace(f"verdict: {first['verdict']}", "verdict: REJECTED") + "# closed after review\n")
    r = _ab(tmp_path, *args)
    assert r.returncode == 2 and r.stdout == ""
    line = r.stderr.strip().splitlines()[-1]
    assert len(r.stderr.strip().splitlines()) == 1 and "series-without=0055" in line and "REJECTED" in line and first["run_dir"] in line and "--reopen" in line
    assert line.split("closed on ")[1].startswith(first["hardware_class"])
    # reopened: runs, both arms from the build cache (nothing compiled), and the row records why
    r = _ab(tmp_path, *args, "--reopen", "recheck after the 0054 rebase")
    assert r.returncode == 0, r.stderr[-3000:]
    second = json.loads(r.stdout)
    assert second["builds"]["paged"]["cached"] and second["builds"]["paged+lever"]["cached"] and second["builds"]["paged+lever"]["key"] == b["key"]
    assert "building" not in r.stderr
    rows = yaml.safe_load(path.read_text())["levers"]
    assert [x["verdict"] for x in rows][:1] == ["REJECTED"] and len(rows) == 2
    assert rows[1]["reopen"] == "recheck after the 0054 rebase" and "REJECTED" in rows[1]["reopens"] and "# closed after review" in path.read_text()
    # parity levers lists and filters it
    r = run_parity("--artifacts", str(tmp_path / "runs"), "levers", "--map", str(path), "--verdict", "rejected", "--json")
    assert r.returncode == 0, r.stderr
    assert [x["lever"] for x in json.loads(r.stdout)["rows"]] == ["series-without=0055"]
    r = run_parity("levers", "--map", str(path), "--markdown")
    assert r.returncode == 0 and "## Drop / closed (do NOT pursue)" in r.stdout and "| series-without=0055 | **REJECTED**" in r.stdout


def test_runtime_lever_lossy_and_serving(shared, tmp_path):
    """--lossy holds arm B in arm A's KL band (md5s kept as evidence); --serving measures with the sweep."""
    r = _ab(tmp_path, "--env", "LLAMA_PAGED_NO_BT_CACHE=1", "--lossy", "--model", "tiny-qwen35moe", "--npl", "1", "--npp", "32", "--ntg", "8", "--repeat", "2",
            "--gate-models", "tiny", "--no-post-gates")  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    kl = doc["gates"]["phases"][0]["kl"]
    assert doc["gates"]["kind"] == "KL" and doc["gates"]["ok"] and kl["status"] == "pass" and kl["model"] == "tiny-qwen35moe" and kl["reference"] == "tiny-qwen35moe-f32"
    assert kl["kld"]["paged+lever"] <= kl["kld"]["paged"] and kl["arms"]["paged+lever"]["env"]["LLAMA_PAGED_NO_BT_CACHE"] == "1"
    assert doc["gates"]["summary"].startswith("KL band 1/1 pass")
    # the lever is now in the map as INCONCLUSIVE/GO/...: serving runs it again unless closed.  It
    # serves the profile's serving model (small-qwen35moe, ~270 t/s at N=1 on the 2-core box): the
    # tiny one decoded 960 tokens (its slot's cap) in 0.4 s on a faster box, under min_window_s
    r = _ab(tmp_path, "--env", "LLAMA_PAGED_NO_BT_CACHE=1", "--serving", "--npl", "1", "--repeat", "2", "--gate-models", "tiny", "--no-post-gates",
            "--reopen", "serving this time")  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    run = Path(doc["run_dir"])
    assert doc["measurement"]["kind"] == "serving" and doc["measurement"]["metric"] == "decode_agg_tps" and [p["point"] for p in doc["measurement"]["points"]] == ["N=1"]
    serving = json.loads((run / "serving_summary.json").read_text())
    assert serving["engines"] == ["paged", "paged+lever"] and json.loads((run / "summary.json").read_text())["kind"] == "lever-ab"
    p = next(x for x in serving["paired"] if x["metric"] == "decode_agg_tps")
    assert (p["engine"], p["reference"]) == ("paged+lever", "paged") and doc["measurement"]["points"][0]["ratio"] == p["ratio"]


def test_pin_lever_builds_the_series_at_another_commit(shared, tmp_path):
    """--pin REF --repo PATH: arm B is the series applied at another llama.cpp commit (here the
    pin plus one upstream commit the series does not touch: it applies, builds, and its greedy
    output is the pin's)."""
    from upstream_helpers import harmless_commit, pin_repo

    repo = pin_repo(shared / "llama.cpp-pin" / "llama.cpp-0ed235ea.tar.gz", tmp_path / "llama.cpp")
    newer = harmless_commit(repo, 1)
    r = _ab(tmp_path, "--pin", "master", "--repo", str(repo), *SMALL, "--gate-models", "tiny", "--no-post-gates")
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert doc["lever"] == "pin=master" and doc["lever_kind"] == "build" and f"llama.cpp at master ({newer[:12]}) instead of the pin" in doc["changes"]
    prov = json.loads((Path(doc["builds"]["paged+lever"]["bin_dir"]).parent.parent / "build.json").read_text())
    assert prov["source"]["pin"] == newer and len(prov["patches"]) == 46 and doc["pin"] == "0ed235ea2c17a19fc8238668653946721ed136fd"
    assert doc["gates"]["ok"] and doc["gates"]["summary"].startswith("md5 ") and "equal" in doc["gates"]["summary"]
    _check_verdict(doc)
    r = _ab(tmp_path, "--repo", str(repo), *SMALL)
    assert r.returncode == 2 and r.stderr.strip() == "parity: error: --repo goes with --pin REF (the llama.cpp commit arm B is built at)"
