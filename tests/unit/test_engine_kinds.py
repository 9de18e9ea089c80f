"""Engine kinds own their knowledge: no test of an engine kind outside parity/engines/ (read
from the source with ast), the endpoint kind is one file plus one registry line, every kind
answers every EngineKind method, and the endpoint section's bad values are one-line
ConfigErrors naming the key."""

from __future__ import annotations

import ast
import inspect
import subprocess
from pathlib import Path

import pytest

from parity.config import expand_path, load_profile
from parity.engines import ENGINES, endpoint
from parity.engines.base import EngineKind, NotApplicable
from parity.engines.bound import Engine, bind
from parity.errors import ConfigError
from parity.runners.local import LocalRunner
from parity.ui import Output
from ports import free_port

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "parity"
ENGINES_DIR = PKG / "engines"
KIND_NAMES = {"llama", "vllm", "endpoint"}
KIND_FIELDS = {"kind", "tokenize", "dialect"}  # a field that says which kind (or which kind's wire format)


# ------------------------------------------------------------------ the scanners


def _names_a_kind(node: ast.AST) -> bool:
    """`kind`, `x.kind`, `x["kind"]`, `x.get("kind")` (and the tokenize / dialect fields)."""
    if isinstance(node, ast.Name):
        return node.id in KIND_FIELDS or node.id.endswith("_kind")
    if isinstance(node, ast.Attribute):
        return node.attr in KIND_FIELDS or node.attr.endswith("_kind")
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value in KIND_FIELDS
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
        return isinstance(node.args[0], ast.Constant) and node.args[0].value in KIND_FIELDS
    return False


def _kind_constant(node: ast.AST, names=KIND_NAMES) -> bool:
    """"vllm", or a tuple / list / set holding one (`kind in ("llama", "vllm")`)."""
    if isinstance(node, ast.Constant):
        return node.value in names
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(isinstance(e, ast.Constant) and e.value in names for e in node.elts)
    return False


def kind_tests(source: str) -> list[tuple[int, str]]:
    """(line, code) of every comparison (==, !=, in, not in, is) of a kind field with a kind's
    name, and every `match` on a kind field with a case naming one."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            for a, b in zip(sides, sides[1:]):
                if (_kind_constant(a) and _names_a_kind(b)) or (_kind_constant(b) and _names_a_kind(a)):
                    found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Match) and _names_a_kind(node.subject):
            for case in node.cases:
                if any(isinstance(p, ast.MatchValue) and _kind_constant(p.value) for p in ast.walk(case.pattern)):
                    found.append((case.pattern.lineno, f"match {ast.unparse(node.subject)}: case {ast.unparse(case.pattern)}"))
    return sorted(found)


ENDPOINT_NAMES = {"Endpoint", "EndpointSection", "endpoint"}


def endpoint_special_cases(source: str) -> list[tuple[int, str]]:
    """Code that singles the endpoint kind out: an import of parity.engines.endpoint or its names,
    `engines.endpoint`, `X["endpoint"]`, a comparison with "endpoint" (whatever the other side),
    a dict keyed by it, a `case "endpoint"`, `isinstance(x, Endpoint...)`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        hit = False
        if isinstance(node, ast.ImportFrom):
            hit = (node.module or "").startswith("parity.engines.endpoint") or (node.module == "parity.engines" and any(a.name in ENDPOINT_NAMES for a in node.names))
        elif isinstance(node, ast.Import):
            hit = any(a.name.startswith("parity.engines.endpoint") for a in node.names)
        elif isinstance(node, ast.Attribute):
            hit = node.attr in ENDPOINT_NAMES
        elif isinstance(node, ast.Name):
            hit = node.id in {"Endpoint", "EndpointSection"}
        elif isinstance(node, ast.Subscript):
            hit = isinstance(node.slice, ast.Constant) and node.slice.value == "endpoint"
        elif isinstance(node, ast.Compare):
            hit = any(_kind_constant(s, {"endpoint"}) for s in [node.left, *node.comparators])
        elif isinstance(node, ast.Dict):
            hit = any(isinstance(k, ast.Constant) and k.value == "endpoint" for k in node.keys)
        elif isinstance(node, ast.MatchValue):
            hit = _kind_constant(node.value, {"endpoint"})
        if hit:
            found.append((node.lineno, ast.unparse(node)[:120]))
    return sorted(set(found))


def outside_engines() -> list[Path]:
    return sorted(p for p in PKG.rglob("*.py") if ENGINES_DIR not in p.parents)


# ------------------------------------------------------------------ (a) no kind test outside engines/


