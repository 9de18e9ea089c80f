"""`parity bisect --over pin --criterion md5`: every probe exports a commit of a synthetic
upstream (the pin archive committed, then six commits; the fourth makes llama-completion take
the neighbour of every greedy token, a file the series leaves alone), applies the users' real
series, builds llama-completion (ccache: the commits differ in one file) and gates the greedy
md5 of the nonpaged path against the good commit's.  Fixed commit dates keep the commit ids,
and so the builds, the same run to run."""

from __future__ import annotations

import json
import math

import pytest

from conftest import run_parity, shared_or_skip
from upstream_helpers import edit_commit, git, harmless_commit, pin_repo

pytestmark = pytest.mark.slow

OLD = "            const llama_token id = common_sampler_sample(smpl, ctx, -1);\n"
NEW = ("            llama_token id = common_sampler_sample(smpl, ctx, -1);\n"
       "            if (!llama_vocab_is_eog(vocab, id) && (id ^ 1) < llama_vocab_n_tokens(vocab) && !llama_vocab_is_eog(vocab, id ^ 1)) {\n"
       "                id = id ^ 1; // an upstream change of greedy output\n"
       "            }\n")  # fmt: skip


def test_pin_md5_bisection_names_the_commit_that_moves_the_md5(tmp_path):
    shared = shared_or_skip("localai-paged/patches/paged", "llama.cpp-pin/llama.cpp-0ed235ea.tar.gz")
    repo = pin_repo(shared / "llama.cpp-pin" / "llama.cpp-0ed235ea.tar.gz", tmp_path / "llama.cpp")
    pin = git(repo, "rev-parse", "HEAD")
    commits = [harmless_commit(repo, i) for i in (1, 2, 3)]
    culprit = edit_commit(repo, "tools/completion/completion.cpp", OLD, NEW, "upstream: greedy takes the neighbour token")
    commits += [culprit] + [harmless_commit(repo, i) for i in (5, 6)]
    r = run_parity("--artifacts", str(tmp_path / "runs"), "bisect", "--over", "pin", "--criterion", "md5", "--profile", "localai-paged-cpu", "--repo", str(repo),
                   "--good", pin, "--bad", "master", "--model", "tiny", "--path", "nonpaged", "--json", env={"PARITY_LOCK_DIR": str(tmp_path / "lock")}, timeout=5400)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    log = "\n".join(f"{p['n']} {p['role']} {p['label']} {p['build']} {p['result']} {p['verdict']}" for p in doc["probes"])
    print(log)
    assert doc["culprit"] == f"{culprit[:12]} upstream: greedy takes the neighbour token", log
    assert doc["probes_counted"] <= math.ceil(math.log2(len(commits))) + 1 == doc["bound"], log
    assert doc["probes"][0]["role"] == "reference" and doc["probes"][0]["label"].startswith(pin[:12])
    ev = doc["evidence"]["evidence"]
    assert ev["status"] == "fail" and ev["got"] != ev["expected"]
