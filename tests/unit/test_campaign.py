"""Campaign loading, validation, substitution, plans, failure policies, exit codes."""

from __future__ import annotations

from pathlib import Path

import json

import pytest

from parity import campaign as cmp
from parity.artifacts import RunDir
from parity.errors import ConfigError, GateFailed, InfraError, ParityError, RegressionDetected, UsageError


def write(tmp_path: Path, text: str) -> str:
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return str(p)


def test_load_substitutes_vars_keeps_types_and_builtins(tmp_path):
    c = cmp.load_campaign(write(tmp_path, """
name: x
vars: {n: 3, engines: [a, b], who: world}
steps:
  - {name: s1, kind: shell, with: {argv: [echo, "hi ${who}", "${n}"], count: "${n}", list: "${engines}", root: "${PARITY_ROOT}/campaigns"}}
"""), {"who": "cli"})
    opts = c.steps[0].options
    assert opts["argv"] == ["echo", "hi cli", 3] and opts["count"] == 3 and opts["list"] == ["a", "b"]
    assert Path(opts["root"]).is_dir()
    assert c.vars == {"n": 3, "engines": ["a", "b"], "who": "cli"} and len(c.sha256) == 64


@pytest.mark.parametrize(
    "body, words",
    [
        ("steps: []", "non-empty list"),
        ("bogus: 1\nsteps: [{kind: shell}]", "bogus: unknown key"),
        ("steps: [{kind: nosuch}]", "unknown step kind 'nosuch'"),
        ("steps: [{name: a, kind: shell}, {name: a, kind: shell}]", "duplicate step name"),
        ("steps: [{kind: shell, on_failure: maybe}]", "must be stop, continue or always-run"),
        ("steps: [{kind: shell, with: {argv: ['${nope}']}}]", "undefined variable ${nope}"),
        ("steps: [{name: 'a b/c', kind: shell}]", "names files in the run dir"),
        ("hosts: [a, a]\nsteps: [{kind: shell}]", "listed twice"),
        ("hosts: [local]\nsteps: [{kind: shell}]", "remote host names only"),
        ("hosts: a\nsteps: [{kind: shell}]", "list of host names"),
        ("steps: [{kind: shell, always_run: yes-please}]", "true or false"),
        ("steps: [: bad", "YAML syntax error"),
    ],
)
def test_bad_campaigns_are_config_errors(tmp_path, body, words):
    with pytest.raises(ConfigError) as e:
        cmp.load_campaign(write(tmp_path, body))
    assert words in str(e.value) and "\n" not in str(e.value)


