"""`parity bisect` / `parity canary` refuse bad input with one line and exit 2, before any
run directory or build exists."""

from __future__ import annotations

import pytest

from conftest import run_parity


@pytest.fixture
def series(tmp_path):
    d = tmp_path / "series"
    d.mkdir()
    for n in (1, 2, 5):
        (d / f"{n:04d}-p{n}.patch").write_text(f"patch {n}\n")
    return d


@pytest.mark.parametrize("args, msg", [
    (["--criterion", "nope"], "--criterion 'nope': over the series it is one of md5, oracle, metric"),
    (["--over", "pin", "--criterion", "oracle"], "--criterion 'oracle': over the pin it is one of apply, build, md5, metric"),
    (["--over", "pin", "--criterion", "metric"], "--over pin needs --good COMMIT and --bad COMMIT"),  # a step between two nightlies' pins
    (["--over", "sideways"], "--over must be series or pin, got 'sideways'"),
    (["--first", "0006"], "series {series}: no patch in 0006..0005"),
    (["--first", "two"], "--first: 'two' is not a patch number (NNNN, as in NNNN-title.patch)"),
    (["--good", "abc"], "--repo, --good and --bad go with --over pin"),
    (["--over", "pin", "--criterion", "apply"], "--over pin needs --good COMMIT and --bad COMMIT"),
    (["--criterion", "metric", "--blocks", "9", "--max-blocks", "4"], "--blocks 9 / --max-blocks 4: need 1 <= blocks <= max-blocks"),
    (["--criterion", "metric", "--npl", "0"], "--npl: expected positive integers, got '0'"),
])  # fmt: skip
def test_bad_input_is_one_line_exit_2(series, tmp_path, args, msg):
    r = run_parity("--artifacts", str(tmp_path / "runs"), "bisect", "--profile", "smoke", "--series", str(series), *args)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [f"parity: error: {msg.format(series=series)}"]
    assert not (tmp_path / "runs").exists()


def test_canary_without_a_repository(tmp_path, series):
    r = run_parity("--artifacts", str(tmp_path / "runs"), "canary", "--profile", "smoke", "--series", str(series), "--upstream", "master", "--repo", str(tmp_path))
    assert r.returncode == 2 and r.stderr.strip() == f"parity: error: {tmp_path}: not a git checkout or clone (nor a url)"
    r = run_parity("--artifacts", str(tmp_path / "runs"), "canary", "--profile", "smoke", "--upstream", "master")
    assert r.returncode == 2 and r.stderr.strip() == "parity: error: engine paged: its source names no llama.cpp checkout or url: give --repo PATH|URL"
    assert not (tmp_path / "runs").exists()


@pytest.fixture
def endpoint_profile(tmp_path):
    """smoke plus an endpoint engine (docs/endpoint.md): a server parity neither builds nor starts."""
    prof = tmp_path / "with-endpoint.yaml"
    prof.write_text('extends: smoke\nengines:\n'
                    '  ep: {kind: endpoint, base_url: "http://127.0.0.1:9", max_model_len: 2048}\n')
    return str(prof)


PIN_APPLY = ["bisect", "--over", "pin", "--criterion", "apply"]


@pytest.mark.parametrize("engine, kind", [("vllm", "vllm"), ("ep", "endpoint")])
@pytest.mark.parametrize("command", [["bisect", "--dry-run"], ["bisect"], PIN_APPLY, ["canary", "--upstream", "master"]])
def test_an_engine_that_is_not_llama_is_one_line_exit_2(tmp_path, endpoint_profile, engine, kind, command):
    """Issue 56 N9: -e vllm or an endpoint was an internal error (AttributeError: no default_path,
    no series); bisect and canary apply a series to llama.cpp: one line naming the llama engines."""
    r = run_parity("--artifacts", str(tmp_path / "runs"), *command, "--profile", endpoint_profile, "-e", engine)
    assert r.returncode == 2, r.stderr
    said = (f"parity: error: -e {engine}: engine kind {kind}; parity {command[0]} needs a llama engine "
            "(a patch series applied to a llama.cpp build): one of paged, stock")
    assert r.stderr.strip().splitlines() == [said]
    assert not (tmp_path / "runs").exists()
