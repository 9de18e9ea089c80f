"""Real llama.cpp (llama-cpp-python 0.3.36 sdist, upstream 0c1e57098) built on CPU by
parity itself (engine_bins: cached per machine), with and without the demo series."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from parity.llamacpp import build, cmake, patches
from parity.engines.bound import bind
from parity.llamacpp import source as srcmod
from parity.errors import InfraError
from parity.gates.completion import is_complete
from parity.runners.local import LocalRunner
from parity.ui import Output

REPO = Path(__file__).resolve().parent.parent.parent
DEMO = REPO / "campaigns" / "series" / "demo"
FIXUPS = REPO / "campaigns" / "series" / "fixups"
OUT = Output(json_mode=True)
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]


@pytest.fixture(scope="module")
def builds(engine_bins, smoke_profile) -> dict[str, build.BuildResult]:
    return {n: build.ensure_built(bind(smoke_profile, n), LocalRunner(), OUT) for n in ("paged", "stock")}


@pytest.fixture(scope="module")
def upstream_src(smoke_profile) -> Path:
    """The pristine vendored llama.cpp; the sdist keeps its git metadata (a submodule)."""
    return srcmod.materialize("sdist", smoke_profile.sources["sdist"], LocalRunner())


def _git(cwd, *args) -> str:
    return subprocess.run([*GIT, *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def test_provenance_of_both_engines(builds, smoke_profile, upstream_src):
    paged, stock = builds["paged"].provenance, builds["stock"].provenance
    assert paged["source"]["kind"] == "pypi-sdist" and paged["source"]["sha256"] == smoke_profile.sources["sdist"].sha256
    assert [p["name"] for p in paged["patches"]] == sorted(p.name for p in DEMO.glob("*.patch"))
    assert [p["sha256"] for p in paged["patches"]] == [patches.sha256(DEMO / p["name"]) for p in paged["patches"]]
    assert stock["patches"] == []
    for prov in (paged, stock):  # both columns get the source's fixups, after any series
        assert [p["name"] for p in prov["fixups"]] == sorted(p.name for p in FIXUPS.glob("*.patch"))
    # the tree hash of the pristine source is upstream's own tree for 0c1e57098
    assert _git(upstream_src, "rev-parse", "HEAD").startswith("0c1e57098")
    assert paged["tree_before"] == stock["tree_before"] == stock["tree_after"] == _git(upstream_src, "rev-parse", "HEAD^{tree}")
    assert paged["tree_after"] != paged["tree_before"]
    assert "-DGGML_NATIVE=OFF" in paged["cmake_configure"] and "-DGGML_CUDA=OFF" in paged["cmake_configure"]
    for name, res in builds.items():
        assert set(res.provenance["binaries"]) == set(smoke_profile.engine(name).targets)
        for tool, sha in res.provenance["binaries"].items():
            assert patches.sha256(res.bin_dir / tool) == sha
        assert res.provenance["toolchain"]["cmake"].startswith("cmake version")


def test_demo_series_mirrors_a_fork_branch(builds, upstream_src, tmp_path):
    """Seeds' mirror invariant: `git am` of the series on the pin gives the tree parity computed."""
    gitdir = _git(upstream_src, "rev-parse", "--absolute-git-dir")
    fork = tmp_path / "fork"
    _git(tmp_path, "clone", "-q", "--no-local", gitdir, str(fork))
    _git(fork, "am", "-q", *sorted(str(p) for p in DEMO.glob("*.patch")))
    assert _git(fork, "rev-parse", "HEAD^{tree}") == builds["paged"].provenance["tree_after"]


def _complete(bin_dir: Path, model: Path, banner: bool) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "GGML_NO_BACKTRACE": "1"}
    if banner:
        env["PARITY_DEMO_BANNER"] = "1"
    argv = [str(bin_dir / "llama-completion"), "-m", str(model), "-t", "1", "--no-warmup", "--temp", "0", "-p", "The capital of France is", "-n", "12", "--seed", "1", "-no-cnv"]
    # known trap on this commit (DESIGN.md): now and then an exit 0 with stdout cut short
    # (or empty); like the md5 gates, retry until the transcript is complete
    for _ in range(10):
        r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        if r.returncode != 0 or is_complete(r.stdout.encode()):
            return r
    raise AssertionError(f"10 runs, none complete: last stdout {r.stdout!r}")


