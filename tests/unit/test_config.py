"""Typed profile loading: embedded profiles, extends, and one clear error per problem."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from parity.config import PolicyConfig, available_profiles, cache_dir, load_profile
from parity.errors import ConfigError


def write(tmp_path, text: str, name: str = "p.yaml") -> str:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return str(p)


@pytest.mark.parametrize("name", ["smoke", "gb10-qwen36", "localai-paged-cpu"])
def test_embedded_profiles_load(name):
    assert name in available_profiles()
    prof = load_profile(name)
    assert prof.name == name and prof.source_file == f"profile {name}"
    assert prof.engines and prof.models
    assert sorted(prof.policy.forbidden_bench_env) == sorted(PolicyConfig().forbidden_bench_env)


def test_smoke_models_are_synthesized_under_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("PARITY_CACHE", str(tmp_path / "cache"))
    prof = load_profile("smoke")
    tiny = prof.model("tiny")
    assert tiny.path == str(tmp_path / "cache" / "models" / "tiny-llama-f16.gguf")
    assert tiny.synth is not None and tiny.synth.dtype == "f16"
    assert prof.model("tiny-perturbed").synth.noise == 0.01
    assert cache_dir() == tmp_path / "cache"


def test_extends_deep_merges_and_replaces_lists(tmp_path):
    prof = load_profile(write(tmp_path, """
        extends: smoke
        serving: {npl: [2], ptok: 16}
        engines:
          stock: {ready_timeout_s: 5}
    """))
    assert prof.serving.npl == [2] and prof.serving.ptok == 16
    assert prof.serving.gen == load_profile("smoke").serving.gen  # untouched keys survive
    assert prof.engine("stock").ready_timeout_s == 5.0 and prof.engine("stock").source == "sdist"
    assert prof.name == "smoke"  # name comes along with the rest of the parent


@pytest.mark.parametrize(
    "text, key, problem",
    [
        ("extends: smoke\nserving: {nlp: [1]}\n", "serving.nlp", "unknown key (did you mean npl?)"),
        ("extends: smoke\nserving: {npl: 4}\n", "serving.npl", "expected list of int, got number 4"),
        ("extends: smoke\nserving: {repeat: true}\n", "serving.repeat", "expected an integer, got boolean True"),
        ("extends: smoke\nserving: {order: abc}\n", "serving.order", "must be one of 'abab' | 'abba' | 'aabb'"),
        ("extends: smoke\nlock: {poll_s: soon}\n", "lock.poll_s", "expected a number"),
        ("extends: smoke\nmodels:\n  x: {path: a.gguf, canonical: [{path: paged}]}\n", "models.x.canonical[0].md5", "required key is missing"),
        ("extends: smoke\nmodels:\n  x: {arch: llama}\n", "models.x.path", "missing (give a GGUF path or a synth: spec)"),
        ("extends: smoke\nserving: {engines: [paged, sglang]}\n", "serving.engines", "unknown engine 'sglang'"),
        ("extends: smoke\nengines:\n  paged: {cuda_archs: '90;sm_121'}\n", "engines.paged.cuda_archs", "not a CUDA architecture list"),
        ("extends: smoke\nengines:\n  x: {kind: llama}\n", "engines.x", "needs a source"),
        ("extends: smoke\nprofiling: {buckets: [{name: a, pattern: '(unclosed'}]}\n", "profiling.buckets[0].pattern", "bad regex"),
        ("extends: smoke\nlock: {idle_checks: 0}\n", "lock.idle_checks", "must be at least 1"),
        ("extends: smoke\ngates: {models: [nope]}\n", "gates.models", "unknown model 'nope'"),
        ("extends: 7\n", "extends", "must be a profile name or file"),
        ("- a list\n", "", "top level must be a mapping"),
    ],
)
def test_config_errors_name_file_key_and_problem(tmp_path, text, key, problem):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_profile(path)
    assert e.value.source == path
    assert e.value.key == key
    assert problem in e.value.problem
    assert "\n" not in str(e.value)


def test_yaml_syntax_error_names_the_line(tmp_path):
    path = write(tmp_path, "extends: smoke\nserving:\n  npl: [1, 2\n")
    with pytest.raises(ConfigError, match=r"line \d+: YAML syntax error"):
        load_profile(path)


def test_valid_cuda_arch_lists_are_accepted(tmp_path):
    for archs in ("90", "121a", "90;121a", "90-real;121a-virtual"):
        prof = load_profile(write(tmp_path, f"extends: smoke\nengines:\n  paged: {{cuda_archs: '{archs}'}}\n"))
        assert prof.engine("paged").cuda_archs == archs


def test_numbers_are_fine_as_strings(tmp_path):
    prof = load_profile(write(tmp_path, "extends: smoke\nengines:\n  paged: {cuda_archs: 121}\n"))
    assert prof.engine("paged").cuda_archs == "121"


def test_unknown_model_and_engine_lookups():
    prof = load_profile("smoke")
    with pytest.raises(ConfigError, match=r"models.nope: no such model \(known: tiny, small"):
        prof.model("nope")
    with pytest.raises(ConfigError, match=r"engines.nope: no such engine \(known: paged, stock, vllm\)"):
        prof.engine("nope")



def test_json_schema_accepts_the_embedded_profiles_and_refuses_what_the_loader_refuses(tmp_path):
    import jsonschema
    import yaml

    from parity.config import DEFAULTS_DIR, json_schema

    schema = json_schema()
    for name in available_profiles():
        jsonschema.validate(yaml.safe_load((DEFAULTS_DIR / f"{name}.yaml").read_text()), schema)
    with pytest.raises(jsonschema.ValidationError, match="nlp"):
        jsonschema.validate({"extends": "smoke", "serving": {"nlp": [1]}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"serving": {"order": "abc"}}, schema)


def test_localai_paged_cpu_reads_the_shared_data_beside_the_checkout():
    """Test data lives beside the project (../shared), never inside it; the pin comes from the
    backend Makefile, so the profile carries no pin and no expected tree."""
    from parity.config import PARITY_ROOT

    prof = load_profile("localai-paged-cpu")
    src = prof.sources["localai-paged"]
    assert src.kind == "localai" and src.pin is None and src.url is None and src.checkout is None
    assert src.path == f"{PARITY_ROOT}/../shared/localai-paged"
    assert src.archive == f"{PARITY_ROOT}/../shared/llama.cpp-pin/llama.cpp-0ed235ea.tar.gz"
    assert all(e.expected_tree is None and e.fork is None for e in prof.engines.values())
    assert prof.engines["paged"].series == "auto" and prof.engines["stock"].series is None
    gb10 = load_profile("gb10-qwen36")
    assert all(getattr(e, "expected_tree", None) is None for e in gb10.engines.values())  # no stale constant (dedb1182)


def test_extends_a_file_named_relative_to_the_profile_that_extends_it(tmp_path, monkeypatch):
    from parity.config import load_profile

    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "base.yaml").write_text("extends: smoke\nname: base\nserving: {gen: 77}\n")
    (tmp_path / "profiles" / "child.yaml").write_text("extends: base.yaml\nname: child\nserving: {ptok: 9}\n")
    monkeypatch.chdir(tmp_path)  # not the profiles' directory
    p = load_profile(str(tmp_path / "profiles" / "child.yaml"))
    assert (p.serving.gen, p.serving.ptok) == (77, 9)


def test_h100_noise_profile_arms_share_their_builds():
    from pathlib import Path

    from conftest import shared_or_skip

    shared_or_skip("localai-paged", "llama.cpp-pin")  # the build keys hash the users' series and pin
    from parity.config import load_profile
    from parity.llamacpp.build import plan
    from parity.engines.bound import bind

    p = load_profile(str(Path(__file__).resolve().parents[2] / "campaigns" / "profiles" / "h100-noise.yaml"))
    assert plan(bind(p, "stock")).key == plan(bind(p, "stock_b")).key  # the A/A arms are one binary
    assert plan(bind(p, "paged")).key == plan(bind(p, "paged_nofg")).key  # a runtime lever: same build, env differs
    assert p.engine("paged_nofg").env["LLAMA_MOE_NO_FORCE_GRAPHS"] == "1"


def test_h100_cupti_profile_keeps_the_lever_arms_one_build():
    from pathlib import Path

    from conftest import shared_or_skip

    shared_or_skip("localai-paged", "llama.cpp-pin")
    from parity.config import load_profile
    from parity.llamacpp.build import plan
    from parity.engines.bound import bind

    p = load_profile(str(Path(__file__).resolve().parents[2] / "campaigns" / "profiles" / "h100-cupti.yaml"))
    assert plan(bind(p, "paged")).key == plan(bind(p, "paged_nofg")).key and plan(bind(p, "stock")).key == plan(bind(p, "stock_b")).key
    assert p.profiling.tracer == "cupti" and p.profiling.blocks == 3


def test_each_section_reports_its_problem_in_the_loader_order(tmp_path):
    """One bad value in every section at once: the problems come one at a time, in this order
    (each section's package checks it; config.validate only calls them), each named by key."""
    bad = {
        "models.tiny.canonical[0].md5": ("models", {"tiny": {"canonical": [{"md5": "x"}]}}),
        "engines.paged.cuda_archs": ("engines", {"paged": {"cuda_archs": "sm_90"}}),
        "sources.extra.url": ("sources", {"extra": {"kind": "git"}}),
        "hosts.farm.slurm.time": ("hosts", {"farm": {"kind": "slurm", "slurm": {"time": "soon"}}}),
        "serving.gen": ("serving", {"gen": 0}),
        "gates.kl": ("gates", {"kl": {"ctx": 1}}),
        "profiling.tracer": ("profiling", {"tracer": "perf"}),
        "lock.idle_checks": ("lock", {"idle_checks": 0}),
        "stats.confidence": ("stats", {"confidence": 2}),
        "serving.calibrate.margin": ("serving", {"calibrate": {"margin": 0.5}}),
        "stats.budget_s": ("stats", {"budget_s": -1}),  # the bounds every *_s field keeps, last
    }
    seen = []
    while bad:
        doc = {"extends": "smoke"}
        for section, value in bad.values():
            merged = doc.setdefault(section, {})
            for k, v in value.items():
                merged[k] = {**merged.get(k, {}), **v} if isinstance(v, dict) else v
        with pytest.raises(ConfigError) as e:
            load_profile(write(tmp_path, yaml.safe_dump(doc)))
        seen.append(e.value.key)
        bad.pop(e.value.key)
    assert seen == ["models.tiny.canonical[0].md5", "engines.paged.cuda_archs", "sources.extra.url",
                    "hosts.farm.slurm.time", "serving.gen", "gates.kl", "profiling.tracer", "lock.idle_checks",
                    "stats.confidence", "serving.calibrate.margin", "stats.budget_s"]


def test_every_host_kind_checks_its_own_section_without_the_delegation():
    """config.py names no host kind: each kind registers its section check, and loading a profile
    with hosts of every kind imports neither the delegation nor the SSH runner."""
    import subprocess
    import sys
    import typing

    from parity.hosts.registry import HOST_SECTIONS, HOSTS
    from parity.runners.host_config import HostConfig

    kinds = set(typing.get_args(typing.get_type_hints(HostConfig)["kind"]))
    assert kinds == set(HOSTS) == set(HOST_SECTIONS)
    root = Path(__file__).parents[2]
    source = (root / "parity" / "config.py").read_text()
    assert not [k for k in kinds if f'"{k}"' in source or f"'{k}'" in source]
    code = ("import sys; from parity.config import profile_from_dict; "
            "profile_from_dict({'hosts': {'a': {'kind': 'ssh', 'hostname': 'h'}, 'b': {'kind': 'slurm'}}}); "
            "print(sorted(m for m in sys.modules if m in ('parity.hosts.delegation', 'parity.runners.ssh')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert out.stdout.strip() == "[]"
