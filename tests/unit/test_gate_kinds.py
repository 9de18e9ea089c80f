"""The gate registry: every kind declares what it reads and how it expands, the gate set, its
engines, models and options come from the kinds, the lever A/B's verdict and output parity's
are read through them, and a new gate is one kind added to GATES."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from parity.artifacts import RunDir
from parity.config import load_profile
from parity.context import Context
from parity.errors import ConfigError
from parity.gates import kinds, summary
from parity.gates.base import BOOL, LIST, READS, STR, GateKind, Target, gate_inputs
from parity.gates.checks import ERROR, FAIL, PASS, Check
from parity.gates.kinds import GATES, gate_set, red_in_summary
from parity.gates.prepost import GateSpec, binary_gates, gate_engines, gate_models, run_gate_set, spec_from_options
from parity.levers import gates as lever_gates
from parity.runners.local import LocalRunner
from parity.ui import Output

FIELDS = {"engine": "engines", "model": "models", "path": "paths", "op": "ops"}  # a Target field -> what it reads


def ctx_for(tmp_path: Path | None = None) -> Context:
    ctx = Context(load_profile("smoke"), LocalRunner(), Output(json_mode=True), (tmp_path or Path("/nonexistent")) / "runs")
    if tmp_path is not None:
        ctx.run = RunDir.create(tmp_path / "runs", "gate-kinds", argv=["pytest"], config=None, kind="test")
    return ctx


def plan(ctx, spec) -> list[tuple[str, Target]]:
    engine = spec.engine or ctx.profile.gates.engine
    inputs = gate_inputs(ctx.profile)
    return [(k.name, t) for k in gate_set() if k.wanted(spec) for t in k.expand(inputs, spec, engine)]


def test_every_kind_declares_itself():
    assert list(GATES) == ["md5", "op", "kl", "output_parity", "banner"]
    spec_fields = {f.name for f in dataclasses.fields(GateSpec)}
    for name, k in GATES.items():
        assert isinstance(k, GateKind) and k.name == name and k.what and k.reads and set(k.reads) <= set(READS), name
        assert set(k.options) <= spec_fields and set(k.options.values()) <= {LIST, STR, BOOL}, name
        assert set(k.arms.values()) <= {"gate", "evidence"} and set(k.arms) <= {"BE", "KL"}, name
        if k.in_gate_set:  # asked for by one of its own options
            assert k.switch in k.options, name
        else:
            assert k.switch is None and not k.wanted(GateSpec(models=["x"], ops=["y"], kl=True)), name
    # every lever gate kind is gated by some kind
    assert all(any(r == "gate" for _, _, r in kinds.for_arms(lever)) for lever in ("BE", "KL"))


def test_the_smoke_gate_set_expands_as_the_hand_loop_did():
    ctx = ctx_for()
    spec = GateSpec.from_profile(ctx.profile)  # models [tiny], paths [paged], ops RMS_NORM SOFT_MAX, no kl
    assert (spec.models, spec.paths, spec.ops, spec.kl, spec.engine) == (["tiny"], ["paged"], ["RMS_NORM", "SOFT_MAX"], False, "paged")
    assert plan(ctx, spec) == [("md5", Target("paged", "tiny", "paged")), ("op", Target("paged", op="RMS_NORM")), ("op", Target("paged", op="SOFT_MAX"))]
    spec.kl, spec.paths = True, ["all"]
    assert [(n, t.path) for n, t in plan(ctx, spec) if n != "op"] == [("md5", "paged"), ("md5", "nonpaged"), ("kl", "paged"), ("kl", "nonpaged")]
    # md5 on several builds: stock has no paged path, so it runs the requested paths it has, else its default
    many = GateSpec(models=["tiny"], paths=["paged", "nonpaged"], engines=["paged", "stock"], engine="paged")
    assert [t for _, t in plan(ctx, many)] == [Target("paged", "tiny", "paged"), Target("paged", "tiny", "nonpaged"), Target("stock", "tiny", "nonpaged")]
    assert [t for _, t in plan(ctx, GateSpec(models=["tiny"], paths=["paged"], engines=["stock"], engine="paged"))] == [Target("stock", "tiny", "nonpaged")]


def test_a_check_sets_only_what_its_kind_reads():
    ctx = ctx_for()
    spec = GateSpec(models=["tiny", "tiny-noisy"], paths=["all"], ops=["RMS_NORM"], kl=True, engine="paged", engines=["paged", "stock"])
    seen = {}
    for name, t in plan(ctx, spec):
        seen.setdefault(name, set()).update(FIELDS[f] for f, v in dataclasses.asdict(t).items() if v is not None)
    assert set(seen) == {"md5", "op", "kl"}
    for name, fields in seen.items():
        assert fields <= set(GATES[name].reads), (name, fields)


def test_engines_models_and_binary_gates_come_from_the_kinds():
    ctx = ctx_for()
    inputs, g = gate_inputs(ctx.profile), ctx.profile.gates
    spec = GateSpec.from_profile(ctx.profile)
    assert gate_engines(inputs, spec) == ["paged", "stock"]  # the gated build, the md5 reference build
    assert gate_engines(inputs, GateSpec.from_profile(ctx.profile, expect="0" * 32)) == ["paged"]  # --expect: no reference run
    assert gate_engines(inputs, GateSpec(ops=["RMS_NORM"])) == ["paged"]  # op-oracle only: the gate engine
    assert gate_models(g, spec) == ["tiny"]
    assert gate_models(g, GateSpec.from_profile(ctx.profile, kl=True)) == ["tiny", "tiny-perturbed", "tiny-noisy"]
    ran = binary_gates(inputs, ["paged", "stock", "vllm"], GateSpec.from_profile(ctx.profile, kl=True))
    assert ran["paged"] == {"status": "gated", "why": "pre and post: md5 of tiny; op-oracle RMS_NORM, SOFT_MAX; KL band"}
    assert ran["stock"] == {"status": "gated", "why": "pre and post: the md5 reference"}
    assert ran["vllm"]["status"] == "not applicable"
    assert binary_gates(inputs, ["paged"], None)["paged"]["status"] == "not run"


def test_gate_step_options_are_the_kinds_options():
    phase, over = spec_from_options({"phase": "pre", "models": "tiny, tiny-noisy", "ops": [], "kl": True, "backend": "CPU"})
    assert phase == "pre" and over == {"models": ["tiny", "tiny-noisy"], "ops": [], "kl": True, "backend": "CPU"}
    with pytest.raises(ConfigError, match="unknown gate option.*known: backend, engine, engines, expect, form, kl, kl_sweep, models, ops, paths, phase"):
        spec_from_options({"model": "tiny"})
    for bad, why in (({"kl": "yes"}, "with.kl.*true or false"), ({"ops": 3}, "with.ops.*list of names"), ({"form": ["chat"]}, "with.form.*a string")):
        with pytest.raises(ConfigError, match=why):
            spec_from_options(bad)


def test_nothing_wanted_names_every_kinds_switch(tmp_path):
    ctx = ctx_for(tmp_path)
    with pytest.raises(Exception, match=r"nothing to check \(no models, ops or kl in"):
        run_gate_set(gate_inputs(ctx.profile), ctx.as_run(), GateSpec(engine="paged"), "pre")


class PathEnvGate(GateKind):
    """A gate added the documented way: one kind (here, the test's) plus one line in GATES and its
    option, a GateSpec field.  It checks that each gated path of the gate engine resolves to an env."""

    name = "path_env"
    what = "path env"
    reads = ("paths", "engines")
    switch = "path_env"
    options = {"path_env": BOOL}

    def expand(self, inputs, spec, engine):
        return [Target(engine, path=p) for p in spec.paths]

    def run(self, inputs, run, spec, t, tag):
        try:
            env = inputs.engine(t.engine).path_env(t.path)
        except Exception as e:
            return Check(f"path_env {t.path}", self.name, "an env", "-", ERROR, str(e), path=t.path)
        return Check(f"path_env {t.path}", self.name, "an env", ",".join(sorted(env)) or "(empty)", PASS, path=t.path)


@dataclasses.dataclass
class SpecWithPathEnv(GateSpec):
    path_env: bool = False


def test_a_new_gate_is_one_kind_and_one_line(tmp_path, monkeypatch):
    monkeypatch.setitem(GATES, "path_env", PathEnvGate())
    ctx = ctx_for(tmp_path)
    spec = SpecWithPathEnv(engine="paged", paths=["paged", "sideways"], path_env=True)
    res = run_gate_set(gate_inputs(ctx.profile), ctx.as_run(), spec, "pre")  # the gate set iterates the registry: only the new kind is wanted
    assert [(c["kind"], c["check"], c["status"]) for c in res["checks"]] == [("path_env", "path_env paged", PASS), ("path_env", "path_env sideways", ERROR)]
    assert "LLAMA_KV_PAGED" in res["checks"][0]["got"] and "no path 'sideways'" in res["checks"][1]["detail"]
    assert res["status"] == FAIL  # closed-world, as for every kind
    assert spec_from_options({"path_env": True}) == ("gate", {"path_env": True})  # its option, in a gate step's with:
    rows = summary.rows_from_sets({"pre": res}, ctx.profile.gates.engine, summary.default_paths(ctx.profile.engines))  # the users' layout, by the defaults
    assert [r[:3] for r in rows[:2]] == [["pre", "path_env_model_paged", "ok"], ["pre", "path_env_model_sideways", "missing"]]


def test_users_layout_of_a_kl_check(tmp_path):
    kl = {"check": "kl tiny-perturbed/paged vs tiny", "kind": "kl", "model": "tiny-perturbed", "path": "paged", "expected": "KLD <= 0.1", "got": "KLD 0.2", "status": "fail",
          "detail": "KLD 0.2 > 0.1", "data": {"candidate": {"output": "gates/pre/kl-tiny-perturbed-paged.txt"}}}  # fmt: skip
    prof = load_profile("smoke")
    (row, _) = summary.rows_from_sets({"pre": {"checks": [kl]}}, prof.gates.engine, summary.default_paths(prof.engines), tmp_path)
    assert row == ["pre", "kl_tiny-perturbed_paged", "fail", "KLD 0.2", "KLD <= 0.1", str(tmp_path / "gates/pre/kl-tiny-perturbed-paged.txt")]


def md5_row(phase, status, detail="d", model="tiny", path="paged"):
    return {"phase": phase, "model": model, "path": path, "status": status, "detail": detail, "arms": {}}


def test_lever_verdict_bit_exact():
    phases = [{"md5": [md5_row("pre", "equal"), md5_row("pre", "equal", path="nonpaged")], "kl": None}, {"md5": [md5_row("post", "equal")], "kl": None}]
    assert lever_gates.verdict(phases, False) == {"ok": True, "kind": "BE", "summary": "md5 3/3 equal", "problem": None}
    phases[1]["md5"].append(md5_row("post", "differ", "paged aaa != lever bbb"))
    v = lever_gates.verdict(phases, False)
    assert not v["ok"] and v["summary"] == "md5 3/4 equal" and v["problem"] == "md5 post tiny/paged differ: paged aaa != lever bbb"
    assert not lever_gates.verdict([{"md5": [], "kl": None}], False)["ok"]  # no md5 compared: not green


def test_lever_verdict_lossy():
    kl = {"phase": "pre", "model": "tiny-perturbed", "path": "paged", "status": "pass", "detail": "KLD <= 0.1", "arms": {}}
    phases = [{"md5": [md5_row("pre", "differ")], "kl": kl}]
    assert lever_gates.verdict(phases, True) == {"ok": True, "kind": "KL", "summary": "KL band 1/1 pass; md5 0/1 equal (informative)", "problem": None}
    phases[0]["md5"] = [md5_row("pre", "error", "arm: llama-completion exited 1")]
    v = lever_gates.verdict(phases, True)
    assert not v["ok"] and v["problem"] == "md5 pre tiny/paged: arm: llama-completion exited 1"  # evidence: a failed run, no status word
    phases[0]["kl"] = {**kl, "status": "fail", "detail": "KLD 0.3 > 0.1"}
    assert lever_gates.verdict(phases, True)["problem"] == "KL pre: KLD 0.3 > 0.1"  # the gate's problem comes first
    assert not lever_gates.verdict([{"md5": [], "kl": None}], True)["ok"]  # no KL band measured: not green


def test_lever_models_and_checks_come_from_the_kinds():
    prof = load_profile("smoke")
    assert lever_gates.arm_models(prof, ["tiny"], False) == ["tiny"]
    assert lever_gates.arm_models(prof, ["tiny"], True) == ["tiny", "tiny", "tiny-perturbed"]  # md5 models, KL reference and candidate
    prof.gates.kl.reference = None
    with pytest.raises(Exception, match="no KL reference"):
        lever_gates.check_lossy(prof)


def answers(tokens):
    return [{"prompt": "p", "ids": [1, 2], "tokens": tokens, "top": [{str(t): -0.1} for t in tokens], "text": ""}]


def test_output_parity_is_read_as_a_gate():
    band = load_profile("smoke").serving.output_parity
    kind = GATES["output_parity"]
    same = kind.measure({"a": answers([5, 6, 7]), "b": answers([5, 6, 7])}, "a", band)
    assert red_in_summary({"output_parity": same}) == [] and kind.from_summary({"output_parity": same}).status == PASS
    off = kind.measure({"a": answers([5, 6, 7]), "b": answers([9, 6, 7])}, "a", band)
    (red,) = red_in_summary({"output_parity": off})
    assert red.kind == "output_parity" and red.status == FAIL and red.got == "0/1 pairs in band"
    assert f"{red.check}: {red.detail}" == f"cross-engine output parity: {off['failures'][0]}"  # the line that marks the run invalid
    assert kind.from_summary({"medians": []}) is None and red_in_summary({}) == []  # not measured: no verdict
