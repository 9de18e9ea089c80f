"""The default profile, the users' way: -p, else $PARITY_PROFILE, else the nearest parity.yaml's
`profile:`, else smoke -- through the real CLI, run in a directory of the test's own (no
parity.yaml above it), every command that takes -p reading it the same way."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import REPO, run_parity
from parity.cli.common import with_profile
from parity.config import ConfigError, ProfileChoice, choose_profile


def parity(cwd: Path, *args, **env):
    """The CLI in cwd; PYTHONPATH: this checkout's parity, whatever the venv has installed."""
    full = {"PYTHONPATH": str(REPO), "PARITY_ARTIFACTS": str(cwd / "runs"), **env}
    return run_parity(*args, cwd=cwd, env=full)


@pytest.fixture
def project(tmp_path):
    """A project with its own profile under profiles/ and a parity.yaml naming it, and a subdir."""
    (tmp_path / "profiles").mkdir()
    dgx = f"extends: gb10-qwen36\nname: dgx\nlock: {{dir: {tmp_path}/lock}}\n"
    (tmp_path / "profiles" / "dgx.yaml").write_text(dgx)
    (tmp_path / "parity.yaml").write_text("profile: profiles/dgx.yaml\n")
    (tmp_path / "work" / "deep").mkdir(parents=True)
    return tmp_path


def which(cwd: Path, *args, **env) -> dict:
    r = parity(cwd, "config", "which", "--json", *args, **env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_without_anything_the_default_is_smoke_and_says_why(tmp_path):
    doc = which(tmp_path)
    assert (doc["profile"], doc["source"], doc["project_file"]) == ("smoke", "fallback", None)
    assert doc["path"].endswith("parity/defaults/smoke.yaml")
    assert "no -p, no $PARITY_PROFILE, no parity.yaml" in doc["why"]
    r = parity(tmp_path, "config", "which")
    assert r.returncode == 0 and r.stdout.startswith("smoke (the default: ")


def test_the_environment_names_it_and_minus_p_wins(tmp_path):
    doc = which(tmp_path, PARITY_PROFILE="gb10-qwen36")
    assert (doc["profile"], doc["source"], doc["why"]) == ("gb10-qwen36", "env", "from $PARITY_PROFILE")
    assert which(tmp_path, "-p", "smoke", PARITY_PROFILE="gb10-qwen36")["source"] == "given"
    assert which(tmp_path, PARITY_PROFILE="")["profile"] == "smoke"  # set but empty: not set


def test_a_parity_yaml_above_names_a_file_relative_to_itself(project):
    doc = which(project / "work" / "deep")
    assert (doc["profile"], doc["source"]) == ("dgx", "file")
    assert doc["project_file"] == str(project / "parity.yaml") and doc["path"] == str(project / "profiles" / "dgx.yaml")
    assert doc["why"] == f"from {project / 'parity.yaml'}"
    assert which(project / "work", PARITY_PROFILE="smoke")["profile"] == "smoke"  # the environment wins over the file
    (project / "parity.yaml").write_text("profile: gb10-qwen36\n")  # an embedded name
    assert which(project / "work")["profile"] == "gb10-qwen36"


def test_every_command_that_takes_p_reads_the_same_default(project):
    """Not only `config`: a lock command and a model listing load the parity.yaml's profile."""
    here = project / "work"
    models = json.loads(parity(here, "models", "list", "--json").stdout)
    assert models["profile"] == "dgx" and {m["name"] for m in models["models"]} >= {"moe", "dense"}  # not smoke's
    r = parity(here, "lock", "status", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["dir"] == str(project / "lock")
    shown = json.loads(parity(here, "config", "show", "--json", PARITY_PROFILE="smoke").stdout)
    assert shown["name"] == "smoke"


@pytest.mark.parametrize(
    "env, parity_yaml, says",
    [
        ({"PARITY_PROFILE": "gb11"}, None, "$PARITY_PROFILE=gb11: no such embedded profile or file (embedded: "),
        ({"PARITY_PROFILE": "mine.yaml"}, None, "$PARITY_PROFILE=mine.yaml: mine.yaml does not exist"),
        ({}, "profile: nope.yaml\n", "parity.yaml: profile: 'nope.yaml' is neither an embedded profile"),
        ({}, "profile: [gb10\n", "parity.yaml: line 2: YAML syntax error"),
        ({}, "serving: {npl: [8]}\n", "parity.yaml: serving: unknown key (a parity.yaml names the default profile"),
        ({}, "profile:\n", "parity.yaml: profile: required: an embedded profile name or a profile file"),
    ],
)
def test_a_bad_default_is_one_line_exit_2_naming_where_it_came_from(tmp_path, env, parity_yaml, says):
    if parity_yaml is not None:
        (tmp_path / "parity.yaml").write_text(parity_yaml)
    for args in (["config", "which"], ["snapshot", "--dry-run"]):
        r = parity(tmp_path, *args, **env)
        assert r.returncode == 2, r.stderr
        assert r.stderr.count("\n") == 1 and says in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "runs").exists()  # refused before any run directory


def test_choose_profile_order_without_the_cli(project):
    given = choose_profile("x.yaml", env={"PARITY_PROFILE": "smoke"}, cwd=project)
    assert given == ProfileChoice("x.yaml", "given", "given with -p/--profile")
    assert choose_profile(None, env={"PARITY_PROFILE": "smoke"}, cwd=project).source == "env"
    c = choose_profile(None, env={}, cwd=project / "work" / "deep")
    assert (c.profile, c.source) == (str(project / "profiles" / "dgx.yaml"), "file")
    assert choose_profile(None, "gb10-qwen36", env={}, cwd=Path("/")).profile == "gb10-qwen36"  # a command's fallback
    with pytest.raises(ConfigError):
        choose_profile(None, env={"PARITY_PROFILE": "nope"}, cwd=project)


def test_a_remote_run_is_told_the_default_this_machine_chose():
    env, given = ProfileChoice("gb10-qwen36", "env", "from $PARITY_PROFILE"), ProfileChoice("smoke", "given", "")
    assert with_profile(["gate", "--model", "moe"], env) == ["gate", "--model", "moe", "--profile", "gb10-qwen36"]
    shipped = with_profile(["lock", "run", "--", "sh", "-c", "true"], env)
    assert shipped == ["lock", "run", "--profile", "gb10-qwen36", "--", "sh", "-c", "true"]  # before `--`
    assert with_profile(["gate", "-p", "smoke"], given) == ["gate", "-p", "smoke"]
    assert with_profile(["gate"], ProfileChoice("smoke", "fallback", "")) == ["gate"]


def test_the_suite_itself_runs_without_a_default_from_the_shell():
    assert "PARITY_PROFILE" not in os.environ
