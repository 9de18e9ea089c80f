"""The CUPTI injection library compiles here against the nvidia-cuda-cupti wheel's headers
(fetched with pip into the cache, as `parity profile --tracer cupti` does on a machine whose
toolkit has no extras/CUPTI) and the CUDA toolkit's cuda.h: compile errors show in CI, not on
the GPU host.  Link-level checks only: nothing here has a GPU to load it into."""

from __future__ import annotations

from pathlib import Path

import pytest

from parity.errors import UsageError
from parity.runners.local import LocalRunner
from parity.tracer import build, locate

CUDA = "13.0"  # the lent H100's driver CUDA; the wheel 13.0.85 worked there


@pytest.fixture(scope="module")
def cupti():
    assert Path("/usr/local/cuda/include/cuda.h").is_file(), "this machine's CUDA toolkit (nvcc 13.0 at /usr/local/cuda) is missing: the tracer cannot be compiled"
    c = locate.find_cupti(CUDA, LocalRunner())
    assert c.version.startswith("13.0") and c.api_version and c.api_version >= 130000, c
    return c


def test_the_wheel_matches_the_driver_cuda(cupti):
    assert Path(cupti.include, "cupti_activity.h").is_file()
    assert Path(cupti.library).name == "libcupti.so.13"
    assert "13.0" in cupti.source


def test_the_injection_library_compiles_links_and_exports_its_entry(cupti):
    r = LocalRunner()
    b = build.ensure_built(r, cupti)
    lib = Path(b.library)
    assert lib.is_file() and (lib.parent / "libcupti.so.13").is_file()
    dyn = r.run(["readelf", "-d", str(lib)], timeout=60).stdout
    assert "[libcupti.so.13]" in dyn and "$ORIGIN" in dyn
    syms = r.run(["nm", "-D", "--defined-only", str(lib)], timeout=60).stdout.split()
    assert "InitializeInjection" in syms  # what the CUDA driver calls at cuInit
    again = build.ensure_built(r, cupti)
    assert again.cached and again.library == b.library and again.key == b.key


def test_a_compile_error_is_one_line_naming_the_cupti(cupti, tmp_path, monkeypatch):
    from parity.errors import InfraError

    bad = tmp_path / "broken.cpp"
    bad.write_text(build.SOURCE.read_text().replace("CUpti_ActivityKernel10", "CUpti_ActivityKernel99"))
    monkeypatch.setattr(build, "SOURCE", bad)
    monkeypatch.setenv("PARITY_CACHE", str(tmp_path / "cache"))
    with pytest.raises(InfraError, match=r"compiling the CUPTI tracer failed .*CUpti_ActivityKernel99"):
        build.ensure_built(LocalRunner(), cupti)


def test_the_cache_key_follows_source_cupti_and_compiler(cupti, tmp_path, monkeypatch):
    inc = locate.cuda_header_dir()
    k = build.build_key(cupti, "g++ 12", inc)
    assert build.build_key(cupti, "g++ 13", inc) != k
    other = locate.Cupti(**{**cupti.to_dict(), "version": "13.0.48"})
    assert build.build_key(other, "g++ 12", inc) != k
    src = tmp_path / "x.cpp"
    src.write_text(build.SOURCE.read_text() + "\n// changed\n")
    monkeypatch.setattr(build, "SOURCE", src)
    assert build.build_key(cupti, "g++ 12", inc) != k


def test_wheel_names_and_pip_spec_follow_cuda_major():
    assert locate.wheel_name("13.0") == "nvidia-cuda-cupti"
    assert locate.wheel_name("12.8") == "nvidia-cuda-cupti-cu12"
    assert locate.pip_download_argv("13.0", "/d")[-1] == "nvidia-cuda-cupti==13.0.*"


def test_a_configured_root_without_cupti_is_one_line(tmp_path):
    with pytest.raises(UsageError, match="no include/cupti.h"):
        locate.find_cupti("13.0", None, configured=str(tmp_path))


def test_unknown_driver_cuda_without_a_toolkit_cupti_says_so(monkeypatch):
    monkeypatch.setattr(locate, "toolkit_roots", lambda: [])
    monkeypatch.delenv(locate.ENV_ROOT, raising=False)
    with pytest.raises(UsageError, match="driver's CUDA version is unknown"):
        locate.find_cupti(None, None)


def test_the_device_selftest_program_compiles(tmp_path):
    """scripts/cupti-graph-selftest.cu (device-h100-cupti.sh stage selftest) with this machine's nvcc,
    as the stage builds it on the GPU host."""
    nvcc = Path("/usr/local/cuda/bin/nvcc")
    assert nvcc.is_file(), "this machine's CUDA toolkit (nvcc 13.0 at /usr/local/cuda) is missing"
    src = Path(__file__).resolve().parents[2] / "scripts" / "cupti-graph-selftest.cu"
    r = LocalRunner().run([str(nvcc), "-O2", "-arch=sm_90", "-o", str(tmp_path / "graph-selftest"), str(src)], timeout=600)
    assert r.ok and (tmp_path / "graph-selftest").is_file(), r.tail(5)
