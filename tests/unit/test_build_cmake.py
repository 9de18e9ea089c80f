"""CMake/ninja command generation and output parsing (parity.llamacpp.cmake), and
`parity build --print-cmake` for CUDA profiles that cannot build on this box."""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

import pytest
import yaml

from parity.llamacpp import cmake

DATA = Path(__file__).resolve().parent.parent / "data" / "build"


def _value(argv: list[str], name: str) -> str | None:
    vals = [a.split("=", 1)[1] for a in argv if a.startswith(f"-D{name}=")]
    return vals[-1] if vals else None


@pytest.mark.parametrize(
    "archs, cuda, expect",
    [
        (None, "OFF", None),
        ("", "OFF", None),
        ("121", "ON", "121"),
        ("121a", "ON", "121a"),
        ("90;121a", "ON", "90;121a"),
        (" 90 ; 121a ", "ON", "90;121a"),
    ],
)
def test_cuda_flags(archs, cuda, expect):
    argv = cmake.configure_argv("/s", "/b", archs, [])
    assert _value(argv, "GGML_CUDA") == cuda
    assert _value(argv, "CMAKE_CUDA_ARCHITECTURES") == expect


def test_configure_argv_base_flags_and_passthrough_last():
    argv = cmake.configure_argv("/src", "/bld", "121a", ["-DGGML_NATIVE=OFF", "-DLLAMA_BUILD_TESTS=OFF"])
    assert argv[:5] == ["cmake", "-S", "/src", "-B", "/bld"]
    assert argv[argv.index("-G") + 1] == "Ninja"
    for flag in ("-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_APP=OFF"):
        assert flag in argv
    # engine/-D flags come after ours, so the last one wins in CMake
    assert argv.index("-DLLAMA_BUILD_TESTS=OFF") > argv.index("-DLLAMA_BUILD_TESTS=ON")
    assert _value(argv, "GGML_NATIVE") == "OFF"


def test_build_argv_targets_and_jobs():
    argv = cmake.build_argv("/bld", ["llama-server", "test-backend-ops"], 3)
    assert argv == ["cmake", "--build", "/bld", "-j", "3", "--target", "llama-server", "test-backend-ops"]


def test_parse_progress_on_real_llama_build_log():
    lines = (DATA / "build-log-llama-0c1e570-cpu.txt").read_text().splitlines()
    got = [cmake.parse_progress(ln) for ln in lines]
    prog = [g for g in got if g]
    assert len(prog) == 226
    assert prog[0] == (1, 226) and prog[-1] == (226, 226)
    # configure chatter, the `$ cmake` lines and UI-asset warnings are not progress
    assert cmake.parse_progress("-- UI: embedded 0 assets") is None
    assert cmake.parse_progress(lines[0]) is None


def test_parse_unused_variables_real_configure():
    text = (DATA / "cmake-configure-llama-0c1e570-unused-var.txt").read_text()
    assert cmake.parse_unused_variables(text) == ["LLAMA_BUILD_EXAMPLE"]
    # the real build's configure (our flags only) warns about nothing
    log = (DATA / "build-log-llama-0c1e570-cpu.txt").read_text()
    assert cmake.parse_unused_variables(log) == []


# ---------------------------------------------------------------- --print-cmake


