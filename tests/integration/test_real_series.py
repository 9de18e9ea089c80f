"""`parity build --check-series` on the users' real series (../shared/localai-paged, 46
patches) at its pin (../shared/llama.cpp-pin, a `git archive` of 0ed235ea): the tree the
series' docs name, the pin refused when the source disagrees, a fork that moved on named file
by file, a drifted patch named with its hunk, and the shipped gb10-qwen36 profile accepting
the users' current checkout.  No compiling: each run applies 46 patches to a scratch copy."""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from conftest import run_parity, shared_or_skip

PIN = "0ed235ea2c17a19fc8238668653946721ed136fd"
PIN_TREE = "c3ed2c39b9700f3aeff95ab391571db7dd7e0c39"  # ../shared/llama.cpp-pin/README.md
SERIES_TREE = "6cf1523047e0e38679baff20844bdc9e6829eb22"  # docs/PARITY_HANDOFF.md, "46 patches"
PREIMAGE_MISMATCH = "0006 0008 0009 0013 0015 0016 0017 0018 0019 0020 0021 0024 0025 0028 0029 0030 0034 0035 0040 0042 0043".split()
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def shared() -> Path:
    return shared_or_skip("localai-paged/Makefile", "localai-paged/patches/paged", "llama.cpp-pin/llama.cpp-0ed235ea.tar.gz")


def _profile(tmp_path: Path, doc: dict) -> Path:
    p = tmp_path / "profile.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def _check(*args, env=None):
    return run_parity("build", "--check-series", "--engine", "paged", *args, env=env, timeout=600)


def test_shared_inputs_give_the_tree_the_docs_name(shared):
    r = _check("--profile", "localai-paged-cpu", "--json")
    assert r.returncode == 0, r.stderr
    (doc,) = json.loads(r.stdout)
    assert (doc["pin"], doc["tree_before"], doc["tree_after"]) == (PIN, PIN_TREE, SERIES_TREE)
    assert len(doc["patches"]) == 46 and doc["patches"][0]["name"].startswith("0001-") and doc["patches"][-1]["name"].startswith("0055-")
    assert len(doc["series_digest"]) == 64 and doc["mirror_ok"] is None
    # 21 patches were exported from other bases: a warning with the count, never a failure
    assert [n[:4] for n in doc["preimage_mismatch"]] == PREIMAGE_MISMATCH
    assert "21 of 46 patches carry `index` preimage ids" in r.stderr
    assert doc["fixups"] and doc["tree_built"] not in (SERIES_TREE, PIN_TREE)  # the log fixup is not part of the mirror


def test_human_check_series_lines(shared):
    """What `--check-series` prints: pin tree, series digest, resulting tree, verdict."""
    from parity.config import load_profile
    from parity.llamacpp import build
    from parity.engines.bound import bind
    from parity.runners.local import LocalRunner
    from parity.ui import Output

    r = build.check_series(bind(load_profile("localai-paged-cpu"), "paged"), LocalRunner(), Output(json_mode=True))
    text = "\n".join(build.check_series_lines(r))
    assert f"pin tree       {PIN_TREE}" in text and f"resulting tree {SERIES_TREE}" in text
    assert f"46 patches, digest {r['series_digest']}" in text and "21 patches carry index preimage ids" in text
    assert "verdict        no expected tree" in text


def test_recorded_tree_then_verdict_ok(shared, tmp_path, monkeypatch):
    from parity.config import load_profile
    from parity.llamacpp import build
    from parity.engines.bound import bind
    from parity.runners.local import LocalRunner
    from parity.ui import Output

    env = {"PARITY_SERIES_TREES": str(tmp_path / "trees.yaml")}
    monkeypatch.setenv("PARITY_SERIES_TREES", env["PARITY_SERIES_TREES"])
    rec = build.record_series_tree(bind(load_profile("localai-paged-cpu"), "paged"), LocalRunner(), Output(json_mode=True))
    assert yaml.safe_load(Path(rec["recorded_in"]).read_text())["series"][rec["series_digest"]][0]["tree"] == SERIES_TREE
    r = _check("--profile", "localai-paged-cpu", "--json", env=env)
    assert r.returncode == 0, r.stderr
    (doc,) = json.loads(r.stdout)
    assert doc["mirror_ok"] is True and doc["expected_tree"] == SERIES_TREE and "recorded for this series digest" in doc["expected_from"]