def test_no_engine_kind_test_outside_the_engines_package():
    found = {str(p.relative_to(ROOT)): hits for p in outside_engines() if (hits := kind_tests(p.read_text()))}
    assert not found, f"engine-kind tests outside parity/engines/ (ask the kind instead): {found}"


PLANTED_KIND_TESTS = '''
def f(e, launch, spec, profile, t, row, engine_kind):
    if e.kind == "vllm": pass
    if "llama" != profile.engine("x").kind: pass
    if kind in ("llama", "vllm"): pass
    if launch.tokenize not in ["endpoint"]: pass
    if t.dialect == "vllm": pass
    if row["kind"] == "endpoint": pass
    if row.get("kind") == "llama": pass
    if engine_kind == "vllm": pass
    match e.kind:
        case "vllm": pass
        case _: pass
'''
NOT_KIND_TESTS = '''
def g(spec, name, role, h):
    if spec.arch == "llama": pass       # a model architecture, not an engine kind
    if name == "vllm": pass             # an engine's name in the users' own layout
    if role == "endpoint": pass         # a bisection probe's role
    if h.kind == "slurm": pass          # a host kind
'''


def test_the_kind_scanner_finds_planted_kind_tests_and_nothing_else():
    hits = kind_tests(PLANTED_KIND_TESTS)
    assert [line for line, _ in hits] == [3, 4, 5, 6, 7, 8, 9, 10, 12], hits
    assert kind_tests(NOT_KIND_TESTS) == []


def test_the_kind_scanner_reads_a_planted_file_under_parity(tmp_path):
    """The same walk the real test does, over a copy of a module with one kind test planted in it."""
    mod = PKG / "serving" / "sweep.py"
    planted = tmp_path / "sweep.py"
    planted.write_text(mod.read_text() + '\n\ndef planted(e):\n    return e.kind == "endpoint"\n')
    assert kind_tests(mod.read_text()) == []
    (hit,) = kind_tests(planted.read_text())
    assert hit[1] == "e.kind == 'endpoint'"


# ------------------------------------------------------------------ (b) endpoint: one file + one registry line