def test_no_tool_loses_its_last_lines_on_a_busy_box(builds, tiny_model, tmp_path):
    """The log fixup: llama.cpp's leaked async logger dropped the end of the output at exit
    (KLD statistics lost in about half the runs with three CPU hogs; CI lost four in a row)."""
    from tests.conftest import kl_runs_losing_their_tail

    text = tmp_path / "text.txt"
    text.write_text((REPO / "parity" / "defaults" / "kl-text.txt").read_text())
    lost = kl_runs_losing_their_tail({n: b.bin_dir for n, b in builds.items()}, str(tiny_model), str(tiny_model), str(text), tmp_path, timeout=120)
    assert lost == 0, f"{lost} of 20 runs lost the end of their output"


def test_banner_only_in_paged_and_stdout_bit_exact(builds, tiny_model):
    runs = {n: _complete(b.bin_dir, tiny_model, True) for n, b in builds.items()}
    for n, r in runs.items():
        assert r.returncode == 0, (n, r.stderr[-500:])
    assert "paged-demo: series active (parity-demo-series-0003)" in runs["paged"].stderr
    assert "paged-demo" not in runs["stock"].stderr
    assert runs["paged"].stdout.startswith("The capital of France is")
    assert runs["paged"].stdout == runs["stock"].stdout
    quiet = _complete(builds["paged"].bin_dir, tiny_model, False)
    assert "paged-demo" not in quiet.stderr and quiet.stdout == runs["paged"].stdout


def test_series_changes_the_common_library(builds):
    libs = {n: (b.bin_dir / "libllama-common.so").resolve().read_bytes() for n, b in builds.items()}
    assert b"parity-demo-series-0003" in libs["paged"]
    assert b"parity-demo-series-0003" not in libs["stock"]


def test_cmake_option_names_exist_in_this_source(builds, upstream_src):
    text = (upstream_src / "CMakeLists.txt").read_text()
    declared = set(re.findall(r"^\s*option\((\w+)", text, re.M)) | set(re.findall(r"^\s*llama_option_depr\(\w+\s+(\w+)", text, re.M))
    ggml = (upstream_src / "ggml" / "CMakeLists.txt").read_text()
    declared |= set(re.findall(r"^\s*option\((\w+)", ggml, re.M))
    names = {a[2:].split("=")[0] for a in cmake.configure_argv("s", "b", "121a", []) if a.startswith("-D") and not a.startswith("-DCMAKE_")}
    assert names <= declared, names - declared
    log = (builds["paged"].build_dir.parent / "build.log").read_text()
    assert cmake.parse_unused_variables(log) == []


def _profile_extending_smoke(tmp_path, engines: dict) -> Path:
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump({"extends": "smoke", "name": "smoke-x", "engines": engines}))
    return p


def test_broken_patch_on_real_source(tmp_path, smoke_profile):
    series = tmp_path / "series"
    series.mkdir()
    shutil.copy(DEMO / "0001-demo-env-gated-series-banner-in-common_init.patch", series)
    drifted = (DEMO / "0003-demo-name-the-series-in-the-banner.patch").read_text().replace(" void common_init() {\n", " void common_init_v2() {\n", 1)
    (series / "0002-drifted-upstream.patch").write_text(drifted)
    from parity.config import load_profile

    prof = load_profile(str(_profile_extending_smoke(tmp_path, {"broken": {"source": "sdist", "series": str(series), "cmake_flags": ["-DGGML_NATIVE=OFF"]}})))
    p = build.plan(bind(prof, "broken"))
    try:
        with pytest.raises(InfraError, match=r"patch 0002-drifted-upstream\.patch does not apply at common/common\.cpp:\d+"):
            build.ensure_built(bind(prof, "broken"), LocalRunner(), OUT)
        assert not (p.dir / build.OK_MARKER).exists() and not (p.dir / "build.json").exists()
        assert not (p.dir / "build").exists()  # cmake never ran
    finally:
        shutil.rmtree(p.dir, ignore_errors=True)


def test_check_series_cli_and_expected_tree(parity_cli, builds, tmp_path):
    want = builds["paged"].provenance["tree_after"]
    good = _profile_extending_smoke(tmp_path, {"paged": {"expected_tree": want}})
    r = parity_cli("build", "--check-series", "--json", "-p", str(good), "--engine", "paged")
    assert r.returncode == 0, r.stderr
    (doc,) = json.loads(r.stdout)
    assert doc["mirror_ok"] is True and doc["tree_after"] == want
    bad = _profile_extending_smoke(tmp_path, {"paged": {"expected_tree": builds["paged"].provenance["tree_before"]}})
    r = parity_cli("build", "--check-series", "-p", str(bad), "--engine", "paged")
    assert r.returncode == 3 and "mirror invariant broken" in r.stderr and want in r.stderr
