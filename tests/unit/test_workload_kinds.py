"""Workload kinds own their knowledge: no test of a workload kind's name and no table keyed by
one anywhere in parity/ but the WORKLOADS registry (read from the source with ast), every kind
answers every WorkloadKind method, and a fifth kind is one file plus one registry line (a copy
of parity/ with just those two changes runs it: resolved by name and inline, its rows, its
summary and its report section)."""

from __future__ import annotations

import ast
import difflib
import inspect
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from parity.config import load_profile
from parity.workloads import WORKLOADS
from parity.workloads.base import Plot, WorkloadKind
from parity.workloads.spec import WorkloadConfig

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "parity"
REGISTRY = PKG / "workloads" / "__init__.py"
KIND_NAMES = {"shared-prefix", "prefill-under-decode", "open-loop", "multi-turn", "prefill-curve"}


# ------------------------------------------------------------------ the scanner


def _names(node: ast.AST, names=KIND_NAMES) -> list[str]:
    """The kind names a constant, or a tuple / list / set of constants, holds."""
    if isinstance(node, ast.Constant):
        return [node.value] if node.value in names else []
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in names]
    return []


def _registry_literal(tree: ast.AST) -> ast.AST | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "WORKLOADS":
            v = node.value  # WORKLOADS = Registry({...}): the dict literal inside
            return v.args[0] if isinstance(v, ast.Call) and v.args else v
    return None


def kind_tests(source: str) -> list[tuple[int, str]]:
    """(line, code) of every comparison with a kind's name (==, !=, in, not in, is: `kind ==
    "open-loop"`, `x in ("open-loop", ...)`), every dict keyed by one, every subscript or .get()
    by one, every `case "open-loop"`, and every list of two or more kinds (a by-kind table or a
    second registry); the WORKLOADS literal of parity/workloads/__init__.py is the one allowed."""
    tree = ast.parse(source)
    allowed = _registry_literal(tree)
    found = []
    for node in ast.walk(tree):
        if node is allowed:
            continue
        hit = False
        if isinstance(node, ast.Compare):
            hit = any(_names(s) for s in [node.left, *node.comparators])
        elif isinstance(node, ast.Dict):
            hit = any(k is not None and _names(k) for k in node.keys)
        elif isinstance(node, ast.Subscript):
            hit = bool(_names(node.slice))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
            hit = bool(_names(node.args[0]))
        elif isinstance(node, ast.MatchValue):
            hit = bool(_names(node.value))
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            hit = len(_names(node)) >= 2
        if hit:
            found.append((node.lineno, ast.unparse(node)[:120]))
    return sorted(set(found))


def test_no_workload_kind_test_or_by_kind_table_in_parity():
    found = {str(p.relative_to(ROOT)): hits for p in sorted(PKG.rglob("*.py")) if (hits := kind_tests(p.read_text()))}
    assert not found, f"workload-kind tests or by-kind tables outside the kind objects (ask parity.workloads.WORKLOADS[kind] instead): {found}"


PLANTED = '''
def f(wl, kind, row, t):
    if wl.kind == "open-loop": pass
    if "multi-turn" != kind: pass
    if kind in ("shared-prefix", "prefill-under-decode"): pass
    if row.get("kind") not in ["open-loop"]: pass
    knob = {"prefill-under-decode": "decode_gen"}[kind]
    plots = PLOTS["open-loop"]
    w = WINDOWS.get("multi-turn")
    match kind:
        case "shared-prefix": pass
        case _: pass
    KINDS = ("shared-prefix", "prefill-under-decode", "open-loop", "multi-turn")
'''
NOT_KIND_TESTS = '''
WORKLOADS: dict = {"shared-prefix": a.KIND, "open-loop": b.KIND}
def g(args, profile):
    if args.mode == "open": pass                       # another word
    name = "open-loop"                                 # a kind file's own name
    help = "a built-in kind (shared-prefix, open-loop)" # prose
    return WORKLOADS[profile.kind]                     # asking the registry
'''