def registry_entries() -> dict[str, str]:
    """ENGINES' literal in parity/engines/__init__.py (ENGINES = Registry({...})): {key: its "module:NAME"}."""
    tree = ast.parse((ENGINES_DIR / "__init__.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "ENGINES":
            (literal,) = node.value.args
            return {k.value: v.value for k, v in zip(literal.keys, literal.values)}
    raise AssertionError("no ENGINES = Registry({...}) literal in parity/engines/__init__.py")


def test_the_endpoint_kind_is_one_file_and_one_registry_line():
    assert (ENGINES_DIR / "endpoint.py").is_file()
    assert registry_entries()["endpoint"] == "parity.engines.endpoint:KIND" and ENGINES["endpoint"] is endpoint.KIND
    lines = [ln for ln in (ENGINES_DIR / "__init__.py").read_text().splitlines() if "endpoint" in ln and not ln.lstrip().startswith("#")]
    assert len(lines) == 1, lines  # the registry line (imported on first use: no import line)
    # every module outside engines/ that mentions "endpoint" (git grep, else every module): none singles the kind out
    try:
        listed = subprocess.run(["git", "grep", "-l", "endpoint", "--", "parity/"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
        files = [ROOT / f for f in listed if f.endswith(".py")]
    except (OSError, subprocess.CalledProcessError):
        files = outside_engines()
    files = [p for p in files if ENGINES_DIR not in p.parents]
    found = {str(p.relative_to(ROOT)): hits for p in files if (hits := endpoint_special_cases(p.read_text()))}
    assert not found, f"modules outside parity/engines/ that special-case the endpoint kind: {found}"


def test_the_endpoint_scanner_finds_planted_special_cases():
    planted = '''
from parity.engines.endpoint import EndpointSection
from parity.engines import endpoint
import parity.engines.endpoint
def f(ctx, e, row):
    a = ENGINES["endpoint"]
    b = parity.engines.endpoint.KIND
    if isinstance(e, EndpointSection): pass
    if row.get("role") == "endpoint": pass
    c = {"endpoint": 1}
'''
    assert sorted({line for line, _ in endpoint_special_cases(planted)}) == [2, 3, 4, 6, 7, 8, 9, 10], endpoint_special_cases(planted)
    assert endpoint_special_cases('msg = "the bad endpoint p10 is not bad"\nrun(n, role)\n') == []


# ------------------------------------------------------------------ (c) every kind answers every method


@pytest.fixture
def every_kind(tmp_path):
    """A profile with one engine of each registered kind, none of which builds or installs anything."""
    (tmp_path / "bin").mkdir()
    for tool in ("llama-server", "llama-completion", "vllm", "start-it"):
        (tmp_path / "bin" / tool).write_text("")
    prof = tmp_path / "kinds.yaml"
    port = free_port()
    prof.write_text(f"""extends: smoke
engines:
  pre: {{kind: llama, bin_dir: {tmp_path}/bin}}
  vl: {{kind: vllm, vllm_bin: {tmp_path}/bin/vllm, max_model_len: 1024}}
  ep: {{kind: endpoint, base_url: "http://127.0.0.1:{port}", start: "{tmp_path}/bin/start-it --port {port}", stop: "true", max_model_len: 2048, ready_probe_timeout_s: 1}}
""")
    p = load_profile(str(prof))
    names = {p.engines[n].kind: n for n in ("pre", "vl", "ep")}
    assert set(names) == set(ENGINES), "add an engine of the new kind to this fixture"
    return p, names


def calls(p, name: str):
    """Every EngineKind method, with arguments a real call would pass (the engine bound once)."""
    eng, s, runner, out = bind(p, name), p.serving, LocalRunner(), Output(json_mode=True)
    e, k = eng.section, eng.kind
    row = k.provenance(eng, runner, out)
    return {
        "validate": (eng, "kinds.yaml"),
        "expand_paths": (e, expand_path),
        "provision": (eng, runner, out),
        "provenance": (eng, runner, out),
        "provenance_cells": (row,),
        "provenance_identity": (row,),
        "dry_paths": (eng, runner),
        "tool_path": (eng, "llama-completion", runner, out, True),
        "binary_gates_note": (),
        "env": (eng,),
        "model_file": (eng, "tiny"),
        "local_model_file": (eng, "tiny"),
        "launch": (eng, "/models/tiny.gguf", 18999, s, None, True, "tiny", out),
        "context_need": (eng, s),
        "queue_limit": (e, s),
        "load_caveats": (eng, s),
        "on_gpu": (e,),
        "doctor": (eng, runner),
        "kernel_path": ("Using 'MARLIN' NvFp4 MoE backend out of potential backends: ['MARLIN'].",),
    }


def methods() -> list[str]:
    return sorted(n for n, f in inspect.getmembers(EngineKind, inspect.isfunction) if not n.startswith("_"))


def test_every_kind_answers_every_engine_kind_method(every_kind):
    p, names = every_kind
    for kind, name in names.items():
        args = calls(p, name)
        assert sorted(args) == methods(), "a new EngineKind method: say here how a real call passes its arguments"
        for m in methods():
            try:
                getattr(ENGINES[kind], m)(*args[m])
            except NotApplicable:  # what a kind does not have, said as such (a llama.cpp tool of a non-llama engine)
                assert m == "tool_path" and not ENGINES[kind].binary_gates, (kind, m)
            except NotImplementedError:
                pytest.fail(f"kind {kind}: {m} is not implemented")


def params(f) -> list[str]:
    return list(inspect.signature(f).parameters)[1:]  # less self


def test_a_kind_method_about_one_engine_takes_it_bound_and_the_engine_value_answers_it():
    """#55: no kind method takes (profile, name) to look the engine up again; one about an engine
    takes it bound (eng), every kind keeps the base's parameters, and Engine answers it with the
    same parameters less eng (bound.py hands the kind itself)."""
    about_one = [m for m in methods() if params(getattr(EngineKind, m))[:1] == ["eng"]]
    assert {"launch", "provision", "provenance", "tool_path", "validate"} <= set(about_one)
    for m in methods():
        base = params(getattr(EngineKind, m))
        assert "profile" not in base and "name" not in base, (m, base)
        for kind, k in ENGINES.items():
            assert params(getattr(type(k), m)) == base, (kind, m)
    for m in about_one:
        assert params(getattr(Engine, m)) == params(getattr(EngineKind, m))[1:], m


def test_only_launch_is_left_to_every_kind_and_the_base_says_so(every_kind):
    """The base class raises NotImplementedError in launch alone (documented there): how a server
    is reached has no default.  Every registered kind overrides it."""
    abstract = [m for m in methods() if "raise NotImplementedError" in inspect.getsource(getattr(EngineKind, m))]
    assert abstract == ["launch"]
    assert "every kind" in (EngineKind.launch.__doc__ or "")
    assert all(type(k).launch is not EngineKind.launch for k in ENGINES.values())


def test_what_does_not_apply_to_an_endpoint_says_not_applicable(every_kind):
    p, names = every_kind
    k, eng, runner, out = ENGINES["endpoint"], bind(p, names["endpoint"]), LocalRunner(), Output(json_mode=True)
    assert eng.kind is k and k.binary_gates_note() == "not applicable: parity runs no binary of an endpoint"
    row = k.provenance(eng, runner, out)
    cells = k.provenance_cells(row)
    assert row["build"].startswith("not applicable") and cells["source"].startswith("endpoint http://127.0.0.1:")
    assert {v for c, v in cells.items() if c != "source"} == {"not applicable"}
    with pytest.raises(NotApplicable, match="has no llama-completion"):
        k.tool_path(eng, "llama-completion", runner, out)
    la = k.launch(eng, "tiny", 0, p.serving, model="tiny")
    assert la.argv == [] and not la.spawned and la.start[1:] == ["--port", str(la.port)] and la.stop == ["true"]
    # what its stream count and its metrics dialect need of a request, unless the profile says otherwise
    assert la.request_extra == {"stream_options": {"include_usage": True, "continuous_usage_stats": True}} and la.probe_extra == {"return_tokens_as_token_ids": True}
    assert list(k.dry_paths(eng, runner)) == ["start command of ep", "stop command of ep"]
    (row,) = k.doctor(eng, runner)  # nothing listens on its port: its start command would start it
    assert row.status == "degraded" and "does not answer" in row.found and "engines.ep.start" in row.consequence
    assert all(ENGINES[x].binary_gates_note() is None for x in ENGINES if ENGINES[x].binary_gates)


# ------------------------------------------------------------------ the endpoint section's bad values


def endpoint_profile(tmp_path, **fields) -> str:
    import json

    prof = tmp_path / "ep.yaml"
    prof.write_text(json.dumps({"extends": "smoke", "engines": {"ep": {"kind": "endpoint", **fields}}}))
    return str(prof)


@pytest.mark.parametrize(
    "fields, key, message",
    [
        ({}, "engines.ep.base_url", "required: the http://HOST:PORT of the running server"),
        ({"base_url": "https://gpu-box:8000"}, "engines.ep.base_url", "https is not supported: parity's client speaks plain HTTP"),
        ({"base_url": "http://gpu-box:8000/v1"}, "engines.ep.base_url", "give the server's root, http://HOST:PORT: parity adds /v1/completions"),
        ({"base_url": "gpu-box:8000"}, "engines.ep.base_url", "must be http://HOST:PORT (plain HTTP, a port 1..65535), got 'gpu-box:8000'"),
        ({"base_url": "http://gpu-box"}, "engines.ep.base_url", "must be http://HOST:PORT"),
        ({"base_url": "http://gpu-box:70000"}, "engines.ep.base_url", "a port 1..65535"),
        ({"base_url": "http://h:8000", "start": "vllm serve 'unclosed"}, "engines.ep.start", "not a command line (No closing quotation)"),
        ({"base_url": "http://h:8000", "stop": "   "}, "engines.ep.stop", "not a command line (it is empty)"),
        ({"base_url": "http://h:8000", "ready_path": "health"}, "engines.ep.ready_path", "must be a path starting with /"),
        ({"base_url": "http://h:8000", "max_model_len": 0}, "engines.ep.max_model_len", "must be a positive number of tokens"),
        ({"base_url": "http://h:8000", "metrics": "sglang"}, "engines.ep.metrics", ""),
        ({"base_url": "http://h:8000", "tokenize": "text"}, "engines.ep.tokenize", ""),
    ],
)
def test_a_bad_endpoint_section_is_a_one_line_config_error_naming_the_key(tmp_path, fields, key, message):
    with pytest.raises(ConfigError) as exc:
        load_profile(endpoint_profile(tmp_path, **fields))
    assert exc.value.key == key and message in exc.value.problem
    assert "\n" not in str(exc.value) and f": {key}: " in str(exc.value)


def test_a_gate_on_an_endpoint_is_refused_when_the_profile_loads(tmp_path):
    prof = tmp_path / "g.yaml"
    prof.write_text('{"extends": "smoke", "engines": {"ep": {"kind": "endpoint", "base_url": "http://h:8000"}}, "gates": {"engine": "ep"}}')
    with pytest.raises(ConfigError, match="gates.engine: engine ep: the gates run an engine's own binaries, not applicable: parity runs no binary of an endpoint"):
        load_profile(str(prof))


def test_the_cli_says_a_bad_base_url_in_one_line_with_exit_2(tmp_path):
    from tests.conftest import run_parity

    r = run_parity("snapshot", "-p", endpoint_profile(tmp_path, base_url="https://gpu-box:8000"), "--dry-run", timeout=120)
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("parity: error: ") and "engines.ep.base_url: https is not supported" in line


def test_memory_per_process_is_not_applicable_to_a_server_parity_did_not_start():
    """Tracked for real: this test's own process stands for a started server, an External (no pid)
    for an endpoint.  The endpoint says not applicable and leaves the other engine on its process
    tree (before, one engine without a process moved every engine to the device-total delta)."""
    import os

    from parity.efficiency import memory
    from parity.engines.server import External
    from parity.gpu.memory import used_mib

    class Started:
        pid = os.getpid()

    arms = []
    for rep in (0, 1):
        for engine, proc in (("paged", Started()), ("ep", External())):
            before, source = used_mib()
            t = memory.start(before, source, proc)
            t.sample("N=2")
            arms.append({"engine": engine, "repeat": rep, "memory": t.result()})
    doc = memory.summary(arms, "paged")
    assert doc["basis"] == "process tree" and doc["engines"]["paged"]["peak_mib"] > 0 and "VmRSS" in doc["engines"]["paged"]["source"]
    assert doc["engines"]["ep"] == {"peak_mib": None, "steady_mib": None, "before_mib": arms[1]["memory"]["before"], "arms": 2, "source": memory.NOT_A_PROCESS, "not_applicable": True}
    assert doc["ratios"] == [{"engine": "ep", "reference": "paged", "peak": None, "steady": None, "why": "not applicable: ep is not a process parity started"}]
    assert memory.summary([a for a in arms if a["engine"] == "ep"], "paged")["basis"] == "not applicable"


@pytest.mark.parametrize("args, parallel, caveat", [
    ([], 64, True), (["-kvu"], 64, False), (["--kv-unified"], 8, False), (["-kvu", "-no-kvu"], 8, True), ([], 1, False),
    (["-no-kvu", "-kvu"], 8, False),  # the last one wins, as in llama.cpp's parser
])
def test_llama_server_with_a_kv_stream_per_slot_is_named_as_a_load_caveat(every_kind, args, parallel, caveat):
    """llama.cpp splits a step per run of neighbouring slots when each has its own KV stream (the default
    with --parallel): capacity's plan names it, -kvu removes it, one slot has nothing to split."""
    from msgspec.structs import replace

    p, names = every_kind
    eng = bind(p, names["llama"])
    shape = replace(p.serving, parallel=parallel, server_args=[*p.serving.server_args, *args])
    got = eng.load_caveats(shape)
    assert bool(got) is caveat and all(f"--parallel {parallel} without -kvu" in c for c in got)


@pytest.mark.parametrize("args, tokens, says", [
    ([], 1024, "-c 32768 / --parallel 32"), (["-kvu"], 32768, "one KV buffer every slot shares (-kvu)"),
    (["-kvu", "-no-kvu"], 1024, "-c 32768 / --parallel 32"),
])
def test_a_llama_server_request_may_fill_the_shared_kv_buffer(every_kind, args, tokens, says):
    """With -kvu llama.cpp gives a sequence the whole context (n_ctx_seq = n_ctx), else -c / --parallel:
    the H200 plan's 2048-token generations were refused at 1024 on -kvu servers."""
    from msgspec.structs import replace

    p, names = every_kind
    eng = bind(p, names["llama"])
    need = eng.context_need(replace(p.serving, ctx=32768, parallel=32, server_args=[*p.serving.server_args, *args]))
    assert need.tokens == tokens and says in need.what


def test_the_snapshot_dry_run_prints_a_servers_load_caveat(parity_cli, tmp_path):
    r = parity_cli("--artifacts", str(tmp_path / "runs"), "snapshot", "-p", "smoke", "--dry-run", timeout=300)
    said = r.stdout + r.stderr
    notes = [x for x in said.splitlines() if x.startswith("#   note: a KV stream per slot (--parallel 4 without -kvu)")]
    assert len(notes) == 2, said[-3000:]  # smoke's stock and paged llama-servers


@pytest.mark.parametrize("engine, says", [
    ("paged_kvu", "a paged llama-server crashed (SIGSEGV)"),  # docs/evidence/device-h200x2-1130/
    ("paged", "a KV stream per slot (--parallel 16 without -kvu)"),  # the users' kv_unified:false
    ("stock", None),  # -kvu on the stock build: no caveat
])  # fmt: skip
def test_the_paged_kv_with_one_kv_buffer_is_a_caveat_in_the_plan(engine, says):
    from msgspec.structs import replace

    p = load_profile(str(Path(__file__).resolve().parents[2] / "campaigns/profiles/h200-kvu.yaml"))
    caveats = bind(p, engine).load_caveats(replace(p.serving, parallel=16))
    assert (caveats == []) if says is None else (len(caveats) == 1 and says in caveats[0]), caveats
