"""The benchmark env policy: the seeds' forbidden knobs are refused with their reason."""

from __future__ import annotations

import pytest

from parity.config import PolicyConfig
from parity.engines.envpolicy import check_bench_env
from parity.errors import UsageError

SEED_KNOBS = ["LLAMA_MAX_BATCH_TOKENS", "GDN_TC", "GDN_CHUNK_MIN", "LLAMA_PAGED_DECODE_STABLE"]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in SEED_KNOBS:
        monkeypatch.delenv(name, raising=False)


def test_default_policy_names_every_seed_knob_with_a_reason():
    policy = PolicyConfig()
    assert sorted(policy.forbidden_bench_env) == sorted(SEED_KNOBS)
    assert all(len(reason) > 20 for reason in policy.forbidden_bench_env.values())


@pytest.mark.parametrize("name", SEED_KNOBS)
def test_profile_env_knob_is_refused_with_reason_and_override(name):
    policy = PolicyConfig()
    with pytest.raises(UsageError) as e:
        check_bench_env({name: "1", "GGML_NO_BACKTRACE": "1"}, policy)
    msg = str(e.value)
    assert msg.startswith(f"{name} is not allowed in benchmark runs: ")
    assert policy.forbidden_bench_env[name] in msg
    assert "profile" in msg and f"--allow-env {name}" in msg
    assert "\n" not in msg


def test_inherited_environment_is_checked(monkeypatch):
    monkeypatch.setenv("GDN_TC", "3")
    with pytest.raises(UsageError, match=r"GDN_TC is not allowed in benchmark runs: .*inherited environment sets GDN_TC=3"):
        check_bench_env({}, PolicyConfig())
    check_bench_env({}, PolicyConfig(), inherit=False)  # a caller that builds a clean env may opt out


def test_allow_lets_a_knob_through(monkeypatch):
    monkeypatch.setenv("LLAMA_MAX_BATCH_TOKENS", "4096")
    check_bench_env({"GDN_TC": "5"}, PolicyConfig(), allow=["LLAMA_MAX_BATCH_TOKENS", "GDN_TC"])
    with pytest.raises(UsageError, match="GDN_TC"):  # allowing one knob does not allow the others
        check_bench_env({"GDN_TC": "5"}, PolicyConfig(), allow=["LLAMA_MAX_BATCH_TOKENS"])


def test_allow_typo_is_refused():
    with pytest.raises(UsageError, match=r"--allow-env GDN_TCC: not a forbidden bench knob \(forbidden: GDN_CHUNK_MIN, GDN_TC, "):
        check_bench_env({}, PolicyConfig(), allow=["GDN_TCC"])


def test_context_and_custom_policy():
    policy = PolicyConfig(forbidden_bench_env={"MY_KNOB": "skews decode"})
    with pytest.raises(UsageError, match="MY_KNOB is not allowed in profile runs: skews decode"):
        check_bench_env({"MY_KNOB": ""}, policy, context="profile")  # set to empty still counts as set
    check_bench_env({"GDN_TC": "5"}, policy)  # not forbidden by this policy
    check_bench_env({}, PolicyConfig(forbidden_bench_env={}))