def test_gb10_profile_accepts_the_users_current_checkout(shared, tmp_path):
    """The shipped profile pointed at the users' checkout (no expected-tree constant left)."""
    prof = _profile(
        tmp_path,
        {
            "extends": "gb10-qwen36",
            "sources": {"localai-paged": {"path": str(shared / "localai-paged"), "url": None, "archive": str(shared / "llama.cpp-pin" / "llama.cpp-0ed235ea.tar.gz")}},
        },
    )
    r = _check("--profile", str(prof), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["tree_after"] == SERIES_TREE


@pytest.fixture(scope="module")
def fork(shared, tmp_path_factory) -> Path:
    """The fork branch the series mirrors: the pin committed, then the series committed."""
    d = tmp_path_factory.mktemp("fork") / "llama.cpp"
    with tarfile.open(shared / "llama.cpp-pin" / "llama.cpp-0ed235ea.tar.gz") as t:
        t.extractall(d.parent, filter="tar")
    (d.parent / "llama.cpp-0ed235ea").rename(d)
    git = lambda *a: subprocess.run([*GIT, *a], cwd=d, check=True, capture_output=True, text=True).stdout.strip()  # noqa: E731
    git("init", "-q")
    git("add", "-A", "-f")
    git("commit", "-qm", "pin")
    assert git("rev-parse", "HEAD^{tree}") == PIN_TREE
    for p in sorted((shared / "localai-paged" / "patches" / "paged").glob("0*.patch")):
        git("apply", str(p))
    git("add", "-A", "-f")
    git("commit", "-qm", "localai-paged")
    git("tag", "exported")
    (d / "src" / "paged-kv-manager.cpp").write_text((d / "src" / "paged-kv-manager.cpp").read_text() + "// not exported yet\n")
    (d / "docs" / "fork-only.md").write_text("a file only the fork has\n")
    git("add", "-A", "-f")
    git("commit", "-qm", "work not exported as a patch yet")
    return d


def test_fork_checkout_is_the_expected_tree(shared, fork, tmp_path):
    prof = _profile(tmp_path, {"extends": "localai-paged-cpu", "engines": {"paged": {"fork": str(fork), "fork_ref": "exported"}}})
    r = _check("--profile", str(prof), "--json")
    assert r.returncode == 0, r.stderr
    (doc,) = json.loads(r.stdout)
    assert doc["mirror_ok"] is True and doc["expected_tree"] == SERIES_TREE and doc["expected_from"].startswith(f"fork {fork} exported")


def test_fork_that_differs_names_the_files_and_exits_3(shared, fork, tmp_path):
    prof = _profile(tmp_path, {"extends": "localai-paged-cpu", "engines": {"paged": {"fork": str(fork)}}})
    r = _check("--profile", str(prof))
    assert r.returncode == 3, r.stderr
    assert "mirror invariant broken" in r.stderr and SERIES_TREE in r.stderr
    assert "2 differing file(s): A docs/fork-only.md, M src/paged-kv-manager.cpp" in r.stderr
    assert "Traceback" not in r.stderr


def test_drifted_patch_names_the_patch_and_its_hunk(shared, tmp_path):
    backend = tmp_path / "llama-cpp-localai-paged"
    shutil.copytree(shared / "localai-paged" / "patches", backend / "patches")
    shutil.copy(shared / "localai-paged" / "Makefile", backend)
    p = next((backend / "patches" / "paged").glob("0031-*.patch"))
    text = p.read_text()
    hunk_at = text.index("\n@@ ", text.index("diff --git")) + 1
    header = text[hunk_at : text.index("\n", hunk_at)]
    ctx_line = text.index("\n ", hunk_at) + 1  # first context line of that hunk
    p.write_text(text[:ctx_line] + " // drifted upstream" + text[ctx_line + 1 :])
    prof = _profile(tmp_path, {"extends": "localai-paged-cpu", "sources": {"localai-paged": {"path": str(backend)}}})
    r = _check("--profile", str(prof))
    assert r.returncode == 4, r.stderr
    (line,) = [ln for ln in r.stderr.splitlines() if "does not apply" in ln]
    assert f"patch {p.name} does not apply at " in line and f"(hunk {header.split(' @@')[0]} @@)" in line
    assert "0033" not in r.stderr  # stopped at the first failure


def test_archive_at_another_commit_than_the_makefile_pin_exits_2(shared, tmp_path):
    backend = tmp_path / "llama-cpp-localai-paged"
    shutil.copytree(shared / "localai-paged" / "patches", backend / "patches")
    (backend / "Makefile").write_text((shared / "localai-paged" / "Makefile").read_text().replace(PIN, "c299a92c" + "0" * 32))
    prof = _profile(tmp_path, {"extends": "localai-paged-cpu", "sources": {"localai-paged": {"path": str(backend)}}})
    r = _check("--profile", str(prof))
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert f"Makefile LLAMA_VERSION c299a92c{'0' * 32} differs from the archive's commit {PIN} (" in line and line.endswith("llama.cpp-0ed235ea.tar.gz)")