def test_missing_file_and_only(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        cmp.load_campaign(str(tmp_path / "none.yaml"))
    c = cmp.load_campaign(write(tmp_path, "steps: [{name: a, kind: shell}, {name: b, kind: shell}, {name: c, kind: shell}]"))
    assert [s.name for s in cmp.plan(c, ["c", "a"])] == ["a", "c"]
    with pytest.raises(UsageError, match="--only z"):
        cmp.plan(c, ["z"])


def test_always_run_spelling(tmp_path):
    c = cmp.load_campaign(write(tmp_path, "steps: [{name: a, kind: shell, on_failure: always-run}, {name: b, kind: shell, always_run: true}]"))
    assert [(s.on_failure, s.always_run) for s in c.steps] == [("stop", True), ("stop", True)]


# ---- executing with registered test kinds ---------------------------------------------------

CALLS: list[str] = []


def ok_step(ctx, options):
    CALLS.append(ctx.vars["_step"])
    return {"value": options.get("value")}


def fail_step(ctx, options):
    CALLS.append(ctx.vars["_step"])
    raise {"gate": GateFailed, "infra": InfraError, "regression": RegressionDetected, "other": ParityError}[options["how"]]("boom")


@pytest.fixture
def ctx(tmp_path, monkeypatch):
    from parity.config import load_profile
    from parity.context import Context
    from parity.runners.local import LocalRunner
    from parity.ui import Output

    monkeypatch.setitem(cmp.STEP_KINDS, "t-ok", cmp.StepKind(f"{__name__}:ok_step"))
    monkeypatch.setitem(cmp.STEP_KINDS, "t-fail", cmp.StepKind(f"{__name__}:fail_step"))
    CALLS.clear()
    c = Context(load_profile("smoke"), LocalRunner(), Output(json_mode=True), tmp_path / "runs")
    c.run = RunDir.create(tmp_path / "runs", "t", kind="campaign", argv=[])
    return c


def run(ctx, tmp_path, text, **kw):
    c = cmp.load_campaign(write(tmp_path, text))
    return cmp.run_campaign(ctx, c, c.steps, **kw)


@pytest.mark.parametrize("how, code", [("gate", 3), ("infra", 4), ("regression", 5), ("other", 1)])
def test_stop_skips_later_steps_but_always_run_runs_and_code_is_kept(ctx, tmp_path, how, code):
    with pytest.raises(ParityError) as e:
        run(ctx, tmp_path, f"""
steps:
  - {{name: a, kind: t-ok}}
  - {{name: b, kind: t-fail, with: {{how: {how}}}}}
  - {{name: c, kind: t-ok}}
  - {{name: post, kind: t-ok, on_failure: always-run}}
""")
    assert e.value.exit_code == code
    assert CALLS == ["a", "b", "post"]
    steps = ctx.run.manifest()["steps"]
    assert [steps[s]["status"] for s in "abc"] == ["complete", "failed", "skipped"] and steps["post"]["status"] == "complete"
    assert ctx.run.read_json("campaign.json")["exit_code"] == code
    assert e.value.campaign_summary["failed"] == ["b"]


def test_continue_runs_later_steps_and_still_fails(ctx, tmp_path):
    with pytest.raises(GateFailed):
        run(ctx, tmp_path, """
steps:
  - {name: a, kind: t-fail, with: {how: gate}, on_failure: continue}
  - {name: b, kind: t-ok, with: {value: 2}}
""")
    assert CALLS == ["a", "b"]
    assert ctx.run.read_json("steps/b.json") == {"value": 2}


def test_resume_skips_complete_steps_but_retakes_the_lock(ctx, tmp_path):
    text = "steps:\n  - {name: a, kind: t-ok}\n  - {name: lock, kind: lock}\n  - {name: b, kind: t-ok}\n"
    c = cmp.load_campaign(write(tmp_path, text))
    for name in ("a", "lock"):
        ctx.run.record_step(name, "complete")
    ctx.run.record_step("b", "running")
    assert [cmp.will_skip(s, ctx.run) for s in c.steps] == [True, False, False]



def test_in_process_main_records_its_own_argv(tmp_path):
    """cli.main(argv) (tests, embedding scripts) puts that argv in the manifest, not the host process's."""
    import parity.cli as cli

    camp = tmp_path / "c.yaml"
    camp.write_text("name: argv-check\nprofile: smoke\nsteps:\n  - {name: t, kind: shell, with: {argv: ['true']}}\n")
    argv = ["--artifacts", str(tmp_path / "runs"), "campaign", "run", str(camp)]
    try:
        assert cli.main(argv) == 0
    finally:
        cli.state.argv = None
    (m,) = (tmp_path / "runs").glob("*/manifest.json")
    assert json.loads(m.read_text())["argv"] == ["parity", *argv]


def test_campaign_profile_path_takes_parity_root_and_vars(tmp_path):
    """`profile: ${PARITY_ROOT}/campaigns/profiles/...` works from any cwd and on a remote checkout."""
    from parity.campaign import load_campaign
    from parity.config import load_profile

    camp = tmp_path / "c.yaml"
    camp.write_text("name: p\nvars: {dev: h100-device}\nprofile: ${PARITY_ROOT}/campaigns/profiles/${dev}.yaml\nsteps:\n  - {name: s, kind: synth}\n")
    prof = load_profile(load_campaign(str(camp)).profile)
    assert prof.name == "h100-device" and prof.engine("paged").cuda_archs == "90"
    camp.write_text("name: p\nprofile: ${nope}/x.yaml\nsteps:\n  - {name: s, kind: synth}\n")
    with pytest.raises(ConfigError, match="undefined variable"):
        load_campaign(str(camp))