def test_the_scanner_finds_planted_kind_tests_and_nothing_else():
    assert sorted({line for line, _ in kind_tests(PLANTED)}) == [3, 4, 5, 6, 7, 8, 9, 11, 13], kind_tests(PLANTED)
    assert kind_tests(NOT_KIND_TESTS) == []
    assert _registry_literal(ast.parse(REGISTRY.read_text())) is not None, "the scanner's one exception must still be there"


def test_the_scanner_reads_a_planted_file_under_parity(tmp_path):
    mod = PKG / "serving" / "workload_summary.py"
    planted = mod.read_text() + '\n\nSHOWN = {"shared-prefix": ["ttft_mean_ms"]}\n'
    assert kind_tests(mod.read_text()) == []
    ((_, code),) = kind_tests(planted)
    assert code.startswith("{'shared-prefix'")


# ------------------------------------------------------------------ the registry and the interface


def registry_entries() -> dict[str, str]:
    node = _registry_literal(ast.parse(REGISTRY.read_text()))
    return {k.value: v.value for k, v in zip(node.keys, node.values)}


def test_each_kind_is_its_own_file_registered_by_its_name():
    entries = registry_entries()
    assert list(entries) == list(WORKLOADS)
    for name, kind in WORKLOADS.items():
        module = entries[name].removeprefix("parity.workloads.").removesuffix(":KIND")
        assert entries[name] == f"parity.workloads.{module}:KIND" and (PKG / "workloads" / f"{module}.py").is_file()
        assert kind.name == name and type(kind).__module__ == f"parity.workloads.{module}"


def methods() -> list[str]:
    return sorted(n for n, f in inspect.getmembers(WorkloadKind, inspect.isfunction) if not n.startswith("_"))


def calls(kind: WorkloadKind, smoke) -> dict:
    """Every WorkloadKind method, with arguments a real call passes (the built-in sized for the smoke profile)."""
    s = smoke.serving
    fields = kind.sized(False, 512, 4, s)
    cfg = WorkloadConfig(kind=kind.name, **fields)
    wl = SimpleNamespace(name=kind.name, kind=kind.name, cfg=cfg, gen=cfg.gen or s.gen, ptok=cfg.ptok or s.ptok)
    row = {"why": {}, "sched_delay_p99_ms": 1.0, "achieved_share": 1.0, "served_share": None}
    sample = SimpleNamespace(records=[], decode=[], long=[], slo=None, server=None, prefix_tokens=0)
    return {
        "check": (cfg, "f", "k"),
        "check_positive": (cfg, "f", "k"),
        "sized": (True, 4096, 8, s),
        "points": (wl,),
        "concurrency": (wl,),
        "need": (wl,),
        "run": None,  # needs a running server: tests/integration/test_workloads_real.py
        "judge": (row, sample, cfg),
        "paced": ([], []),
        "cap": (2048, wl),
        "summarize": ([], "b", 2.0, 0.95),
        "stop_widths": ([], "b", 2.0, 0.95),
        "console": ({"rows": []},),
        "tables": ({"rows": []}, str),
    }


def test_every_kind_answers_every_workload_kind_method():
    smoke = load_profile("smoke")
    for kind in WORKLOADS.values():
        args = calls(kind, smoke)
        assert sorted(args) == methods(), "a new WorkloadKind method: say here how a real call passes its arguments"
        for m in methods():
            if args[m] is None:
                assert getattr(type(kind), m) is not getattr(WorkloadKind, m), f"{kind.name} does not implement {m}"
                continue
            try:
                getattr(kind, m)(*args[m])
            except NotImplementedError:
                pytest.fail(f"kind {kind.name}: {m} is not implemented")
        assert kind.what and kind.positive and kind.metrics and kind.headline and kind.windows and kind.shown and kind.params and kind.plots
        assert all(isinstance(p, Plot) and p.reads in ("medians", "rows", "both") for p in kind.plots)
        assert set(kind.params) | {kind.knob} <= {f for f in WorkloadConfig.__dataclass_fields__}, "params and the knob are section keys"


# ------------------------------------------------------------------ a fifth kind: one file + one registry line