@pytest.fixture
def cuda_profile(tmp_path, monkeypatch):
    """An archive source (a real .tar.gz with sha256) and CUDA/CPU engines."""
    monkeypatch.setenv("PARITY_CACHE", str(tmp_path / "cache"))
    arc = tmp_path / "llama.tar.gz"
    with tarfile.open(arc, "w:gz") as t:
        t.add(DATA / "mini-llama", arcname="llama.cpp")
    sha = hashlib.sha256(arc.read_bytes()).hexdigest()
    doc = {
        "name": "cuda-print",
        "sources": {"arc": {"kind": "archive", "path": str(arc), "sha256": sha, "subdir": "llama.cpp"}},
        "engines": {
            "gb10": {"source": "arc", "cuda_archs": "121"},
            "fp4": {"source": "arc", "cuda_archs": "121a", "cmake_flags": ["-DGGML_CUDA_FA_ALL_QUANTS=ON"]},
            "multi": {"source": "arc", "cuda_archs": "90;121a"},
            "h100": {"source": "arc", "cuda_archs": "90"},
            "cpu": {"source": "arc"},
        },
    }
    path = tmp_path / "cuda.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_print_cmake_cuda_flags(parity_cli, cuda_profile, tmp_path):
    r = parity_cli("build", "--print-cmake", "--json", "-p", str(cuda_profile), "-D", "GGML_CUDA_GRAPHS=ON")
    assert r.returncode == 0, r.stderr
    plans = {p["engine"]: p for p in json.loads(r.stdout)}
    assert set(plans) == {"gb10", "fp4", "multi", "h100", "cpu"}
    want = {"gb10": "121", "fp4": "121a", "multi": "90;121a", "h100": "90", "cpu": None}
    for name, archs in want.items():
        conf = plans[name]["configure"]
        assert _value(conf, "CMAKE_CUDA_ARCHITECTURES") == archs, name
        assert _value(conf, "GGML_CUDA") == ("ON" if archs else "OFF")
        assert _value(conf, "GGML_CUDA_GRAPHS") == "ON"  # -D passthrough
        assert plans[name]["build"][-5:] == ["llama-server", "llama-completion", "llama-batched-bench", "llama-perplexity", "test-backend-ops"]
        assert plans[name]["cached"] is False
    assert _value(plans["fp4"]["configure"], "GGML_CUDA_FA_ALL_QUANTS") == "ON"
    assert len({p["key"] for p in plans.values()}) == 5  # archs are part of the key
    # printing built nothing and fetched nothing
    assert not (tmp_path / "cache" / "builds").exists() or not any((tmp_path / "cache" / "builds").iterdir())
    assert not (tmp_path / "cache" / "sources").exists()


def test_print_cmake_human_is_shell_quoted(parity_cli, cuda_profile):
    r = parity_cli("build", "--print-cmake", "-p", str(cuda_profile), "--engine", "multi")
    assert r.returncode == 0, r.stderr
    assert "'-DCMAKE_CUDA_ARCHITECTURES=90;121a'" in r.stdout
    assert "cmake --build" in r.stdout


def test_bad_cuda_archs_is_a_config_error(parity_cli, cuda_profile, tmp_path):
    doc = yaml.safe_load(cuda_profile.read_text())
    doc["engines"]["gb10"]["cuda_archs"] = "sm_121"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    r = parity_cli("build", "--print-cmake", "-p", str(bad))
    assert r.returncode == 2
    assert "cuda_archs" in r.stderr and "Traceback" not in r.stderr


def test_bad_define_is_a_usage_error(parity_cli, cuda_profile):
    r = parity_cli("build", "--print-cmake", "-p", str(cuda_profile), "-D", "NOEQUALS")
    assert r.returncode == 2
    assert "VAR=VALUE" in r.stderr


def test_ccache_launcher_when_installed_and_not_turned_off(monkeypatch, tmp_path):
    monkeypatch.setattr(cmake.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.delenv("PARITY_CCACHE", raising=False)
    argv = cmake.configure_argv("/s", "/b", None, [])
    assert _value(argv, "CMAKE_CXX_COMPILER_LAUNCHER") == "ccache" and _value(argv, "CMAKE_C_COMPILER_LAUNCHER") == "ccache"
    assert _value(argv, "CMAKE_CUDA_COMPILER_LAUNCHER") is None
    monkeypatch.setenv("PARITY_CCACHE", "0")
    assert _value(cmake.configure_argv("/s", "/b", None, []), "CMAKE_CXX_COMPILER_LAUNCHER") is None
    monkeypatch.delenv("PARITY_CCACHE")
    monkeypatch.setattr(cmake.shutil, "which", lambda name: None)
    assert _value(cmake.configure_argv("/s", "/b", None, []), "CMAKE_CXX_COMPILER_LAUNCHER") is None
    env = cmake.ccache_env(tmp_path / "builds")
    assert env["CCACHE_BASEDIR"] == str(tmp_path / "builds") and env["CCACHE_DIR"] == str(tmp_path / "ccache")
