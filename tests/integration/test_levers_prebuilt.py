"""`parity ab` on an engine given as prebuilt binaries (engines.X.bin_dir, no source): the real
smoke build's bin dir stands in for binaries built elsewhere.  The run is measured, reported and
recorded like any other: its provenance says prebuilt, the map row lands, summary.json holds the
verdict (it used to fail rendering the report after measuring, at the build key a prebuilt
engine has not, leaving no map row and summary.json at "measuring")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import run_parity

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def paged_bin(smoke_profile) -> Path:
    from parity.llamacpp.build import ensure_built
    from parity.engines.bound import bind
    from parity.runners.local import LocalRunner
    from parity.ui import Output

    return Path(ensure_built(bind(smoke_profile, "paged"), LocalRunner(), Output(json_mode=True)).bin_dir)


def test_ab_on_prebuilt_binaries_is_recorded(paged_bin, tmp_path):
    prof = tmp_path / "p.yaml"
    engine = {"kind": "llama", "bin_dir": str(paged_bin), "env": {"GGML_NO_BACKTRACE": "1"}, "paths": {"paged": {"LLAMA_KV_PAGED": "1"}}, "default_path": "paged"}
    prof.write_text(yaml.safe_dump({"extends": "smoke", "lock": {"dir": str(tmp_path / "lock"), "poll_s": 0.5}, "levers": {"map": str(tmp_path / "levers.yaml")},
                                    "engines": {"pre": engine}}))  # fmt: skip
    r = run_parity("--artifacts", str(tmp_path / "runs"), "ab", "--profile", str(prof), "--engine", "pre", "--env", "PARITY_DEMO_BANNER=1", "--model", "tiny",
                   "--npl", "1", "--npp", "16", "--ntg", "4", "--repeat", "2", "--gate-models", "tiny", "--gate-paths", "paged", "--no-post-gates", "--json", timeout=1800)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    run = Path(doc["run_dir"])
    assert {arm: b.get("prebuilt") for arm, b in doc["builds"].items()} == {"pre": str(paged_bin), "pre+lever": str(paged_bin)}
    assert doc["pin"] == f"prebuilt:{paged_bin}" and doc["verdict"] in ("GO", "NO-GO", "FLAT", "INCONCLUSIVE")
    summary = json.loads((run / "summary.json").read_text())
    assert summary["verdict"] == doc["verdict"] and "state" not in summary
    report = (run / doc["report"]).read_text()
    assert f"pre: prebuilt {paged_bin}" in report and f"pre+lever: prebuilt {paged_bin}" in report
    assert json.loads((run / "builds.json").read_text())["pre"]["prebuilt"] == str(paged_bin)
    (row,) = yaml.safe_load((tmp_path / "levers.yaml").read_text())["levers"]
    assert row["lever"] == "PARITY_DEMO_BANNER=1" and row["verdict"] == doc["verdict"] and row["pin"] == f"prebuilt:{paged_bin}" and row["artifact"] == str(run)
    assert json.loads((run / "manifest.json").read_text())["status"] == "complete"


def test_four_ab_runs_at_once_land_four_rows(paged_bin, tmp_path):
    """Four real `parity ab` runs started together into one map (they take the GPU lock in
    turn and append as each ends): every verdict printed is a row in the map."""
    import subprocess
    import sys

    from conftest import REPO

    prof = tmp_path / "p.yaml"
    engine = {"kind": "llama", "bin_dir": str(paged_bin), "env": {"GGML_NO_BACKTRACE": "1"}, "paths": {"paged": {"LLAMA_KV_PAGED": "1"}}, "default_path": "paged"}
    prof.write_text(yaml.safe_dump({"extends": "smoke", "lock": {"dir": str(tmp_path / "lock"), "poll_s": 0.2}, "levers": {"map": str(tmp_path / "levers.yaml")},
                                    "engines": {"pre": engine}}))  # fmt: skip
    procs = [subprocess.Popen([sys.executable, "-m", "parity", "--artifacts", str(tmp_path / "runs"), "ab", "--profile", str(prof), "--engine", "pre", "--env", f"PARITY_DEMO_BANNER={i}",
                               "--model", "tiny", "--npl", "1", "--npp", "16", "--ntg", "4", "--repeat", "2", "--gate-models", "tiny", "--gate-paths", "paged", "--no-post-gates", "--json"],
                              cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(4)]  # fmt: skip
    docs = []
    for p in procs:
        out, err = p.communicate(timeout=1800)
        assert p.returncode == 0, err[-3000:]
        docs.append(json.loads(out))
    rows = yaml.safe_load((tmp_path / "levers.yaml").read_text())["levers"]
    assert sorted(r["lever"] for r in rows) == [f"PARITY_DEMO_BANNER={i}" for i in range(4)]
    assert {r["artifact"] for r in rows} == {d["run_dir"] for d in docs}
    md = (tmp_path / "levers.md").read_text()
    assert all(f"**PARITY_DEMO_BANNER={i}**" in md for i in range(4))