FIFTH = '''
"""distinct-prompts: shared-prefix's control: as many requests of the same sizes, all at once,
sharing nothing (what a prefix cache gains is the difference)."""

from __future__ import annotations

import asyncio

from parity.loadgen import client as loadgen
from parity.loadgen.prompts import token_prompts
from parity.workloads.base import Measured, Plot, WorkloadKind
from parity.workloads.shared_prefix import prefix_hits


class DistinctPrompts(WorkloadKind):
    name = "distinct-prompts"
    what = "groups x group_size requests of prefix + suffix tokens sharing nothing, all in flight at once"
    positive = ("groups", "group_size", "prefix_tokens", "suffix_tokens")
    metrics = ("prefix_hit_rate", "prefix_hits_derived", "cached_prompt_tokens", "prompt_tokens_mean")
    headline = ("ttft_mean_ms", "prefill_tps")
    shown = ("ttft_mean_ms", "ttft_p99_ms", "prefill_tps", "prefix_hit_rate", "prompt_tokens_mean")
    params = ("groups", "group_size", "prefix_tokens", "suffix_tokens", "gen")
    plots = (Plot("prefix-cache hit rate per engine", "workload_prefix_hits.png", prefix_hits, "medians"),)

    def sized(self, gpu, slot, par, s):
        return {"groups": 2, "group_size": max(1, min(2, par // 2)), "prefix_tokens": max(16, min(128, slot // 4)), "suffix_tokens": 16, "gen": max(8, min(s.gen, slot // 2))}

    def points(self, wl):
        c = wl.cfg
        return [(c.groups * c.group_size, f"{c.groups * c.group_size} x {c.prefix_tokens + c.suffix_tokens} tokens")]

    def concurrency(self, wl):
        return wl.cfg.groups * wl.cfg.group_size

    def need(self, wl):
        return wl.cfg.prefix_tokens + wl.cfg.suffix_tokens + wl.gen

    def run(self, arm, wl):
        c, t = wl.cfg, arm.target
        ((key, label),) = self.points(wl)
        specs = asyncio.run(token_prompts(t, c.groups * c.group_size, c.prefix_tokens + c.suffix_tokens, wl.gen))
        arm.fits(specs, f"{arm.engine} {wl.name}")
        before, _ = arm.scrape()
        recs = loadgen.drive(t, specs, arm.timeout, arm.show(f"{wl.name} {label}"))
        after, text = arm.scrape()
        yield Measured(key, label, recs, before, after, text)


KIND = DistinctPrompts()
'''

DRIVE = '''
import json, sys
from pathlib import Path
from types import SimpleNamespace

import parity
from parity.config import load_profile, profile_from_dict
from parity.errors import ConfigError
from parity.loadgen.record import RequestRecord
from parity.metrics import validity
from parity.report.render import _env
from parity.report.workload_sections import workload_section
from parity.serving import workload_summary
from parity.engines.bound import bind_all
from parity.serving.workloads import attach, point_row, resolve
from parity.workloads.base import Measured

out = {"parity": parity.__file__}
prof = profile_from_dict({"name": "t", "engines": {"a": {"kind": "llama", "bin_dir": "/x"}, "b": {"kind": "llama", "bin_dir": "/x"}},
                          "serving": {"engines": ["a", "b"], "workloads": {"dp": {"kind": "distinct-prompts", "groups": 2, "group_size": 2, "prefix_tokens": 32, "suffix_tokens": 8}}}})
s = prof.serving
wl = resolve(prof, "dp", s)
byname = resolve(prof, "distinct-prompts", s)
out["declared"] = [wl.points(), wl.concurrency(), wl.need(), wl.gen]
out["builtin"] = [byname.builtin, list(byname.sized), byname.points()]
plan = SimpleNamespace(engines=["a", "b"], bound=bind_all(prof, ["a", "b"]), shape=s, limits={"a": 1024, "b": 1024}, limit_what={}, npl=[1])
attach(plan, wl)
out["npl"] = plan.npl
try:
    profile_from_dict({"name": "t", "serving": {"workloads": {"x": {"kind": "distinct-prompts", "groups": 0}}}})
except ConfigError as e:
    out["check"] = str(e)
recs = [validity.check_request(RequestRecord(**{k: v for k, v in d.items() if k != "valid"})) for d in json.loads(Path(sys.argv[1]).read_text())]
rows = [{"engine": e, "repeat": 0, "workload": "dp", "kind": wl.kind, **point_row(wl.kind, wl.cfg, Measured(4, wl.points()[0][1], recs), None, 0.1, 0.0)} for e in ("a", "b")]
out["row"] = {k: rows[0].get(k) for k in ("n", "point", "valid", "ttft_mean_ms", "prompt_tokens_mean", "prefix_hit_rate")}
written = {}
rd = SimpleNamespace(write_json=lambda n, d: written.__setitem__(n, d), write_text=lambda n, t: written.__setitem__(n, t))
plan = SimpleNamespace(workload=wl, model="m", engines=["a", "b"], reference="b", shape=s, npl=plan.npl, repeat=1, sized=None, order=[(0, "a"), (0, "b")],
                       stats=load_profile("smoke").stats)
doc = workload_summary.write(plan, rd, rows)
out["summary"] = {k: doc[k] for k in ("shown", "headline", "valid")}
sec = workload_section(SimpleNamespace(summary=json.loads(json.dumps(doc))), Path(sys.argv[2]), "assets")
out["report"] = _env().get_template("_workloads.md.j2").render(workload=sec)
print(json.dumps(out))
'''


