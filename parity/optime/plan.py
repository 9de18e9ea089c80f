"""The focused op timing as checked before any build, run dir or lock: arms, ops, backend, the
-p filter, order, stop rule and each arm's env (plain values in, an OpsPlan out)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from parity.engines import with_binaries
from parity.engines.bound import bind
from parity.engines.envpolicy import check_bench_env
from parity.errors import UsageError
from parity.gates.test_backend_ops import perf_argv
from parity.options import check as check_options
from parity.stats import adaptive
from parity.stats.budget import StatsDefaults, resolve_budget

ORDERS = ("abba", "abab")  # blocks; aabb has none
AA_SUFFIX = "#2"
HEADLINE = "us_per_run"  # what the stop rule and a lever's verdict read, per case
TOOL = "test-backend-ops"
# ggml_op_desc names (ADD, MUL_MAT, MOE_SWIGLU_DOWN), one whole case string, or (newer builds) a regex
_OP = re.compile(r"^[A-Z]\S*$")


@dataclass
class Arm:
    name: str  # as rows and logs name it (stock, stock#2)
    engine: str  # the profile's engine: its build and env


def arms_for(engines: list[str], aa: bool = False) -> list[Arm]:
    """The arms in the order given; --aa: one engine as two arms (E, E#2), the noise floor."""
    if aa:
        if len(set(engines)) != 1:
            raise UsageError(
                f"--aa measures one engine as two arms: give one engine (got {', '.join(engines) or 'none'})"
            )
        return [Arm(engines[0], engines[0]), Arm(engines[0] + AA_SUFFIX, engines[0])]
    if len(set(engines)) != len(engines):
        raise UsageError(
            f"--engines: an engine is listed twice ({', '.join(engines)}); for an A/A of one build use --aa"
        )
    return [Arm(e, e) for e in engines]


def reference_arm(arms: list[Arm], reference_engine: str | None, aa: bool) -> str | None:
    """A: serving.reference_engine when an arm, else the last (bench's rule); an A/A's first arm."""
    if len(arms) < 2:
        return None
    names = [a.name for a in arms]
    return names[0] if aa else reference_engine if reference_engine in names else names[-1]


@dataclass
class OpsRequest:
    ops: list[str]
    engines: list[str] = field(default_factory=list)  # the arms' engines in order; [] the profile's llama engines
    reference: str | None = None  # arm A; None: serving.reference_engine when an arm, else the last
    aa: bool = False
    backend: str | None = None  # None: gates.op_backend
    params: str | None = None  # test-backend-ops -p REGEX for every op
    repeat: int | None = None
    until_ci: float | str | None = None
    max_repeats: int | None = None
    budget_s: float | None = None
    order: str | None = None
    allow_env: list[str] = field(default_factory=list)


@dataclass
class OpsPlan:
    arms: list[Arm]
    engines: list[str]
    reference: str | None
    ops: list[str]
    backend: str
    params: str | None
    order: str
    budget: adaptive.Budget
    envs: dict[str, dict]
    timeout_s: float
    threshold_pct: float
    confidence: float


def parse_ops(value) -> list[str]:
    """--ops ADD,MUL_MAT (or a list): the ops, each checked (UsageError names the bad one)."""
    if isinstance(value, str):  # one whole case string holds commas of its own
        ops = [value.strip()] if "(" in value else [x.strip() for x in value.split(",")]
    else:
        ops = [str(x).strip() for x in value or []]
    ops = [x for x in ops if x]
    if not ops:
        raise UsageError("--ops: name at least one op (ADD, MUL_MAT, ... as test-backend-ops -o takes them)")
    for op in ops:
        if not _OP.match(op):
            raise UsageError(
                f"--ops: {op!r} is not an op name (upper case, as ggml_op_desc gives them: ADD, MUL_MAT, ...)"
            )
    if len(set(ops)) != len(ops):
        raise UsageError(f"--ops: an op is listed twice ({', '.join(ops)})")
    return ops


def budget(repeat, until_ci, max_repeats, budget_s, stats_cfg, n_arms: int) -> adaptive.Budget:
    """--repeat N blocks (with --until-ci the minimum); --until-ci watches every case's time per run
    (us_per_run=PCT or PCT); the profile's stats.until_ci_pct / max_repeats / budget_s fill in."""
    check_options(repeat=repeat)
    return resolve_budget(
        until_ci, max_repeats, budget_s, repeat or adaptive.Budget.min_blocks, StatsDefaults.of(stats_cfg),
        watched=(HEADLINE,), one=True, use_defaults=repeat is None and n_arms >= 2,
        unwatched=f"--until-ci: {{metric}} is not what the op timing's stop rule watches ({HEADLINE} of every case)",
        too_few="--repeat {lo} (the minimum with --until-ci) exceeds --max-repeats {hi}",
        refusals=["--until-ci needs two arms: one engine has no paired interval; use --repeat N for its CV"]
        if n_arms < 2 else [],
    )


def plan(profile, req: OpsRequest) -> OpsPlan:
    """Every check of the request, touching nothing (the dry run and the real run both start here)."""
    ops = parse_ops(req.ops)
    names = list(req.engines) or with_binaries(profile)
    for e in names:
        profile.engine(e)
        if e not in with_binaries(profile, [e]):
            raise UsageError(f"engine {e} is {profile.engine(e).kind}: {TOOL} needs an engine with llama.cpp binaries")
    if not names:
        raise UsageError(f"profile {profile.name} has no engine with llama.cpp binaries to time ops on")
    arms = arms_for(names, req.aa)
    check_options(order=req.order)
    order = req.order or "abba"
    if order not in ORDERS:
        raise UsageError(f"--order {order}: op timing runs blocks, {' or '.join(ORDERS)} (aabb has no blocks)")
    backend = (req.backend or profile.gates.op_backend or "").strip()
    if not backend or any(c.isspace() for c in backend):
        raise UsageError(f"--ops-backend {req.backend!r}: a backend name as test-backend-ops -b takes it (CPU, CUDA0)")
    if req.params is not None and not req.params.strip():
        raise UsageError("--ops-params: an empty regex matches every case; leave it out instead")
    if req.reference is not None and req.reference not in [a.name for a in arms]:
        raise UsageError(f"reference {req.reference!r} is not an arm ({', '.join(a.name for a in arms)})")
    engines = list(dict.fromkeys(a.engine for a in arms))
    envs = {e: bind(profile, e).env() for e in engines}
    for e in engines:
        check_bench_env(envs[e], profile.policy, req.allow_env)
    st = profile.stats
    b = budget(req.repeat, req.until_ci, req.max_repeats, req.budget_s, st, len(arms))
    ref = req.reference or reference_arm(arms, profile.serving.reference_engine, req.aa)
    return OpsPlan(
        arms,
        engines,
        ref,
        ops,
        backend,
        req.params,
        order,
        b,
        envs,
        profile.gates.op_timeout_s,
        st.min_delta_pct,
        st.confidence,
    )


def commands(p: OpsPlan, binaries: dict[str, str], output: str) -> dict[str, list[list[str]]]:
    """{engine: one argv per op} as the blocks run them."""
    return {e: [perf_argv(binaries[e], op, p.backend, p.params, output) for op in p.ops] for e in p.engines}


def describe(p: OpsPlan, binaries: dict[str, str], output: str | None) -> dict:
    """The plan as the dry run prints it and the run records it (output None: not known until built)."""
    fmt = output or "console"
    return {
        "kind": "ops",
        "ops": p.ops,
        "backend": p.backend,
        "params": p.params,
        "arms": [a.name for a in p.arms],
        "reference": p.reference,
        "order": p.order,
        "blocks": p.budget.describe(),
        "output": output or "sql where the built tool's usage offers --output sql, else the console lines",
        "commands": commands(p, binaries, fmt),
        "env": p.envs,
        "timeout_s": p.timeout_s,
    }
