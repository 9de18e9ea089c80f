"""Bad input through the real CLI: exactly one line on stderr, exit 2, no traceback."""

from __future__ import annotations

import textwrap

import pytest

from tests.conftest import run_parity

# (id, argv, files to write under tmp, extra env, substring the one line must contain)
CASES = [
    ("missing-profile-file", ["config", "show", "--profile", "{tmp}/nope.yaml"], {}, {}, "file not found"),
    ("unknown-embedded-profile", ["config", "show", "--profile", "no-such-profile"], {}, {}, "no such embedded profile"),
    ("profile-is-directory", ["config", "show", "--profile", "{tmp}/dir.yaml"], {"dir.yaml/keep": ""}, {}, "is a directory"),
    ("yaml-syntax-error", ["config", "show", "--profile", "{tmp}/p.yaml"], {"p.yaml": "models: [unclosed\n"}, {}, "YAML syntax error"),
    ("unknown-key", ["config", "show", "--profile", "{tmp}/p.yaml"], {"p.yaml": "extends: smoke\nservng: {npl: [1]}\n"}, {}, "servng: unknown key"),
    ("wrong-type", ["config", "show", "--profile", "{tmp}/p.yaml"], {"p.yaml": "extends: smoke\nserving: {npl: many}\n"}, {}, "serving.npl: expected list of int"),
    ("extends-cycle", ["config", "show", "--profile", "{tmp}/a.yaml"], {"a.yaml": "extends: {tmp}/b.yaml\n", "b.yaml": "extends: {tmp}/a.yaml\n"}, {}, "cycle"),
    ("bad-canonical-md5", ["config", "show", "--profile", "{tmp}/p.yaml"],
     {"p.yaml": "extends: smoke\nmodels:\n  tiny:\n    canonical: [{md5: not-an-md5}]\n"}, {}, "not an md5"),
    ("empty-output-md5", ["config", "show", "--profile", "{tmp}/p.yaml"],
     {"p.yaml": "extends: smoke\nmodels:\n  tiny:\n    canonical: [{md5: d41d8cd98f00b204e9800998ecf8427e}]\n"}, {}, "md5 of empty output"),
    ("bad-expect-md5", ["gate", "--expect", "1234"], {}, {}, "--expect '1234': not "),
    ("bad-cuda-arch", ["config", "show", "--profile", "{tmp}/p.yaml"], {"p.yaml": "extends: smoke\nengines:\n  paged: {cuda_archs: sm_90}\n"}, {}, "not a CUDA architecture list"),
    ("missing-model-file", ["bench", "--model", "real", "--profile", "{tmp}/p.yaml"],
     {"p.yaml": "extends: smoke\nmodels:\n  real: {path: /nonexistent/real.gguf}\n"}, {}, "model real: file not found: /nonexistent/real.gguf"),
    ("model-neither-name-nor-file", ["bench", "--model", "{tmp}/none.gguf"], {}, {}, "neither a model of profile smoke"),
    ("forbidden-env-inherited", ["bench"], {}, {"LLAMA_MAX_BATCH_TOKENS": "4096"}, "LLAMA_MAX_BATCH_TOKENS is not allowed in benchmark"),
    ("forbidden-env-in-profile", ["snapshot", "--dry-run", "--engines", "stock", "--profile", "{tmp}/p.yaml"],
     {"p.yaml": "extends: smoke\nengines:\n  stock: {env: {GDN_CHUNK_MIN: '32'}}\n"}, {}, "GDN_CHUNK_MIN is not allowed in benchmark"),
    ("allow-env-typo", ["snapshot", "--dry-run", "--allow-env", "GDN_TCC"], {}, {}, "--allow-env GDN_TCC: not a forbidden bench knob"),
    ("bad-npl-list", ["snapshot", "--dry-run", "--npl", "1,x"], {}, {}, "--npl: expected comma-separated integers"),
    ("zero-in-npl", ["snapshot", "--dry-run", "--npl", "0,4"], {}, {}, "--npl: expected positive integers"),
    ("unknown-engine", ["snapshot", "--dry-run", "--engines", "nope"], {}, {}, "engines.nope: no such engine"),
    ("until-ci-zero", ["snapshot", "--dry-run", "--until-ci", "0"], {}, {}, "--until-ci must be a positive number"),
    ("until-ci-negative", ["snapshot", "--dry-run", "--until-ci", "-1.5"], {}, {}, "--until-ci must be a positive number"),
    ("max-repeats-below-repeat", ["snapshot", "--dry-run", "--until-ci", "2", "--repeat", "5", "--max-repeats", "4"], {}, {}, "--max-repeats 4 is below the minimum of 5 blocks"),
    ("max-repeats-without-until-ci", ["snapshot", "--dry-run", "--max-repeats", "4"], {}, {}, "give --until-ci PCT too"),
    ("bad-until-ci-key", ["config", "show", "--profile", "{tmp}/p.yaml"], {"p.yaml": "extends: smoke\nstats: {until_ci_pct: 0}\n"}, {}, "stats.until_ci_pct: must be a positive percentage"),
    ("unknown-step-kind", ["campaign", "run", "{tmp}/c.yaml"], {"c.yaml": "steps:\n  - {name: x, kind: frobnicate}\n"}, {}, "unknown step kind 'frobnicate'"),
    ("missing-campaign-file", ["campaign", "run", "{tmp}/none.yaml"], {}, {}, "campaign file not found"),
    ("campaign-undefined-var", ["campaign", "run", "{tmp}/c.yaml"], {"c.yaml": "steps:\n  - {kind: synth, with: {models: ['${nope}']}}\n"}, {}, "undefined variable ${nope}"),
    ("campaign-bad-var-flag", ["campaign", "run", "{tmp}/c.yaml", "--var", "novalue"], {"c.yaml": "steps:\n  - {kind: synth}\n"}, {}, "expected NAME=VALUE"),
    ("campaign-only-unknown-step", ["campaign", "run", "{tmp}/c.yaml", "--only", "nope"], {"c.yaml": "steps:\n  - {kind: synth}\n"}, {}, "--only nope: no such step"),
    ("campaign-missing-model", ["campaign", "run", "{tmp}/c.yaml", "--profile", "{tmp}/p.yaml"],
     {"c.yaml": "steps:\n  - {kind: synth, with: {models: [real]}}\n", "p.yaml": "extends: smoke\nmodels:\n  real: {path: /nonexistent/r.gguf}\n"}, {}, "model real: file not found"),
    ("host-refusal", ["--host", "no-such-host-xyz", "doctor"], {}, {}, "--host no-such-host-xyz"),
    ("synth-unknown-arch", ["models", "synth", "--arch", "qwen9", "--out", "{tmp}/m.gguf"], {}, {}, "arch 'qwen9' is not supported"),
    ("synth-bad-dtype", ["models", "synth", "--dtype", "q4", "--out", "{tmp}/m.gguf"], {}, {}, "--dtype 'q4': expected f32 or f16"),
    ("synth-bad-shape", ["models", "synth", "--embd", "66", "--heads", "4", "--out", "{tmp}/m.gguf"], {}, {}, "must be a multiple of --heads"),
    ("synth-unwritable", ["models", "synth", "--out", "/proc/no-such-dir/m.gguf"], {}, {}, "cannot write /proc/no-such-dir/m.gguf"),
    ("unknown-option", ["doctor", "--bogus"], {}, {}, "--bogus"),
    ("unknown-command", ["frobnicate"], {}, {}, "frobnicate"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2(case, tmp_path):
    _, argv, files, env, expected = case
    fill = lambda s: s.replace("{tmp}", str(tmp_path))  # noqa: E731
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(fill(text)))
    r = run_parity("--artifacts", str(tmp_path / "runs"), *[fill(a) for a in argv], env={"PARITY_REGISTRY": str(tmp_path / "registry.yaml"), **env}, timeout=120)
    lines = r.stderr.splitlines()
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("parity: error: "), lines[0]
    assert "Traceback" not in r.stderr + r.stdout
    assert fill(expected) in lines[0], lines[0]


def test_bad_input_cases_cover_the_acceptance_list():
    assert len(CASES) >= 15