def test_a_fifth_kind_is_one_file_and_one_registry_line(tmp_path):
    copy = tmp_path / "src" / "parity"
    shutil.copytree(PKG, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "workloads" / "distinct_prompts.py").write_text(FIFTH.lstrip())
    registry = (copy / "workloads" / "__init__.py").read_text()
    line = '    "multi-turn": "parity.workloads.multi_turn:KIND",\n'
    assert registry.count(line) == 1
    registry = registry.replace(line, line + '    "distinct-prompts": "parity.workloads.distinct_prompts:KIND",\n')
    (copy / "workloads" / "__init__.py").write_text(registry)
    lines = [d for d in difflib.unified_diff(REGISTRY.read_text().splitlines(), registry.splitlines(), n=0, lineterm="") if d[:1] in "+-" and d[:3] not in ("+++", "---")]
    assert lines == ['+    "distinct-prompts": "parity.workloads.distinct_prompts:KIND",'], lines  # one line added
    changed = [p.relative_to(copy) for p in copy.rglob("*.py") if not (PKG / p.relative_to(copy)).exists() or (PKG / p.relative_to(copy)).read_bytes() != p.read_bytes()]
    assert sorted(map(str, changed)) == ["workloads/__init__.py", "workloads/distinct_prompts.py"]
    records = ROOT / "tests" / "data" / "workloads" / "smoke-mt-turn2-stock-r0.json"  # real requests of a recorded run
    sent = [d["sent_prompt_tokens"] for d in json.loads(records.read_text())]
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(DRIVE), str(records), str(tmp_path / "assets")], capture_output=True, text=True,
                       cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(copy.parent), "HOME": str(Path.home())}, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert out["parity"] == str(copy / "__init__.py")
    points, width, need, gen = out["declared"]
    assert points == [[4, "4 x 40 tokens"]] and width == 4 and need == 40 + gen
    assert out["builtin"][0] is True and "groups" in out["builtin"][1] and out["npl"] == [4]
    assert out["check"].endswith("serving.workloads.x.groups: must be positive")
    assert out["row"]["n"] == 4 and out["row"]["point"] == "4 x 40 tokens" and out["row"]["ttft_mean_ms"] > 0 and out["row"]["prompt_tokens_mean"] == sum(sent) / len(sent)
    assert out["row"]["prefix_hit_rate"] is None  # no /metrics in this run: a reason, not a number
    assert out["summary"]["shown"] == ["ttft_mean_ms", "ttft_p99_ms", "prefill_tps", "prefix_hit_rate", "prompt_tokens_mean"] and out["summary"]["headline"].startswith("a/b 4 x 40 tokens: ttft_mean_ms 1.0x")
    report = out["report"]
    assert report.startswith("## Workload: dp (distinct-prompts)") and "groups x group_size requests of prefix + suffix tokens sharing nothing" in report
    assert "| prompt_tokens_mean |" in report and "| groups | 2 |" in report
