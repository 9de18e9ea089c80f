"""Canonical md5 registry, KL band arithmetic, gate-set status rules."""

from __future__ import annotations

import math

import pytest
import yaml

from parity.config import CanonicalMd5, KLConfig, load_profile
from parity.errors import ConfigError, GateFailed, UsageError
from parity.gates import known_md5
from parity.gates.checks import ERROR, FAIL, FLAKY, NOT_RUN, PASS, Check, overall
from parity.gates.completion import EMPTY_MD5
from parity.gates.kl import band

MD5_A = "0123456789abcdef0123456789abcdef"
MD5_B = "fedcba9876543210fedcba9876543210"


@pytest.fixture
def reg(tmp_path, monkeypatch):
    path = tmp_path / "cfg" / "registry.yaml"
    monkeypatch.setenv("PARITY_REGISTRY", str(path))
    return path


def test_profile_entries_per_path():
    prof = load_profile("gb10-qwen36")
    paged = known_md5.lookup(prof.models, "moe", "paged", "chat", 48, "/nonexistent/registry.yaml")
    nonpaged = known_md5.lookup(prof.models, "moe", "nonpaged", "chat", 48, "/nonexistent/registry.yaml")
    assert paged.md5 == "8cb0ce23777bf55f92f63d0292c756b0" and "KLD 0.136000 <= 0.136597" in paged.validated
    assert nonpaged.md5 == "07db32c2bcb78d17a43ed18bc22705cd"
    assert known_md5.lookup(prof.models, "moe", "paged", "no-cnv", 48, "/nonexistent/registry.yaml") is None  # the -no-cnv form is not canonical
    assert known_md5.lookup(prof.models, "moe", "paged", "chat", 64, "/nonexistent/registry.yaml") is None


def test_record_refused_without_green_kl(reg):
    with pytest.raises(GateFailed, match="needs a green KL check"):
        known_md5.record("tiny", CanonicalMd5(MD5_A, "paged", "no-cnv", 48), kl_green=False)
    assert not reg.exists()


def test_record_refuses_empty_output_md5(reg):
    with pytest.raises(UsageError):
        known_md5.record("tiny", CanonicalMd5(EMPTY_MD5, "paged"), kl_green=True)


def test_record_then_lookup_user_entry_wins(reg):
    prof = load_profile("gb10-qwen36")
    known_md5.record("moe", CanonicalMd5(MD5_A, "paged", "chat", 48, "KL-validated: test"), True, transcript=b"The capital of France is Paris")
    got = known_md5.lookup(prof.models, "moe", "paged", "chat", 48)
    assert got.md5 == MD5_A and got.validated == "KL-validated: test"
    assert open(got.transcript, "rb").read() == b"The capital of France is Paris"
    assert got.transcript.startswith(str(reg.parent))  # relative to the registry file
    # nonpaged still comes from the profile; re-recording replaces, never duplicates
    assert known_md5.lookup(prof.models, "moe", "nonpaged", "chat", 48).md5 == "07db32c2bcb78d17a43ed18bc22705cd"
    known_md5.record("moe", CanonicalMd5(MD5_B, "paged", "chat", 48, "again"), True)
    data = yaml.safe_load(reg.read_text())
    assert [e["md5"] for e in data["models"]["moe"]] == [MD5_B]


def test_bad_registry_file_is_a_config_error(reg):
    reg.parent.mkdir(parents=True)
    reg.write_text("models:\n  tiny:\n    - {md5: d41d8cd98f00b204e9800998ecf8427e, path: paged}\n")
    with pytest.raises(ConfigError, match="not a usable md5"):
        known_md5.lookup(load_profile("smoke").models, "tiny", "paged", "chat", 48)
    reg.write_text("models: [1, 2\n")
    with pytest.raises(ConfigError, match="YAML"):
        known_md5.lookup(load_profile("smoke").models, "tiny", "paged", "chat", 48)


def stats(kld, ppl=100.0, same_top_p=99.9):
    return {"kld": [kld, 0.0], "ppl_q": [ppl, 1.0], "same_top_p": [same_top_p, 0.1]}


def test_band_against_baseline():
    kl = KLConfig(kld_slack=0.0, ppl_band_pct=1.0)
    bounds, problems = band(stats(0.136000, 7.40), stats(0.136597, 7.41), kl, "nonpaged")
    assert problems == [] and len(bounds) == 3  # KLD, PPL, same top p >= 99.5 % (the default)
    _, problems = band(stats(0.137, 7.40), stats(0.136597, 7.41), kl, "nonpaged")
    assert problems and "> baseline" in problems[0]
    _, problems = band(stats(0.1, 8.0), stats(0.136597, 7.41), kl, "nonpaged")
    assert problems and "PPL" in problems[0]
    # slack widens the KLD bound
    assert band(stats(0.137), stats(0.136597), KLConfig(kld_slack=0.001), "b")[1] == []


def test_band_absolute_and_nan():
    kl = KLConfig(max_kld=0.136597)
    assert band(stats(0.136), None, kl, None)[1] == []
    assert band(stats(0.2), None, kl, None)[1]
    assert band(stats(math.nan), None, kl, None)[1]  # NaN never satisfies a bound
    assert band(stats(math.nan), stats(0.1), KLConfig(), "b")[1]


def ck(status):
    return Check("c", "md5", "x", "y", status)


def test_overall_status():
    assert overall([ck(PASS), ck(NOT_RUN)]) == NOT_RUN  # closed world: a check not evaluated is no pass
    assert overall([ck(PASS), ck(FLAKY)]) == FAIL  # passed only on a retry: zero tolerance
    assert overall([ck(PASS), ck(PASS)]) == PASS
    assert overall([ck(PASS), ck(FAIL)]) == FAIL
    assert overall([ck(PASS), ck(ERROR)]) == FAIL
    assert overall([ck(NOT_RUN)]) == NOT_RUN  # nothing ran: not green
    assert overall([]) == NOT_RUN
