"""Typed configuration (msgspec Structs) loaded from YAML, with embedded profiles.

A profile is one YAML file.  `--profile NAME` picks an embedded profile from
parity/defaults/NAME.yaml; `--profile FILE` loads a file, which may say
`extends: NAME` to start from an embedded one (deep merge, lists replaced).
Every problem is a ConfigError naming file, key and problem.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Literal

import msgspec

from parity.errors import ConfigError

from parity.llamacpp.source import SourceConfig, check_source
from parity.gates.canonical import CanonicalMd5, check_canonical
from parity.gates.section import check_gates
from parity.gpu.lock_config import LockConfig, check_lock
from parity.hosts.registry import HOST_SECTIONS
from parity.metrics.registry import headline, unknown
from parity.models.spec import HfModelSpec, HfShape, SynthSpec, check_model  # noqa: F401 (HfShape re-exported)
from parity.profiles.buckets import BucketRule, ProfilingConfig, check_profiling  # noqa: F401 (BucketRule re-exported)
from parity.runners.host_config import HostConfig, SlurmConfig  # noqa: F401 (SlurmConfig re-exported)
from parity.serving.section import check_calibrate, check_serving
from parity.engines.envpolicy import PolicyConfig
from parity.engines import ENGINES
from parity.engines.base import EngineSection
from parity.engines.bound import Engine
from parity.workloads.spec import WorkloadConfig, check_workload  # noqa: F401 (check_workload re-exported)
from parity.decode import SECTIONS, decode_value, from_dict, is_record, read_utf8, read_yaml, record_fields  # noqa: F401 (re-exported)
from parity.options import positive_int, positive_seconds  # noqa: F401 (re-exported)
from parity.paths import DEFAULTS_DIR, PARITY_ROOT, cache_dir, expand_path  # noqa: F401 (re-exported)


# --------------------------------------------------------------------------- sections


class ModelConfig(msgspec.Struct):
    path: str = ""
    arch: str = ""
    description: str = ""
    synth: SynthSpec | None = None  # synthesized at `path` when missing
    hf: HfModelSpec | None = None  # a tiny HF checkpoint at vllm_path, converted to `path`
    vllm_path: str | None = None  # the same model for vLLM (safetensors dir)
    served_name: str | None = None
    canonical: list[CanonicalMd5] = msgspec.field(default_factory=list)


class KLConfig(msgspec.Struct):
    reference: str | None = None  # model name whose logits are the base (e.g. the f16 model)
    baseline: str | None = None  # model/engine whose KLD bounds the candidate
    baseline_path: str | None = None  # path the baseline runs on (seeds: nonpaged); None = the gated path
    candidate: str | None = None
    text: str | None = None  # text file for llama-perplexity; None = parity's generated text (parity/gates/kltext.py)
    text_seed: int = 0  # the generated text's seed
    ctx: int = 128
    chunks: int = 4
    max_kld: float | None = None  # absolute bound when no baseline is measured
    kld_slack: float = 0.0  # candidate may exceed baseline by this much
    min_same_top_p: float | None = 99.5  # % of tokens whose top token is the reference's (users' P1); null: none
    same_top_p_slack: float | None = None  # with a baseline: >= the baseline's same top p less this; null: none
    on_md5_change: list[str] = msgspec.field(default_factory=list)  # paths: a changed md5 of the candidate runs KL
    ppl_band_pct: float = 5.0  # |PPL(candidate)/PPL(baseline) - 1| * 100 bound
    retries: int = 3  # reruns when llama-perplexity exits 0 without its statistics (its logger loses the tail at exit)
    timeout_s: float = 1800.0


class GatesConfig(msgspec.Struct):
    prompt: str = "The capital of France is"
    n_predict: int = 48
    seed: int = 1
    form: Literal["chat", "no-cnv"] = "chat"
    completion_args: list[str] = msgspec.field(default_factory=lambda: ["-ngl", "99", "-fa", "on", "--temp", "0"])
    ctx: int | None = None  # llama-completion -c (the context the canonical md5s were recorded with); None: the tool's default
    timeout_s: float = 600.0
    completion_retries: int = 3  # reruns while llama-completion's stdout is incomplete (its logger loses the tail at exit)
    models: list[str] = msgspec.field(default_factory=list)  # models gated pre/post by default
    engine: str | None = None  # engine whose binaries run the gates
    paths: list[str] = msgspec.field(default_factory=list)  # paths gated by default
    # no canonical md5 for a model: this engine's build, run in the same session, defines it
    reference_engine: str | None = None
    reference_path: str | None = None
    ops: list[str] = msgspec.field(default_factory=list)
    op_backend: str = "CUDA0"
    # test-backend-ops -p REGEX per op: only the cases whose parameters match (a slow CPU can
    # keep the small cases of a suite built for GPU shapes, e.g. {MOE_SWIGLU_DOWN: "type_a=f32"})
    op_params: dict[str, str] = msgspec.field(default_factory=dict)
    op_retries: int = 0  # zero tolerance: a retry only when asked, and a pass on it is "flaky"
    op_timeout_s: float = 1800.0
    kl: KLConfig = msgspec.field(default_factory=KLConfig)
    kl_in_prepost: bool = False


class BenchConfig(msgspec.Struct):
    npp: list[int] = msgspec.field(default_factory=lambda: [512, 2048])
    ntg: list[int] = msgspec.field(default_factory=lambda: [4])
    npl: list[int] = msgspec.field(default_factory=lambda: [32])
    ctx: int = 131072
    batch: int = 2048
    ubatch: int = 512
    extra_args: list[str] = msgspec.field(default_factory=lambda: ["-ngl", "99", "-fa", "on"])
    timeout_s: float = 3600.0
    retries: int = 3  # reruns while rows that fit are missing from stdout (its logger loses the tail at exit)


class WarmupConfig(msgspec.Struct):
    requests: int = 8  # the users' harness: h2h -n 8 --gen 16 with its own nonce, discarded
    gen: int = 16
    # before every point, this many requests one at a time, discarded: the point's first request no
    # longer pays for what the last point or the warmup left in the server (llama-server saves its
    # idle slots to the prompt cache when the next request arrives: at N=1 on an H200 that save took
    # ~100 ms on the first request after the 8-request warmup, ~18 ms on the others)
    point_requests: int = 1


class TelemetryConfig(msgspec.Struct):
    """Around every serving point: GPU (NVML, else nvidia-smi) and host samples (parity/telemetry/)."""

    enabled: bool = True
    interval_s: float = 0.1  # ~10 Hz
    power_interval_s: float = 0.02  # the power lane: NVML's instantaneous power alone, for the energy cross-check
    pin_cpus: bool = True  # keep the load generator off the server's cores (taskset / sched_setaffinity)
    pin_min_cpus: int = 8  # ... only where at least this many cores are usable
    client_cpus: int = 2  # the last cores go to the client, the rest to the server


class OutputParityConfig(msgspec.Struct):
    """Greedy outputs of every serving engine on the same prompts, compared token by token."""

    enabled: bool = False
    prompts: list[str] = msgspec.field(default_factory=lambda: ["The capital of France is", "Once upon a time", "def fibonacci(n):"])
    gen: int = 16
    top_logprobs: int = 5
    min_agreement: float = 1.0  # share of generated tokens that must agree with the reference engine
    max_kl: float = 0.05  # bound on the mean KL divergence of the top-k distributions (nats)


class CalibrateConfig(msgspec.Struct):
    """Before measuring, choose the generated tokens so that every point's windows last
    min_window_s x margin (parity.stats.calibrate): block 0 runs at serving.gen; when a
    point's window falls short, gen is raised (never lowered), block 0 becomes the
    calibration trial and the measured blocks start after it.  Off with an explicit --gen."""

    enabled: bool = True
    margin: float = 1.5  # windows must reach min_window_s x margin (room for a noisier block)
    max_gen: int = 4096  # never raise gen past this (nor past the context an engine gives a request)


class ServingConfig(msgspec.Struct):
    model: str = ""
    engines: list[str] = msgspec.field(default_factory=list)
    reference_engine: str | None = None  # ratios are engine / reference
    npl: list[int] = msgspec.field(default_factory=lambda: [8, 32, 128])
    ptok: int = 128
    gen: int = 64
    parallel: int = 128
    ctx: int = 131072
    batch: int = 2048
    ubatch: int = 512
    repeat: int = 1
    order: Literal["abab", "abba", "aabb"] = "abba"  # engine order across blocks: abba rotates them (stats.blocks.block_order), so a drift of the box cancels
    port: int = 8090  # crossover (gpus): the second engine's server on port + 1
    gpus: list[int] = msgspec.field(default_factory=list)  # [0, 1]: crossover (parity.serving.crossover)
    request_timeout_s: float = 600.0
    min_requests: int = 8  # a point at N runs ceil(min_requests / N) rounds of N concurrent requests back to back (parity.serving.rounds)
    server_log_trace: bool = True  # llama-server logs its clock at trace level: the TTFT anatomy reads each task's host work there (parity.ttft)
    server_args: list[str] = msgspec.field(default_factory=lambda: ["-ngl", "99", "-fa", "on"])
    bench: BenchConfig = msgspec.field(default_factory=BenchConfig)
    prompt: Literal["tokens", "words"] = "tokens"  # exact PTOK token ids, or PTOK filler words like h2h
    warmup: WarmupConfig = msgspec.field(default_factory=WarmupConfig)
    min_window_s: float = 0.5  # a point whose wall or decode window is shorter is invalid
    invalid_tolerance: float = 0.0  # share of invalid requests a point may have and still count
    settle_s: float = 3.0  # after stopping an engine: at least this long (the harness sleeps 3-5 s)
    settle_timeout_s: float = 120.0  # ... and until memory is back within settle_tolerance_mib of before
    settle_tolerance_mib: int = 1024
    output_parity: OutputParityConfig = msgspec.field(default_factory=OutputParityConfig)
    workloads: dict[str, WorkloadConfig] = msgspec.field(default_factory=dict)
    telemetry: TelemetryConfig = msgspec.field(default_factory=TelemetryConfig)
    calibrate: CalibrateConfig = msgspec.field(default_factory=CalibrateConfig)


class StatsConfig(msgspec.Struct):
    min_delta_pct: float = 2.0
    noise_k: float = 3.0
    require_consistent_direction: bool = True
    metrics: list[str] = msgspec.field(default_factory=headline)  # the users' headline set (parity.metrics.registry)
    confidence: float = 0.95  # rank-based CI shown beside each A/B delta (informative, not part of the rule)
    until_ci_pct: float | None = None  # adaptive repeats: add blocks until every headline paired half-width <= this (null: fixed serving.repeat)
    until_ci_targets: dict[str, float] = msgspec.field(default_factory=dict)  # per headline metric, its own target (e.g. ttft_mean_ms: 10); the others wait on until_ci_pct (null: not waited on)
    canary: str = "flag"  # the drift canary before every arm of a serving sweep (parity.stats.canary): flag | discard (its blocks leave the paired statistics) | off
    max_repeats: int = 20  # ... but never more blocks than this
    budget_s: float | None = 7200.0  # ... nor past this wall time of the measured blocks (every wait has a bound; null: max_repeats alone)


def check_stats(st: StatsConfig, label: str, key: str) -> None:
    """stats: the rule's bounds, the metrics by the metric registry, the adaptive repeats' targets.
    (Here, beside the section: parity/stats/ sits below the metric registry it checks against.)"""
    for name in ("min_delta_pct", "noise_k"):
        if getattr(st, name) < 0:
            raise ConfigError(label, f"{key}.{name}", "must not be negative")
    if not 0 < st.confidence < 1:
        raise ConfigError(label, f"{key}.confidence", "must be between 0 and 1 (e.g. 0.95)")
    if not st.metrics:
        raise ConfigError(label, f"{key}.metrics", "must name at least one metric")
    if bad := unknown(st.metrics):
        raise ConfigError(label, f"{key}.metrics",
                          f"{bad[0]} is not a declared metric (the headline: {', '.join(headline())})")
    if st.until_ci_pct is not None and not (math.isfinite(st.until_ci_pct) and st.until_ci_pct > 0):
        raise ConfigError(label, f"{key}.until_ci_pct",
                          "must be a positive percentage (or null: a fixed number of repeats)")
    if st.canary not in ("flag", "discard", "off"):
        raise ConfigError(label, f"{key}.canary", f"flag, discard or off, got {st.canary!r}")
    for m, v in st.until_ci_targets.items():
        if m not in st.metrics or isinstance(v, bool) or not (math.isfinite(v) and v > 0):
            known = ", ".join(st.metrics)
            raise ConfigError(label, f"{key}.until_ci_targets.{m}",
                              f"a headline metric of stats.metrics ({known}) with a positive percentage")
    if not positive_int(st.max_repeats) or st.max_repeats < 2:
        raise ConfigError(label, f"{key}.max_repeats", "must be an integer >= 2 (an interval needs two blocks)")


class ReportsConfig(msgspec.Struct):
    dir: str = "reports"


class LeversConfig(msgspec.Struct):
    """`parity ab` / `parity levers`: where the lever map lives (None: <artifacts>/lever_map.yaml)."""

    map: str | None = None


class Profile(msgspec.Struct):
    name: str = ""
    description: str = ""
    hardware_class: str | None = None  # expected class; runs on another class are flagged
    hosts: dict[str, HostConfig] = msgspec.field(default_factory=dict)
    sources: dict[str, SourceConfig] = msgspec.field(default_factory=dict)
    models: dict[str, ModelConfig] = msgspec.field(default_factory=dict)
    engines: dict[str, EngineSection] = msgspec.field(default_factory=dict)  # each a section of its kind (parity.engines)
    gates: GatesConfig = msgspec.field(default_factory=GatesConfig)
    serving: ServingConfig = msgspec.field(default_factory=ServingConfig)
    lock: LockConfig = msgspec.field(default_factory=LockConfig)
    profiling: ProfilingConfig = msgspec.field(default_factory=ProfilingConfig)
    stats: StatsConfig = msgspec.field(default_factory=StatsConfig)
    reports: ReportsConfig = msgspec.field(default_factory=ReportsConfig)
    policy: PolicyConfig = msgspec.field(default_factory=PolicyConfig)
    levers: LeversConfig = msgspec.field(default_factory=LeversConfig)
    source_file: str = ""  # where it was loaded from (not a YAML key)

    # ---- lookups with clear errors ------------------------------------------------
    def model(self, name: str) -> ModelConfig:
        if name not in self.models:
            raise ConfigError(self.source_file, f"models.{name}", f"no such model (known: {', '.join(self.models) or 'none'})")
        return self.models[name]

    def engine(self, name: str) -> EngineSection:
        if name not in self.engines:
            raise ConfigError(self.source_file, f"engines.{name}", f"no such engine (known: {', '.join(self.engines) or 'none'})")
        return self.engines[name]

    def host(self, name: str) -> HostConfig | None:
        return self.hosts.get(name)


def engine_section(data, label: str, key: str) -> EngineSection:
    """engines.NAME as the section of its kind (kind: llama when not given)."""
    kind = data.get("kind", "llama") if isinstance(data, dict) else None
    if isinstance(data, dict) and kind not in ENGINES:
        raise ConfigError(label, f"{key}.kind", f"unknown engine kind {kind!r} (known: {', '.join(ENGINES)})")
    return from_dict(ENGINES[kind].section if kind else EngineSection, data, label, key)


SECTIONS[EngineSection] = engine_section


# --------------------------------------------------------------------------- loading


NOT_PROFILES = {"buckets"}  # defaults/buckets.yaml is the kernel bucket table


def available_profiles() -> list[str]:
    return sorted(p.stem for p in DEFAULTS_DIR.glob("*.yaml") if p.stem not in NOT_PROFILES)


def as_dict(p: Profile) -> dict:
    """The resolved profile as plain data (what `parity config show` prints)."""
    return msgspec.to_builtins(p)


def json_schema() -> dict:
    """JSON Schema of a profile file (msgspec derives it from the sections above)."""
    schemas, defs = msgspec.json.schema_components([Profile, *(k.section for k in ENGINES.values())])
    schema = {**schemas[0], "$defs": defs}
    for name, k in ENGINES.items():  # engines.NAME: the section of its kind (kind: llama when not given)
        defs[k.section.__name__]["properties"]["kind"] = {"enum": [name]}
    defs["Profile"]["properties"]["engines"]["additionalProperties"] = {"anyOf": [{"$ref": f"#/$defs/{k.section.__name__}"} for k in ENGINES.values()]}
    defs.pop("EngineSection", None)
    profile = schema["$defs"]["Profile"]
    profile["properties"].pop("source_file", None)  # set by the loader, not a key
    profile["properties"]["extends"] = {"type": "string", "description": "an embedded profile name or a file this one overrides"}
    for d in schema["$defs"].values():
        if d.get("type") == "object" and "properties" in d:
            d["additionalProperties"] = False  # the loader refuses unknown keys too
    schema["$comment"] = "generated by `parity config schema`"
    return schema


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def resolve_profile_path(name_or_path: str) -> tuple[Path, str]:
    """(path, label) for an embedded name or a file path."""
    p = Path(name_or_path).expanduser()
    if p.suffix in (".yaml", ".yml") or os.sep in name_or_path or p.exists():
        return p, str(name_or_path)
    embedded = DEFAULTS_DIR / f"{name_or_path}.yaml"
    if embedded.exists() and name_or_path not in NOT_PROFILES:
        return embedded, f"profile {name_or_path}"
    raise ConfigError(
        f"profile {name_or_path}", "", f"no such embedded profile or file (embedded: {', '.join(available_profiles())})"
    )


PROFILE_ENV = "PARITY_PROFILE"
PROJECT_FILE = "parity.yaml"  # `profile: NAME|FILE` in the working directory or a parent
FALLBACK_PROFILE = "smoke"


class ProfileChoice(msgspec.Struct, frozen=True):
    """Which profile a command loads, and why: given (-p), env ($PARITY_PROFILE), file (a
    parity.yaml) or fallback (the command's own default)."""

    profile: str  # what load_profile takes: an embedded name or a file path
    source: Literal["given", "env", "file", "fallback"]
    why: str  # one line, e.g. "from $PARITY_PROFILE" or "from /home/u/work/parity.yaml"
    project_file: str | None = None


def find_project_file(start: Path) -> Path | None:
    """The nearest parity.yaml in start or a parent directory."""
    for d in (start, *start.parents):
        if (d / PROJECT_FILE).is_file():
            return d / PROJECT_FILE
    return None


def read_project_file(path: Path) -> str:
    """The profile a parity.yaml names: an embedded name, or a file relative to the parity.yaml."""
    label = str(path)
    data = read_yaml(path, label)
    unknown = sorted(set(data) - {"profile"})
    if unknown:
        raise ConfigError(label, unknown[0], f"unknown key (a {PROJECT_FILE} names the default profile: "
                                             "`profile: NAME|FILE`)")
    value = data.get("profile")
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(label, "profile", "required: an embedded profile name or a profile file relative to "
                                            "this file")
    value = value.strip()
    if value in available_profiles() and not (path.parent / value).is_file():
        return value
    target = (path.parent / Path(value).expanduser()).resolve()
    if not target.is_file():
        embedded = ", ".join(available_profiles())
        raise ConfigError(label, "profile", f"{value!r} is neither an embedded profile ({embedded}) nor a file "
                                            f"({target} does not exist)")
    return str(target)


def choose_profile(given: str | None, fallback: str = FALLBACK_PROFILE, cwd: Path | None = None,
                   env=None) -> ProfileChoice:
    """The profile of a command that takes -p: -p, else $PARITY_PROFILE, else the nearest
    parity.yaml's `profile:`, else the command's fallback (smoke).  A bad value is a ConfigError
    naming where it came from; the profile itself is loaded (and checked) by load_profile."""
    env = os.environ if env is None else env
    if given:
        return ProfileChoice(given, "given", "given with -p/--profile")
    value = (env.get(PROFILE_ENV) or "").strip()
    if value:
        try:
            path, _ = resolve_profile_path(value)
        except ConfigError as e:
            raise ConfigError(f"${PROFILE_ENV}={value}", "", e.problem) from None
        if not path.is_file():
            raise ConfigError(f"${PROFILE_ENV}={value}", "", f"{path} does not exist")
        return ProfileChoice(value, "env", f"from ${PROFILE_ENV}")
    try:
        here = Path(cwd or os.getcwd())
    except OSError:  # the working directory was removed: no parity.yaml to find
        here = None
    found = find_project_file(here) if here is not None else None
    if found is not None:
        return ProfileChoice(read_project_file(found), "file", f"from {found}", str(found))
    why = f"the default: no -p, no ${PROFILE_ENV}, no {PROJECT_FILE} here or above"
    return ProfileChoice(fallback, "fallback", why)


def load_raw(name_or_path: str, _seen: tuple = ()) -> tuple[dict, str]:
    path, label = resolve_profile_path(name_or_path)
    data = read_yaml(path, label)
    parent = data.pop("extends", None)
    if parent is not None:
        if not isinstance(parent, str):
            raise ConfigError(label, "extends", "must be a profile name or file")
        if parent in _seen:
            raise ConfigError(label, "extends", f"cycle through {parent}")
        beside = Path(path).parent / parent  # a file named relative to the profile that extends it
        if parent not in available_profiles() and not Path(parent).is_file() and beside.is_file():
            parent = str(beside)
        base, _ = load_raw(parent, _seen + (name_or_path,))
        data = _deep_merge(base, data)
    return data, label


def load_profile(name_or_path: str) -> Profile:
    data, label = load_raw(name_or_path)
    data.setdefault("name", Path(label).stem if not label.startswith("profile ") else label[8:])
    prof = from_dict(Profile, data, label)
    prof.source_file = label
    for wname, raw in ((data.get("serving") or {}).get("workloads") or {}).items():  # a built-in's keys the YAML wrote
        w = prof.serving.workloads.get(wname)
        if w is not None and isinstance(raw, dict) and raw.get("kind", wname) == wname:
            w._given = tuple(raw)
    _expand_paths(prof)
    validate(prof, label)
    return prof


def _expand_paths(p: Profile) -> None:
    for m in p.models.values():
        m.path = expand_path(m.path) or ""
        m.vllm_path = expand_path(m.vllm_path)
    for e in p.engines.values():
        ENGINES[e.kind].expand_paths(e, expand_path)
    for s in p.sources.values():
        s.path = expand_path(s.path)
        s.checkout = expand_path(s.checkout)
        s.fixups = expand_path(s.fixups)
        s.archive = expand_path(s.archive)
    p.lock.dir = expand_path(p.lock.dir) or p.lock.dir
    p.levers.map = expand_path(p.levers.map)
    if p.gates.kl.text:
        p.gates.kl.text = expand_path(p.gates.kl.text)


def profile_from_dict(data: dict, label: str = "<dict>") -> Profile:
    prof = from_dict(Profile, data, label)
    prof.source_file = label
    for wname, raw in ((data.get("serving") or {}).get("workloads") or {}).items():  # a built-in's keys the YAML wrote
        w = prof.serving.workloads.get(wname)
        if w is not None and isinstance(raw, dict) and raw.get("kind", wname) == wname:
            w._given = tuple(raw)
    _expand_paths(prof)
    validate(prof, label)
    return prof


def validate(p: Profile, label: str) -> None:
    """Cross-references and value checks that types alone cannot express: each section's own
    package checks it (given the names it may refer to), in this order; then every bound."""
    for name, m in p.models.items():
        check_canonical(m.canonical, label, f"models.{name}.canonical")
        check_model(m, label, f"models.{name}", p.sources)
    for name, e in p.engines.items():
        Engine(name, e, ENGINES[e.kind], p).validate(label)
    for name, src in p.sources.items():
        check_source(src, label, f"sources.{name}")
    for name, h in p.hosts.items():
        HOST_SECTIONS[h.kind](h, label, f"hosts.{name}")
    check_serving(p.serving, label, "serving", p.models, p.engines)
    check_gates(p.gates, label, "gates", p.models, p.engines)
    check_profiling(p.profiling, label, "profiling")
    check_lock(p.lock, label, "lock")
    check_stats(p.stats, label, "stats")
    check_calibrate(p.serving.calibrate, label, "serving.calibrate")
    check_bounds(p, label)


ZERO_MEANS_OFF = {"keepalive_s", "min_window_s", "settle_s"}  # 0: no keepalive, no minimum window, no settle time


def check_bounds(obj, label: str, prefix: str = "") -> None:
    """Every timeout/interval (a field named *_s) is a finite number of seconds > 0, every
    *retries count >= 0, every port in 1..65535: a wait must have a bound, and 0 or a
    negative value is a typo, never "no wait"."""
    for name in record_fields(obj):
        v, key = getattr(obj, name), f"{prefix}{name}"
        if is_record(v):
            check_bounds(v, label, key + ".")
        elif isinstance(v, dict):
            for k, item in v.items():
                if is_record(item):
                    check_bounds(item, label, f"{key}.{k}.")
        elif isinstance(v, list):
            for i, item in enumerate(v):
                if is_record(item):
                    check_bounds(item, label, f"{key}[{i}].")
        elif v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        elif name.endswith("_s"):
            low_ok = name in ZERO_MEANS_OFF and v == 0
            if not math.isfinite(v) or (v <= 0 and not low_ok):
                raise ConfigError(label, key, f"must be a finite number of seconds > 0{' (or 0: off)' if name in ZERO_MEANS_OFF else ''}, got {v:g}")
        elif name.endswith("retries") and v < 0:
            raise ConfigError(label, key, f"must be 0 or more, got {v}")
        elif name == "port" and not 1 <= v <= 65535:
            raise ConfigError(label, key, f"not a TCP port (1..65535): {v}")


