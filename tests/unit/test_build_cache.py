"""ensure_built on a real tiny CMake project (tests/data/build/mini-llama): cache
keys, hits without cmake, provenance, failures never marked good, a concurrent
second builder waits, one compile at a time per source, tool_path, the campaign step, and the CLI (--check-series,
--detach/--status)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from parity.config import load_profile
from parity.llamacpp import build
from parity.engines.bound import bind
from parity.errors import InfraError, UsageError
from parity.runners.local import LocalRunner
from parity.ui import Output

from conftest import CountingRunner

DATA = Path(__file__).resolve().parent.parent / "data" / "build"
OUT = Output(json_mode=True)


def _cmake_calls(r: CountingRunner) -> int:
    return sum(1 for c in r.calls if c[0] == "cmake")


def test_build_then_cache_hit_without_cmake(mini_build):
    prof = load_profile(str(mini_build()))
    r = CountingRunner()
    first = build.ensure_built(bind(prof, "paged"), r, OUT)
    assert not first.cached and _cmake_calls(r) == 2  # configure + build
    assert (first.bin_dir / "llama-completion").is_file()
    r2 = CountingRunner()
    again = build.ensure_built(bind(prof, "paged"), r2, OUT)  # its speed: benchmarks/build_cache.py
    assert again.cached and again.key == first.key and again.bin_dir == first.bin_dir
    assert _cmake_calls(r2) == 0
    assert again.provenance == first.provenance


def test_provenance(mini_build):
    prof = load_profile(str(mini_build()))
    res = build.ensure_built(bind(prof, "paged"), LocalRunner(), OUT)
    prov = json.loads((res.build_dir.parent / "build.json").read_text())
    assert prov["source"] == {"kind": "path", "path": prof.sources["mini"].path}
    assert [p["name"] for p in prov["patches"]] == sorted(p.name for p in (DATA / "mini-series").glob("*.patch"))
    assert all(len(p["sha256"]) == 64 for p in prov["patches"])
    assert prov["tree_before"] != prov["tree_after"] and len(prov["tree_after"]) == 40
    assert "-DGGML_CUDA=OFF" in prov["cmake_configure"] and prov["cuda_archs"] is None
    assert prov["cmake_unused"] == []
    assert prov["toolchain"]["cmake"].startswith("cmake version") and "gcc" in prov["toolchain"]["gcc"]
    assert set(prov["binaries"]) == {"llama-completion", "test-backend-ops"}
    for name, sha in prov["binaries"].items():
        assert sha == build.patches.sha256(res.bin_dir / name)
    assert "libllama-common.so" in prov["libraries"]
    assert prov["wall_s"] > 0
    assert (res.build_dir.parent / build.OK_MARKER).read_text().strip() == res.key
    assert not (res.build_dir.parent / "src" / ".git").exists()


def test_series_really_changes_the_build(mini_build):
    prof = load_profile(str(mini_build()))
    paged = build.ensure_built(bind(prof, "paged"), LocalRunner(), OUT)
    stock = build.ensure_built(bind(prof, "stock"), LocalRunner(), OUT)
    assert paged.key != stock.key
    assert stock.provenance["tree_after"] == stock.provenance["tree_before"] == paged.provenance["tree_before"]
    assert paged.provenance["libraries"]["libllama-common.so"] != stock.provenance["libraries"]["libllama-common.so"]
    assert b"parity-mini-series-0003" in (paged.bin_dir / "libllama-common.so").read_bytes()
    assert b"parity-mini-series-0003" not in (stock.bin_dir / "libllama-common.so").read_bytes()
    env = {**os.environ, "PARITY_DEMO_BANNER": "1"}
    runs = {n: subprocess.run([str(b.bin_dir / "llama-completion"), "x"], env=env, capture_output=True, text=True) for n, b in (("paged", paged), ("stock", stock))}
    assert runs["paged"].stderr == "paged-demo: series active\n"
    assert runs["stock"].stderr == ""
    assert runs["paged"].stdout == runs["stock"].stdout == "mini completion: 1 args\n"


def test_source_fixups_go_into_both_engines_after_the_series(mini_build, tmp_path):
    fixups = tmp_path / "fixups"
    shutil.copytree(DATA / "mini-fixups", fixups)
    plain = load_profile(str(mini_build()))
    prof = load_profile(str(mini_build(fixups=fixups)))
    assert {n: build.plan(bind(prof, n)).key != build.plan(bind(plain, n)).key for n in ("paged", "stock")} == {"paged": True, "stock": True}
    paged = build.ensure_built(bind(prof, "paged"), LocalRunner(), OUT)
    stock = build.ensure_built(bind(prof, "stock"), LocalRunner(), OUT)
    for b in (paged, stock):
        assert b"parity-mini-fixup-0001" in (b.bin_dir / "test-backend-ops").read_bytes()
        assert [f["name"] for f in b.provenance["fixups"]] == ["0001-mini-fixup-id-string-in-test-backend-ops.patch"]
    plain_paged = build.ensure_built(bind(plain, "paged"), LocalRunner(), OUT).provenance
    # the mirror invariant's tree (pin + series) does not see the fixups; the built tree does
    assert paged.provenance["tree_after"] == plain_paged["tree_after"] == plain_paged["tree_built"] != paged.provenance["tree_built"]
    assert stock.provenance["patches"] == [] and stock.provenance["tree_after"] == stock.provenance["tree_before"] != stock.provenance["tree_built"]
    assert paged.provenance["tree_before"] == stock.provenance["tree_before"]
    assert b"parity-mini-series-0003" in (paged.bin_dir / "libllama-common.so").read_bytes()
    p = next(fixups.glob("0001-*.patch"))
    p.write_text(p.read_text().replace("fixup-0001", "fixup-0002"))
    assert build.plan(bind(load_profile(str(mini_build(fixups=fixups))), "stock")).key != stock.key


def test_key_tracks_series_content_and_flags_not_location(mini_build, tmp_path):
    make = mini_build
    prof = load_profile(str(make()))
    base = build.plan(bind(prof, "paged")).key
    assert build.plan(bind(prof, "paged"), ["-DGGML_NATIVE=OFF"]).key != base
    copy = tmp_path / "series-copy"
    shutil.copytree(DATA / "mini-series", copy)
    assert build.plan(bind(load_profile(str(make(series=copy))), "paged")).key == base
    p = next(copy.glob("0003-*.patch"))
    p.write_text(p.read_text().replace("parity-mini-series-0003", "parity-mini-series-0004"))
    assert build.plan(bind(load_profile(str(make(series=copy))), "paged")).key != base


def _broken(tmp_path) -> Path:
    d = tmp_path / "broken-series"
    d.mkdir()
    shutil.copy(DATA / "mini-series" / "0001-mini-env-gated-series-banner.patch", d)
    good = (DATA / "mini-series" / "0003-mini-series-id-string-in-the-library.patch").read_text()
    (d / "0002-drifted.patch").write_text(good.replace('#include "common.h"\n', '#include "common_old.h"\n', 1))
    return d


def test_broken_patch_fails_and_nothing_is_marked_good(mini_build, tmp_path):
    prof = load_profile(str(mini_build(series=_broken(tmp_path))))
    r = CountingRunner()
    with pytest.raises(InfraError, match=r"patch 0002-drifted\.patch does not apply at common/common\.c:\d+"):
        build.ensure_built(bind(prof, "paged"), r, OUT)
    p = build.plan(bind(prof, "paged"))
    assert not (p.dir / build.OK_MARKER).exists() and not (p.dir / "build.json").exists()
    assert _cmake_calls(r) == 0
    with pytest.raises(InfraError, match="0002-drifted"):  # still not cached: it retries and fails again
        build.ensure_built(bind(prof, "paged"), LocalRunner(), OUT)


def test_compile_failure_is_not_marked_good(mini_build, tmp_path):
    d = tmp_path / "bad-compile"
    d.mkdir()
    good = (DATA / "mini-series" / "0001-mini-env-gated-series-banner.patch").read_text()
    (d / "0001-syntax-error.patch").write_text(good.replace('fprintf(stderr, "paged-demo: series active\\n");', 'fprintf(stderr, "paged-demo: series active\\n")'))
    prof = load_profile(str(mini_build(series=d)))
    with pytest.raises(InfraError, match=r"build of paged failed \(log: .*build\.log\)"):
        build.ensure_built(bind(prof, "paged"), LocalRunner(), OUT)
    p = build.plan(bind(prof, "paged"))
    assert not (p.dir / build.OK_MARKER).exists()
    assert "error" in (p.dir / "build.log").read_text()


_CHILD = """
import json, sys
from parity.config import load_profile
from parity.llamacpp.build import ensure_built
from parity.engines.bound import bind
from parity.runners.local import LocalRunner
from parity.ui import Output
r = ensure_built(bind(load_profile(sys.argv[1]), "stock"), LocalRunner(), Output(json_mode=True))
print(json.dumps({"cached": r.cached, "key": r.key}))
"""


def test_concurrent_builders_build_once(mini_build):
    path = mini_build()
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    docs = [json.loads(o[0]) for o in outs]
    assert sorted(d["cached"] for d in docs) == [False, True]
    assert docs[0]["key"] == docs[1]["key"]
    log = (build.plan(bind(load_profile(str(path)), "stock")).dir / "build.log").read_text()
    assert log.count("$ cmake -S") == 1


def test_a_second_key_waits_for_the_compile_slot_then_builds(mini_build, tmp_path):
    """One compile at a time per source: a build of another key of the same source waits,
    names the build that holds the slot, compiles nothing meanwhile, and builds once the slot
    is free; a build of another source has a slot of its own."""
    import fcntl

    path = mini_build()
    stock = build.plan(bind(load_profile(str(path)), "stock"))
    stock.dir.parent.mkdir(parents=True)
    lock = build.compile_slot_path(stock)
    other = tmp_path / "other-source.yaml"  # the same project copied elsewhere: a source of its own
    src = shutil.copytree(mini_build.src, tmp_path / "other-src")
    other.write_text(json.dumps({"name": "other", "sources": {"other": {"kind": "path", "path": str(src)}}, "engines": {"stock": {"source": "other", "targets": ["llama-completion"]}}}))
    err = tmp_path / "child.err"
    with open(lock, "a+") as slot:
        fcntl.flock(slot, fcntl.LOCK_EX)
        slot.write("paged 0123abcd, pid 4242\n")
        slot.flush()
        with open(err, "w") as ef:
            child = subprocess.Popen([sys.executable, "-c", _CHILD, str(path)], stdout=subprocess.PIPE, stderr=ef, text=True)
        deadline = time.monotonic() + 120
        while "waiting for the build compiling now" not in err.read_text():
            assert child.poll() is None and time.monotonic() < deadline, err.read_text()
            time.sleep(0.2)
        assert "(paged 0123abcd, pid 4242)" in err.read_text()
        time.sleep(1)
        assert child.poll() is None and not (stock.dir / "build.log").exists()
        elsewhere = subprocess.run([sys.executable, "-c", _CHILD, str(other)], capture_output=True, text=True, timeout=300)
        assert elsewhere.returncode == 0 and json.loads(elsewhere.stdout)["cached"] is False, elsewhere.stderr
        assert "waiting for the build compiling now" not in elsewhere.stderr and child.poll() is None
    out, _ = child.communicate(timeout=300)
    assert child.returncode == 0, err.read_text()
    assert json.loads(out) == {"cached": False, "key": stock.key} and (stock.dir / build.OK_MARKER).exists()
    assert lock.read_text() == f"stock {stock.key}, pid {child.pid}\n"


def test_tool_path_prebuilt_and_built(mini_build, tmp_path):
    prebuilt = tmp_path / "bin"
    prebuilt.mkdir()
    (prebuilt / "llama-server").write_text("#!/bin/sh\n")
    engines = {"pre": {"bin_dir": str(prebuilt)}, "stock": {"source": "mini", "targets": ["llama-completion"]}}
    prof = load_profile(str(mini_build(engines=engines)))
    assert build.tool_path(bind(prof, "pre"), "llama-server", LocalRunner(), OUT) == str(prebuilt / "llama-server")
    with pytest.raises(UsageError, match="llama-perplexity not found"):
        build.tool_path(bind(prof, "pre"), "llama-perplexity", LocalRunner(), OUT)
    got = build.tool_path(bind(prof, "stock"), "llama-completion", LocalRunner(), OUT)
    assert got.endswith("/build/bin/llama-completion") and os.access(got, os.X_OK)
    with pytest.raises(UsageError, match="test-backend-ops not found"):
        build.tool_path(bind(prof, "stock"), "test-backend-ops", LocalRunner(), OUT)
    assert build.llama_engines(prof) == ["stock"]
    with pytest.raises(UsageError, match="prebuilt"):
        build.ensure_built(bind(prof, "pre"), LocalRunner(), OUT)


def test_campaign_step_writes_builds_json(mini_build, tmp_path):
    from parity.artifacts import RunDir
    from parity.context import Context

    prof = load_profile(str(mini_build()))
    ctx = Context(profile=prof, runner=LocalRunner(), out=OUT, artifacts_root=tmp_path / "art")
    ctx.run = RunDir.create(tmp_path / "art", "t", kind="campaign")
    res = build.campaign_step(ctx, {"engines": ["paged", "stock"]})
    assert set(res) == {"paged", "stock"} and res["paged"]["tree_after"] != res["stock"]["tree_after"]
    doc = json.loads((ctx.run.path / "builds.json").read_text())
    assert doc["paged"]["key"] == res["paged"]["key"] and doc["stock"]["patches"] == []
    from parity.errors import ConfigError

    with pytest.raises(ConfigError, match="list of engine names"):
        build.campaign_step(ctx, {"engines": "paged"})


# ---------------------------------------------------------------- CLI


def test_cli_build_check_series_and_expected_tree(parity_cli, mini_build, tmp_path):
    path = mini_build()
    env = {"PARITY_CACHE": os.environ["PARITY_CACHE"]}
    r = parity_cli("build", "--check-series", "--json", "-p", str(path), "--engine", "paged", env=env)
    assert r.returncode == 0, r.stderr
    (doc,) = json.loads(r.stdout)
    assert doc["mirror_ok"] is None and len(doc["patches"]) == 2
    assert not Path(env["PARITY_CACHE"], "builds").exists()  # nothing compiled, nothing cached
    import yaml

    prof = yaml.safe_load(path.read_text())
    prof["engines"]["paged"]["expected_tree"] = doc["tree_after"]
    path.write_text(yaml.safe_dump(prof))
    r = parity_cli("build", "--check-series", "--json", "-p", str(path), "--engine", "paged", env=env)
    assert r.returncode == 0 and json.loads(r.stdout)[0]["mirror_ok"] is True
    prof["engines"]["paged"]["expected_tree"] = doc["tree_before"]
    path.write_text(yaml.safe_dump(prof))
    r = parity_cli("build", "--check-series", "-p", str(path), "--engine", "paged", env=env)
    assert r.returncode == 3
    assert "mirror invariant" in r.stderr and doc["tree_after"] in r.stderr and "Traceback" not in r.stderr


def test_cli_build_json_and_unknown_engine(parity_cli, mini_build):
    path = mini_build()
    env = {"PARITY_CACHE": os.environ["PARITY_CACHE"]}
    r = parity_cli("build", "--json", "-p", str(path), "--engine", "stock", env=env)
    assert r.returncode == 0, r.stderr
    (doc,) = json.loads(r.stdout)
    assert doc["engine"] == "stock" and doc["cached"] is False and Path(doc["bin_dir"], "llama-completion").is_file()
    r = parity_cli("build", "--json", "-p", str(path), "--engine", "stock", env=env)
    assert json.loads(r.stdout)[0]["cached"] is True
    r = parity_cli("build", "-p", str(path), "--engine", "nope", env=env)
    assert r.returncode == 2 and "no such engine" in r.stderr


def _wait_status(parity_cli, env, n: int, timeout: float = 240) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        r = parity_cli("build", "--status", "--json", env=env)
        rows = json.loads(r.stdout)
        if len(rows) >= n and all(row["state"] != "running" for row in rows):
            return rows
        assert time.monotonic() < deadline, rows
        time.sleep(0.5)


def test_cli_detach_and_status(parity_cli, mini_build, tmp_path):
    env = {"PARITY_CACHE": os.environ["PARITY_CACHE"]}
    good = mini_build()
    r = parity_cli("build", "--detach", "--json", "-p", str(good), "--engine", "paged", env=env)
    assert r.returncode == 0, r.stderr
    started = json.loads(r.stdout)
    assert started["argv"][:1] == ["build"] and "--detach" not in started["argv"]
    (row,) = _wait_status(parity_cli, env, 1)
    assert row["state"] == "done" and row["rc"] == 0
    n, m = build.cmake.parse_progress(row["progress"])
    assert n == m > 0, row["progress"]
    assert "paged: built ->" in row["last_line"]
    assert build.ensure_built(bind(load_profile(str(good)), "paged"), LocalRunner(), OUT).cached
    bad = mini_build(series=_broken(tmp_path))
    time.sleep(1.1)  # a distinct id
    r = parity_cli("build", "--detach", "-p", str(bad), "--engine", "paged", env=env)
    assert r.returncode == 0, r.stderr
    rows = _wait_status(parity_cli, env, 2)
    failed = [x for x in rows if x["state"] == "failed"]
    assert len(failed) == 1 and failed[0]["rc"] == 4 and "0002-drifted.patch" in failed[0]["last_line"]


@pytest.mark.parametrize("damage", ["", "{\"key\": ", "[1, 2]"])
def test_a_damaged_build_json_is_built_again_not_an_internal_error(mini_build, damage):
    """BUILD_OK beside a build.json that does not read (emptied, cut short, not a mapping): the
    entry is not a cache hit, and the next ensure_built builds it again under the key's lock."""
    path = mini_build()
    prof = load_profile(str(path))
    first = build.ensure_built(bind(prof, "stock"), LocalRunner(), Output(json_mode=True))
    (first.build_dir.parent / "build.json").write_text(damage)
    again = build.ensure_built(bind(prof, "stock"), LocalRunner(), Output(json_mode=True))
    assert not again.cached and again.key == first.key and json.loads((first.build_dir.parent / "build.json").read_text())["key"] == first.key
