"""The pre/post wrapper and the `gate` campaign step, on real binaries."""

from __future__ import annotations

import pytest
from gate_helpers import make_ctx, values

from parity.errors import ConfigError, GateFailed, UsageError
from parity.gates.md5 import md5_gate
from parity.gates.prepost import GateSpec
from parity.gating import campaign_step
from parity.session import gated

pytestmark = pytest.mark.slow


@pytest.fixture
def ctx(engine_bins, tiny_model, tmp_path):
    return make_ctx(tmp_path)


def spec(**kw):
    return GateSpec(**{"models": ["tiny"], "ops": ["RMS_NORM"], "backend": "CPU", "engine": "paged", **kw})


def tsv(ctx):
    return [line.split("\t") for line in (ctx.run.path / "gate_checks.tsv").read_text().splitlines()]


def test_green_pre_and_post(ctx):
    ran = []
    with gated(ctx, spec()):
        ran.append(True)
    assert ran == [True]
    rows = tsv(ctx)
    assert rows[0] == ["phase", "check", "expected", "got", "status"]
    assert [(r[0], r[1], r[4]) for r in rows[1:]] == [
        ("pre", "md5 tiny/paged", "pass"),
        ("pre", "op RMS_NORM [CPU]", "pass"),
        ("post", "md5 tiny/paged", "pass"),
        ("post", "op RMS_NORM [CPU]", "pass"),
    ]
    gates = ctx.run.read_json("gates.json")
    assert gates["status"] == "pass" and gates["pre"]["status"] == gates["post"]["status"] == "pass"
    assert {"check", "kind", "model", "path", "expected", "got", "status", "detail"} <= set(gates["post"]["checks"][0])
    assert ctx.run.manifest()["valid"] is True
    assert (ctx.run.path / "gates" / "pre" / "md5-tiny-paged.out").exists() and (ctx.run.path / "gates" / "post" / "md5-tiny-paged.out").exists()


def test_red_pre_gate_stops_before_the_body(ctx):
    ran = []
    with pytest.raises(GateFailed, match="pre-gate red: md5 tiny/paged"):
        with gated(ctx, spec(expect="0123456789abcdef0123456789abcdef")):
            ran.append(True)
    assert ran == []
    gates = ctx.run.read_json("gates.json")
    assert gates["status"] == "fail" and "post" not in gates


def test_red_post_gate_marks_the_run_invalid(ctx):
    good = md5_gate(*values(ctx), "tiny", "paged")
    assert good.status == "pass"
    with pytest.raises(GateFailed, match="post-gate red"):
        with gated(ctx, spec(expect=good.got, ops=[])):
            # the body changes a sampling flag: what it measured no longer matches the gated build
            ctx.profile.gates.completion_args = [*ctx.profile.gates.completion_args, "--temp", "1.0"]
    m = ctx.run.manifest()
    assert m["valid"] is False and any("post-gate" in r for r in m["invalid_reasons"])
    assert [r[4] for r in tsv(ctx)[1:]] == ["pass", "fail"]


def test_post_gate_runs_after_a_failing_body(ctx):
    with pytest.raises(RuntimeError, match="bench broke"):
        with gated(ctx, spec(ops=[])):
            raise RuntimeError("bench broke")
    assert ctx.run.read_json("gates.json")["post"]["status"] == "pass"


def test_disabled_wrapper_runs_only_the_body(tmp_path):
    ctx = make_ctx(tmp_path)
    with gated(ctx, enabled=False):
        pass
    assert not (ctx.run.path / "gates.json").exists()


def test_nothing_to_check_is_a_usage_error(tmp_path):
    ctx = make_ctx(tmp_path)
    with pytest.raises(UsageError, match="nothing to check"):
        with gated(ctx, GateSpec(engine="paged")):
            pass


def test_campaign_step_pre_and_post(ctx):
    with pytest.raises(ConfigError, match="unknown gate option"):
        campaign_step(ctx, {"phase": "pre", "model": "tiny"})
    with pytest.raises(ConfigError, match="with.kl"):
        campaign_step(ctx, {"phase": "pre", "kl": "yes"})
    pre = campaign_step(ctx, {"phase": "pre", "models": "tiny", "paths": ["paged", "nonpaged"], "ops": []})
    assert pre["status"] == "pass" and [c["check"] for c in pre["checks"]] == ["md5 tiny/paged", "md5 tiny/nonpaged"]
    post = campaign_step(ctx, {"phase": "post", "models": ["tiny"], "ops": ["RMS_NORM"], "backend": "CPU"})
    assert post["status"] == "pass"
    gates = ctx.run.read_json("gates.json")
    assert set(gates) == {"pre", "post", "status"} and gates["status"] == "pass"


def test_smoke_campaign_gate_steps(engine_bins, tiny_model, parity_cli, tmp_path):
    import json

    res = parity_cli("--artifacts", str(tmp_path / "runs"), "campaign", "run", "campaigns/smoke.yaml", "--only", "pre-gates", "--only", "post-gates", "--json",
                     env={"PARITY_LOCK_DIR": str(tmp_path / "lock")})  # fmt: skip  (not the smoke profile's ~/gpu_bench_lock)
    assert res.returncode == 0, res.stderr
    run_dir = tmp_path / "runs" / json.loads(res.stdout)["run_dir"].split("/")[-1]
    rows = [line.split("\t") for line in (run_dir / "gate_checks.tsv").read_text().splitlines()[1:]]
    checks = {(r[0], r[1]) for r in rows}
    for phase in ("pre", "post"):
        assert {(phase, "md5 tiny/paged"), (phase, "md5 tiny/nonpaged [stock]"), (phase, "op SOFT_MAX (m_prec=f16) [CPU]"), (phase, "kl tiny-perturbed/paged vs tiny")} <= checks
    assert all(r[4] == "pass" for r in rows)
    users = [line.split("\t") for line in (run_dir / "gate_summary.tsv").read_text().splitlines()[1:]]
    names = {(r[0], r[1]) for r in users}
    for phase in ("pre", "post"):  # the users' names for the same checks
        assert {(phase, "tiny_md5"), (phase, "tiny_nonpaged_md5"), (phase, "tiny_stock_md5"), (phase, "op_SOFT_MAX"), (phase, "kl_tiny-perturbed_paged")} <= names
    assert all(r[2] == "ok" for r in users)
