"""`parity canary` and `parity bisect --over pin --criterion apply` on a synthetic upstream:
the pin archive committed in a temp repo, plus commits on top, one of which edits a line that
a middle patch of the users' real series (46 patches) has in a hunk's context.  No compiling:
each probe reads a commit into a scratch index and applies the series strictly there."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from conftest import run_parity, shared_or_skip
from upstream_helpers import break_commit, find_breaker, git, harmless_commit, pin_repo

PIN = "0ed235ea2c17a19fc8238668653946721ed136fd"
PIN_TREE = "c3ed2c39b9700f3aeff95ab391571db7dd7e0c39"
SERIES_TREE = "6cf1523047e0e38679baff20844bdc9e6829eb22"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    """{repo, pin, commits (c1..c6), breaker, culprit}: c4 breaks a middle patch, the rest add docs."""
    shared = shared_or_skip("localai-paged/patches/paged", "llama.cpp-pin/llama.cpp-0ed235ea.tar.gz")
    repo = pin_repo(shared / "llama.cpp-pin" / "llama.cpp-0ed235ea.tar.gz", tmp_path_factory.mktemp("upstream") / "llama.cpp")
    assert git(repo, "rev-parse", "HEAD^{tree}") == PIN_TREE
    pin = git(repo, "rev-parse", "HEAD")
    series = sorted((shared / "localai-paged" / "patches" / "paged").glob("0*.patch"))
    breaker = find_breaker(series, repo)
    assert 10 < series.index(next(p for p in series if p.name == breaker.patch)) < 36  # a middle patch
    commits = [harmless_commit(repo, i) for i in (1, 2, 3)]
    culprit = break_commit(repo, breaker)
    commits += [culprit] + [harmless_commit(repo, i) for i in (5, 6)]
    return {"repo": repo, "pin": pin, "commits": commits, "breaker": breaker, "culprit": culprit}


def _canary(upstream, ref, tmp_path):
    return run_parity("--artifacts", str(tmp_path), "canary", "--profile", "localai-paged-cpu", "--repo", str(upstream["repo"]), "--upstream", ref, "--json")


def test_canary_on_the_pin_is_green(upstream, tmp_path):
    r = _canary(upstream, upstream["pin"], tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["green"] and doc["commit"] == upstream["pin"] and (doc["applied"], doc["patches"]) == (46, 46)
    assert (doc["tree_before"], doc["tree_after"]) == (PIN_TREE, SERIES_TREE)
    assert doc["line"] == f"canary green: 46/46 patches apply at {upstream['pin']} ({upstream['pin'][:12]}); applied tree {SERIES_TREE}"
    run = Path(doc["run_dir"])
    assert json.loads((run / "manifest.json").read_text())["status"] == "complete"
    assert "verdict: **green**" in (run / "canary.md").read_text()


def test_canary_on_a_newer_upstream_names_the_patch_and_hunk(upstream, tmp_path):
    b = upstream["breaker"]
    r = run_parity("--artifacts", str(tmp_path), "canary", "--profile", "localai-paged-cpu", "--repo", str(upstream["repo"]), "--upstream", "master")
    assert r.returncode == 1, r.stderr
    text = r.stdout + r.stderr
    assert f"canary red at master ({upstream['commits'][-1][:12]}): patch {b.patch} does not apply at {b.file}:" in text
    assert f"(hunk {b.hunk})" in text and "Traceback" not in text
    doc = json.loads(_canary(upstream, "master", tmp_path).stdout)
    assert not doc["green"] and doc["failure"]["patch"] == b.patch and doc["failure"]["hunk"] == b.hunk and doc["failure"]["file"] == b.file
    names = sorted(p.name for p in Path(doc["series_dir"]).glob("0*.patch"))
    assert doc["applied"] == names.index(b.patch)
    assert "verdict: **red**" in (Path(doc["run_dir"]) / "canary.md").read_text()


def test_canary_bad_input_is_one_line_exit_2(upstream, tmp_path):
    r = run_parity("--artifacts", str(tmp_path), "canary", "--profile", "localai-paged-cpu", "--repo", str(upstream["repo"]), "--upstream", "no-such-ref")
    assert r.returncode == 2 and r.stderr.strip() == f"parity: error: no-such-ref: not a commit of {upstream['repo']}"
    r = run_parity("--artifacts", str(tmp_path), "canary", "--profile", "localai-paged-cpu", "--upstream", "master")
    assert r.returncode == 2 and "its source names no llama.cpp checkout or url: give --repo PATH|URL" in r.stderr


def test_pin_bisection_finds_the_commit_that_breaks_a_patch(upstream, tmp_path):
    b = upstream["breaker"]
    r = run_parity("--artifacts", str(tmp_path), "bisect", "--over", "pin", "--criterion", "apply", "--profile", "localai-paged-cpu", "--repo", str(upstream["repo"]),
                   "--good", upstream["pin"], "--bad", "master", "--json", timeout=1200)  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    n = len(upstream["commits"])
    assert doc["n"] == n and doc["commits"] == [upstream["pin"], *upstream["commits"]]
    assert doc["culprit"].startswith(upstream["culprit"][:12]) and doc["culprit"].endswith("upstream: edit a line a middle patch needs")
    assert doc["probes"][0]["role"] == "reference" and doc["probes"][0]["verdict"] == "good"
    assert doc["probes_counted"] <= math.ceil(math.log2(n)) + 1 == doc["bound"]
    ev = doc["evidence"]["evidence"]["failure"]
    assert (ev["patch"], ev["hunk"], ev["file"]) == (b.patch, b.hunk, b.file)
    run = Path(doc["run_dir"])
    tsv = (run / "probes.tsv").read_text().splitlines()
    assert tsv[0] == "probe\trole\tstate\tbuild\tresult\tverdict" and len(tsv) == 1 + len(doc["probes"])
    md = (run / "bisect.md").read_text()
    assert f"**culprit: `{doc['culprit']}`**" in md and f"patch {b.patch} does not apply" in md


def test_pin_bisection_refuses_a_bad_that_is_good(upstream, tmp_path):
    r = run_parity("--artifacts", str(tmp_path), "bisect", "--over", "pin", "--criterion", "apply", "--profile", "localai-paged-cpu", "--repo", str(upstream["repo"]),
                   "--good", upstream["pin"], "--bad", upstream["commits"][2], timeout=1200)  # fmt: skip
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith(f"parity: error: the bad endpoint {upstream['commits'][2][:12]} upstream: docs 3 is not bad (46/46 apply")


def test_canary_clones_a_url_once(upstream, tmp_path):
    """--repo URL: a bare clone under the cache (here a private one), fetched again on the next run."""
    env = {"PARITY_CACHE": str(tmp_path / "cache")}
    url = f"file://{upstream['repo']}"
    for _ in range(2):
        r = run_parity("--artifacts", str(tmp_path / "runs"), "canary", "--profile", "localai-paged-cpu", "--repo", url, "--upstream", "master", "--json", env=env)
        assert r.returncode == 1, r.stderr
        doc = json.loads(r.stdout)
        assert doc["commit"] == upstream["commits"][-1] and doc["failure"]["patch"] == upstream["breaker"].patch
        assert doc["repo"].startswith(str(tmp_path / "cache" / "sources" / "clones"))
    assert len(list((tmp_path / "cache" / "sources" / "clones").iterdir())) == 1
