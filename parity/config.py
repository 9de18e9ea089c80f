"""Typed configuration (dataclasses) loaded from YAML, with embedded profiles.

A profile is one YAML file.  `--profile NAME` picks an embedded profile from
parity/defaults/NAME.yaml; `--profile FILE` loads a file, which may say
`extends: NAME` to start from an embedded one (deep merge, lists replaced).
Every problem is a ConfigError naming file, key and problem.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from parity.errors import ConfigError

DEFAULTS_DIR = Path(__file__).resolve().parent / "defaults"
PARITY_ROOT = Path(__file__).resolve().parent.parent
MD5_RE = re.compile(r"^[0-9a-f]{32}$")


def cache_dir() -> Path:
    return Path(os.environ.get("PARITY_CACHE") or Path.home() / ".cache" / "parity").expanduser()


def positive_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def positive_seconds(value, name: str) -> float:
    """A CLI/step timeout: a finite number of seconds > 0 (else a one-line UsageError naming it)."""
    import math

    from parity.errors import UsageError

    try:
        v = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{name} {value!r}: not a number of seconds") from None
    if not math.isfinite(v) or v <= 0:
        raise UsageError(f"{name} {value!r}: must be a finite number of seconds > 0")
    return v


def expand_path(value: str | None) -> str | None:
    """~, ${PARITY_ROOT}, ${PARITY_CACHE} and other ${ENV} references."""
    if value is None:
        return None
    value = value.replace("${PARITY_ROOT}", str(PARITY_ROOT)).replace("${PARITY_CACHE}", str(cache_dir()))
    return os.path.expanduser(os.path.expandvars(value))


# --------------------------------------------------------------------------- sections


@dataclass
class SlurmConfig:
    """How a `kind: slurm` host submits its job (parity.slurm): sbatch options and bounds."""

    partition: str | None = None  # --partition; None: the cluster's default partition
    gres: str | None = None  # --gres, e.g. gpu:b200:1
    gpus: str | None = None  # --gpus, e.g. 1 or b200:1
    account: str | None = None  # --account
    qos: str | None = None  # --qos
    time: str | None = None  # --time (Slurm's forms: minutes, HH:MM:SS, D-HH:MM:SS)
    sbatch_args: list[str] = field(default_factory=list)  # more sbatch options, e.g. [--exclusive, --constraint=b200]
    env: dict[str, str] = field(default_factory=dict)  # environment of the Slurm commands, e.g. {SLURM_CONF: /etc/slurm-b/slurm.conf}
    poll_s: float = 10.0  # how often the job's state is read (scontrol show job)
    pending_timeout_s: float = 86400.0  # a job still pending after this is cancelled (exit 4)
    controller_timeout_s: float = 300.0  # how long the controller may stay unreachable while following (then exit 4)
    kill_grace_s: float = 120.0  # after scancel: how long to wait for the job to end (Slurm's KillWait and cleanup)


@dataclass
class HostConfig:
    kind: Literal["ssh", "slurm"] = "ssh"  # slurm: submit a batch job (parity.slurm); ssh: run over SSH
    slurm: SlurmConfig | None = None  # the sbatch options of a kind: slurm host
    hostname: str = ""  # ssh: the host; slurm: the login node (empty: sbatch runs on this machine)
    user: str | None = None
    port: int = 22
    identity_file: str | None = None
    known_hosts: str | None = None  # default: ~/.ssh/known_hosts
    host_key_policy: Literal["reject", "accept-new"] = "reject"
    workdir: str = "~/parity-remote"  # where parity keeps its checkout/venv/runs remotely
    python: str = "python3"
    parity: str | None = None  # remote parity executable; None = bootstrap a venv in workdir
    connect_timeout_s: float = 10.0  # TCP connect, SSH banner, authentication, each channel open
    command_timeout_s: float = 86400.0  # the whole remote command (a delegated parity run)
    bootstrap_timeout_s: float = 600.0  # each step of the remote venv bootstrap (unpack, venv, pip, import check)
    keepalive_s: float = 15.0  # 0 = no keepalive
    lock_dir: str | None = None  # remote lock dir; default: the profile's lock.dir


@dataclass
class CanonicalMd5:
    md5: str
    path: str = "paged"  # paged | nonpaged (a path is an engine's env set)
    form: Literal["chat", "no-cnv"] = "chat"
    n_predict: int = 48
    validated: str = ""  # provenance: how this md5 was accepted (KL check, date, artifact)
    transcript: str | None = None  # stored reference output, to show the first divergence


@dataclass
class SynthSpec:
    arch: str = "llama"
    dtype: Literal["f32", "f16"] = "f32"
    seed: int = 0
    layers: int = 2
    embd: int = 64
    heads: int = 4
    kv_heads: int = 2
    ff: int = 128
    ctx: int = 512
    experts: int = 0
    experts_used: int = 0
    noise: float = 0.0  # perturbation scale on top of `seed` weights (KL variants)
    perturb_seed: int = 0


@dataclass(frozen=True)
class HfShape:
    """The shape of a tiny Hugging Face llama checkpoint (parity.models.hf_tiny)."""

    seed: int = 0
    layers: int = 2
    hidden: int = 256
    heads: int = 4
    kv_heads: int = 2
    ff: int = 512
    ctx: int = 2048


@dataclass(frozen=True)
class HfModelSpec(HfShape):
    """A tiny deterministic HF llama checkpoint written at models.X.vllm_path and converted to
    models.X.path by `source`'s convert_hf_to_gguf.py: the same weights for vLLM and llama.cpp."""

    source: str | None = None  # the llama.cpp source whose converter makes the GGUF; None: the first llama engine's
    outtype: Literal["f32", "f16"] = "f32"


@dataclass
class ModelConfig:
    path: str = ""
    arch: str = ""
    description: str = ""
    synth: SynthSpec | None = None  # synthesized at `path` when missing
    hf: HfModelSpec | None = None  # a tiny HF checkpoint at vllm_path, converted to `path`
    vllm_path: str | None = None  # the same model for vLLM (safetensors dir)
    served_name: str | None = None
    canonical: list[CanonicalMd5] = field(default_factory=list)


@dataclass
class SourceConfig:
    kind: Literal["git", "path", "archive", "pypi-sdist", "localai"] = "path"
    url: str | None = None
    pin: str | None = None
    path: str | None = None
    sha256: str | None = None
    package: str | None = None  # pypi-sdist: "name==version"
    subdir: str | None = None  # pypi-sdist/archive: where llama.cpp sits inside
    checkout: str | None = None  # git/localai: an existing upstream clone holding the pin (instead of cloning url)
    fixups: str | None = None  # NNNN-*.patch applied to every engine of this source, stock too, after any series
    archive: str | None = None  # localai: llama.cpp at the pin as a `git archive` tarball (instead of url/checkout)


@dataclass
class EngineConfig:
    kind: Literal["llama", "vllm"] = "llama"
    description: str = ""
    # llama.cpp builds
    source: str | None = None  # a name under `sources`
    series: str | None = None  # directory of NNNN-*.patch files; "auto" = the localai source's patches/paged; None = stock
    expected_tree: str | None = None  # mirror invariant: git tree after the series (a constant; prefer fork)
    fork: str | None = None  # mirror invariant: a checkout of the fork branch the series mirrors (its fork_ref tree)
    fork_ref: str = "HEAD"
    # a variant of the series (a build lever's arm, a bisection probe): patches numbered <= series_until,
    # none of series_without; the mirror invariant is not checked for a variant
    series_until: str | None = None
    series_without: list[str] = field(default_factory=list)
    cuda_archs: str | None = None  # "121", "121a", "90;121a"; None = CPU build
    cmake_flags: list[str] = field(default_factory=list)
    targets: list[str] = field(
        default_factory=lambda: [
            "llama-server",
            "llama-completion",
            "llama-batched-bench",
            "llama-perplexity",
            "test-backend-ops",
        ]
    )
    bin_dir: str | None = None  # use prebuilt binaries instead of building
    env: dict[str, str] = field(default_factory=dict)  # always set for this engine
    paths: dict[str, dict[str, str]] = field(default_factory=dict)  # path name -> extra env
    default_path: str | None = None
    server_args: list[str] = field(default_factory=list)
    ready_timeout_s: float = 120.0
    ready_probe_timeout_s: float = 5.0
    stop_grace_s: float = 15.0
    # vLLM
    vllm_bin: str = "vllm"
    gpu_memory_utilization: float = 0.85
    max_model_len: int = 4096
    max_num_seqs: int = 256
    tensor_parallel_size: int = 1
    dtype: str | None = None  # vllm serve --dtype (float32 serves the same weights as an f32 GGUF)
    extra_args: list[str] = field(default_factory=list)


@dataclass
class KLConfig:
    reference: str | None = None  # model name whose logits are the base (e.g. the f16 model)
    baseline: str | None = None  # model/engine whose KLD bounds the candidate
    baseline_path: str | None = None  # path the baseline runs on (seeds: nonpaged); None = the gated path
    candidate: str | None = None
    text: str | None = None  # text file for llama-perplexity; None = built-in text
    ctx: int = 128
    chunks: int = 4
    max_kld: float | None = None  # absolute bound when no baseline is measured
    kld_slack: float = 0.0  # candidate may exceed baseline by this much
    ppl_band_pct: float = 5.0  # |PPL(candidate)/PPL(baseline) - 1| * 100 bound
    retries: int = 3  # reruns when llama-perplexity exits 0 without its statistics (its logger loses the tail at exit)
    timeout_s: float = 1800.0


@dataclass
class GatesConfig:
    prompt: str = "The capital of France is"
    n_predict: int = 48
    seed: int = 1
    form: Literal["chat", "no-cnv"] = "chat"
    completion_args: list[str] = field(default_factory=lambda: ["-ngl", "99", "-fa", "on", "--temp", "0"])
    ctx: int | None = None  # llama-completion -c (the context the canonical md5s were recorded with); None: the tool's default
    timeout_s: float = 600.0
    completion_retries: int = 3  # reruns while llama-completion's stdout is incomplete (its logger loses the tail at exit)
    models: list[str] = field(default_factory=list)  # models gated pre/post by default
    engine: str | None = None  # engine whose binaries run the gates
    paths: list[str] = field(default_factory=list)  # paths gated by default
    # no canonical md5 for a model: this engine's build, run in the same session, defines it
    reference_engine: str | None = None
    reference_path: str | None = None
    ops: list[str] = field(default_factory=list)
    op_backend: str = "CUDA0"
    # test-backend-ops -p REGEX per op: only the cases whose parameters match (a slow CPU can
    # keep the small cases of a suite built for GPU shapes, e.g. {MOE_SWIGLU_DOWN: "type_a=f32"})
    op_params: dict[str, str] = field(default_factory=dict)
    op_retries: int = 0  # zero tolerance: a retry only when asked, and a pass on it is "flaky"
    op_timeout_s: float = 1800.0
    kl: KLConfig = field(default_factory=KLConfig)
    kl_in_prepost: bool = False


@dataclass
class BenchConfig:
    npp: list[int] = field(default_factory=lambda: [512, 2048])
    ntg: list[int] = field(default_factory=lambda: [4])
    npl: list[int] = field(default_factory=lambda: [32])
    ctx: int = 131072
    batch: int = 2048
    ubatch: int = 512
    extra_args: list[str] = field(default_factory=lambda: ["-ngl", "99", "-fa", "on"])
    timeout_s: float = 3600.0
    retries: int = 3  # reruns while rows that fit are missing from stdout (its logger loses the tail at exit)


@dataclass
class WarmupConfig:
    requests: int = 8  # the users' harness: h2h -n 8 --gen 16 with its own nonce, discarded
    gen: int = 16


@dataclass
class TelemetryConfig:
    """Around every serving point: GPU (NVML, else nvidia-smi) and host samples (parity/telemetry/)."""

    enabled: bool = True
    interval_s: float = 0.1  # ~10 Hz
    pin_cpus: bool = True  # keep the load generator off the server's cores (taskset / sched_setaffinity)
    pin_min_cpus: int = 8  # ... only where at least this many cores are usable
    client_cpus: int = 2  # the last cores go to the client, the rest to the server


@dataclass
class OutputParityConfig:
    """Greedy outputs of every serving engine on the same prompts, compared token by token."""

    enabled: bool = False
    prompts: list[str] = field(default_factory=lambda: ["The capital of France is", "Once upon a time", "def fibonacci(n):"])
    gen: int = 16
    top_logprobs: int = 5
    min_agreement: float = 1.0  # share of generated tokens that must agree with the reference engine
    max_kl: float = 0.05  # bound on the mean KL divergence of the top-k distributions (nats)


@dataclass
class CalibrateConfig:
    """Before measuring, choose the generated tokens so that every point's windows last
    min_window_s x margin (parity.stats.calibrate): block 0 runs at serving.gen; when a
    point's window falls short, gen is raised (never lowered), block 0 becomes the
    calibration trial and the measured blocks start after it.  Off with an explicit --gen."""

    enabled: bool = True
    margin: float = 1.5  # windows must reach min_window_s x margin (room for a noisier block)
    max_gen: int = 4096  # never raise gen past this (nor past the context an engine gives a request)


@dataclass
class SloConfig:
    """Bounds a request must meet to count toward goodput (None: not bounded)."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None


@dataclass
class WorkloadConfig:
    """A named workload (serving.workloads.NAME, or inline in a campaign's snapshot step), run
    with `parity snapshot --workload NAME` (parity.serving.workloads).  Each kind reads its own
    keys; gen / ptok None = serving.gen / serving.ptok."""

    kind: Literal["shared-prefix", "prefill-under-decode", "open-loop", "multi-turn"] | None = None  # None: the built-in of the same name
    description: str = ""
    gen: int | None = None
    ptok: int | None = None  # prompt tokens of the plain requests (decode streams, open-loop arrivals)
    # shared-prefix: groups of requests sharing a prefix, each with its own suffix
    groups: int = 4
    group_size: int = 8
    prefix_tokens: int = 512
    suffix_tokens: int = 32
    prime: bool = True  # one request per group first (its prefix computed), then the measured group_size per group
    # prefill-under-decode: steady decode streams, long prompts arriving during them
    decode_streams: int = 4
    decode_gen: int = 256
    long_prompts: int = 2
    long_ptok: int = 1024
    long_every_s: float = 1.0
    # open-loop: arrivals at each rate (gamma gaps, burstiness 1 = Poisson)
    rates: list[float] = field(default_factory=lambda: [1.0, 2.0, 4.0])
    requests_per_rate: int = 32
    burstiness: float = 1.0
    seed: int = 0
    exact_rate: bool = True  # scale the drawn gaps so the schedule's mean rate is the requested one (false: raw draws)
    max_delay_p99_ms: float = 10.0  # the load generator falls behind past this: the point is invalid
    min_achieved_share: float = 0.95  # achieved / scheduled send rate below this: invalid; served / scheduled below it: not held
    slo: SloConfig = field(default_factory=SloConfig)
    # multi-turn: conversations whose turns resend the growing history
    conversations: int = 4
    turns: int = 4
    turn_tokens: int = 64


def check_workload(w: WorkloadConfig, label: str, key: str) -> None:
    """Value checks of one workload (ConfigError naming the key)."""
    positive = {
        "shared-prefix": ("groups", "group_size", "prefix_tokens", "suffix_tokens"),
        "prefill-under-decode": ("decode_streams", "decode_gen", "long_prompts", "long_ptok"),
        "open-loop": ("requests_per_rate", "burstiness", "max_delay_p99_ms"),
        "multi-turn": ("conversations", "turns", "turn_tokens"),
    }[w.kind]
    for k in positive + ("gen", "ptok"):
        v = getattr(w, k)
        if v is not None and not v > 0:
            raise ConfigError(label, f"{key}.{k}", "must be positive")
    if w.kind == "prefill-under-decode" and w.long_every_s < 0:
        raise ConfigError(label, f"{key}.long_every_s", "must not be negative")
    if w.kind == "open-loop":
        if not w.rates or any(not r > 0 for r in w.rates) or len(set(w.rates)) != len(w.rates):
            raise ConfigError(label, f"{key}.rates", "must be a non-empty list of distinct positive request rates (requests/s)")
        if w.requests_per_rate < 2:
            raise ConfigError(label, f"{key}.requests_per_rate", "must be at least 2 (a rate needs two sends)")
        if not 0 < w.min_achieved_share <= 1:
            raise ConfigError(label, f"{key}.min_achieved_share", "must be a share in (0, 1]")
        for k in ("ttft_ms", "tpot_ms", "e2e_ms"):
            v = getattr(w.slo, k)
            if v is not None and not v > 0:
                raise ConfigError(label, f"{key}.slo.{k}", "must be positive (or null: not bounded)")


@dataclass
class ServingConfig:
    model: str = ""
    engines: list[str] = field(default_factory=list)
    reference_engine: str | None = None  # ratios are engine / reference
    npl: list[int] = field(default_factory=lambda: [8, 32, 128])
    ptok: int = 128
    gen: int = 64
    parallel: int = 128
    ctx: int = 131072
    batch: int = 2048
    ubatch: int = 512
    repeat: int = 1
    order: Literal["abab", "abba", "aabb"] = "abba"  # engine order across blocks: abba rotates them (serving.blocks.block_order), so a drift of the box cancels
    port: int = 8090
    request_timeout_s: float = 600.0
    server_args: list[str] = field(default_factory=lambda: ["-ngl", "99", "-fa", "on"])
    bench: BenchConfig = field(default_factory=BenchConfig)
    prompt: Literal["tokens", "words"] = "tokens"  # exact PTOK token ids, or PTOK filler words like h2h
    warmup: WarmupConfig = field(default_factory=WarmupConfig)
    min_window_s: float = 0.5  # a point whose wall or decode window is shorter is invalid
    invalid_tolerance: float = 0.0  # share of invalid requests a point may have and still count
    settle_s: float = 3.0  # after stopping an engine: at least this long (the harness sleeps 3-5 s)
    settle_timeout_s: float = 120.0  # ... and until memory is back within settle_tolerance_mib of before
    settle_tolerance_mib: int = 1024
    output_parity: OutputParityConfig = field(default_factory=OutputParityConfig)
    workloads: dict[str, WorkloadConfig] = field(default_factory=dict)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    calibrate: CalibrateConfig = field(default_factory=CalibrateConfig)


@dataclass
class LockConfig:
    dir: str = "~/gpu_bench_lock"
    poll_s: float = 30.0
    timeout_s: float = 7200.0
    stale_age_s: float = 12 * 3600.0
    idle_checks: int = 2
    require_idle_gpu: bool = True  # false: GPU compute processes are reported but do not block
    preflight: bool = True  # false: lock only, no nvidia-smi/docker idle checks (lock tests)
    # the users' rule: ANY running container means busy (`docker ps -q | wc -l` must be 0).  A name/image
    # substring here RELAXES it: only matching containers count, every other one is ignored.
    docker_busy_only_matching: str | None = None
    docker_no_daemon: Literal["idle", "busy"] = "idle"
    nvidia_smi_missing: Literal["idle", "busy"] = "idle"
    run_timeout_s: float = 12 * 3600.0  # `parity lock run -- CMD`: the command is stopped after this
    reclaim_wait_s: float = 60.0  # a reclaimer waits this long for a dead holder's process group to be gone


@dataclass
class BucketRule:
    name: str
    pattern: str  # regex searched in the demangled kernel name; first matching rule wins
    group: str | None = None  # macro bucket (GDN, MoE/FFN-GEMM, ...); None = the name


@dataclass
class ProfilingConfig:
    nsys: str = "nsys"
    trace: str = "cuda,nvtx"
    ntg: list[int] = field(default_factory=lambda: [64, 16])
    npl: int = 128
    npp: int = 128
    extra_args: list[str] = field(default_factory=list)
    buckets: list[BucketRule] = field(default_factory=list)  # empty = the shipped default table (parity/defaults/buckets.yaml)
    top_unmatched: int = 10
    decode_after_nvtx: str | None = None  # regex: analyze only kernels after the last matching NVTX range
    timeout_s: float = 3600.0  # one capture (nsys + workload)


@dataclass
class StatsConfig:
    min_delta_pct: float = 2.0
    noise_k: float = 3.0
    require_consistent_direction: bool = True
    metrics: list[str] = field(default_factory=lambda: ["decode_agg_tps", "decode_perseq_tps", "agg_tps", "ttft_mean_ms"])  # the users' headline set
    confidence: float = 0.95  # rank-based CI shown beside each A/B delta (informative, not part of the rule)
    until_ci_pct: float | None = None  # adaptive repeats: add blocks until every headline paired half-width <= this (null: fixed serving.repeat)
    until_ci_targets: dict[str, float] = field(default_factory=dict)  # per headline metric, its own target (e.g. ttft_mean_ms: 10); the others wait on until_ci_pct (null: not waited on)
    canary: str = "flag"  # the drift canary before every arm of a serving sweep (parity.stats.canary): flag | discard (its blocks leave the paired statistics) | off
    max_repeats: int = 20  # ... but never more blocks than this
    budget_s: float | None = 7200.0  # ... nor past this wall time of the measured blocks (every wait has a bound; null: max_repeats alone)


@dataclass
class ReportsConfig:
    dir: str = "reports"


@dataclass
class LeversConfig:
    """`parity ab` / `parity levers`: where the lever map lives (None: <artifacts>/lever_map.yaml)."""

    map: str | None = None


@dataclass
class PolicyConfig:
    # env names refused in benchmark contexts, with the reason shown in the refusal
    forbidden_bench_env: dict[str, str] = field(
        default_factory=lambda: {
            "LLAMA_MAX_BATCH_TOKENS": "changes the prefill budget; parity benches run the compiled-in scheduler default",
            "GDN_TC": "overrides the compiled-in GDN M5 default (GDN_TC=5); benches must use production defaults",
            "GDN_CHUNK_MIN": "overrides the compiled-in GDN chunk minimum (64); benches must use production defaults",
            "LLAMA_PAGED_DECODE_STABLE": "opt-in S3 scheduling regressed real serving; parity benches keep it off",
        }
    )


@dataclass
class Profile:
    name: str = ""
    description: str = ""
    hardware_class: str | None = None  # expected class; runs on another class are flagged
    hosts: dict[str, HostConfig] = field(default_factory=dict)
    sources: dict[str, SourceConfig] = field(default_factory=dict)
    models: dict[str, ModelConfig] = field(default_factory=dict)
    engines: dict[str, EngineConfig] = field(default_factory=dict)
    gates: GatesConfig = field(default_factory=GatesConfig)
    serving: ServingConfig = field(default_factory=ServingConfig)
    lock: LockConfig = field(default_factory=LockConfig)
    profiling: ProfilingConfig = field(default_factory=ProfilingConfig)
    stats: StatsConfig = field(default_factory=StatsConfig)
    reports: ReportsConfig = field(default_factory=ReportsConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    levers: LeversConfig = field(default_factory=LeversConfig)
    source_file: str = ""  # where it was loaded from (not a YAML key)

    # ---- lookups with clear errors ------------------------------------------------
    def model(self, name: str) -> ModelConfig:
        if name not in self.models:
            raise ConfigError(self.source_file, f"models.{name}", f"no such model (known: {', '.join(self.models) or 'none'})")
        return self.models[name]

    def engine(self, name: str) -> EngineConfig:
        if name not in self.engines:
            raise ConfigError(self.source_file, f"engines.{name}", f"no such engine (known: {', '.join(self.engines) or 'none'})")
        return self.engines[name]

    def host(self, name: str) -> HostConfig | None:
        return self.hosts.get(name)


# --------------------------------------------------------------------------- loading


NOT_PROFILES = {"buckets"}  # defaults/buckets.yaml is the kernel bucket table


def available_profiles() -> list[str]:
    return sorted(p.stem for p in DEFAULTS_DIR.glob("*.yaml") if p.stem not in NOT_PROFILES)


def as_dict(p: Profile) -> dict:
    """The resolved profile as plain data (what `parity config show` prints)."""
    return dataclasses.asdict(p)


def json_schema() -> dict:
    """JSON Schema of a profile file (msgspec derives it from the dataclasses above)."""
    import msgspec

    schema = msgspec.json.schema(Profile)
    profile = schema["$defs"]["Profile"]
    profile["properties"].pop("source_file", None)  # set by the loader, not a key
    profile["properties"]["extends"] = {"type": "string", "description": "an embedded profile name or a file this one overrides"}
    for d in schema["$defs"].values():
        if d.get("type") == "object" and "properties" in d:
            d["additionalProperties"] = False  # the loader refuses unknown keys too
    schema["$comment"] = "generated by `parity config schema`"
    return schema


def read_utf8(path: Path, label: str, missing: str = "file not found") -> str:
    """A config/campaign/registry file's text; every way it cannot be read is a ConfigError."""
    try:
        return path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(label, "", missing) from None
    except IsADirectoryError:
        raise ConfigError(label, "", "is a directory, not a YAML file") from None
    except OSError as e:
        raise ConfigError(label, "", f"cannot read: {e.strerror}") from None
    except UnicodeDecodeError as e:
        line = e.object[: e.start].count(b"\n") + 1
        raise ConfigError(label, f"line {line}", f"not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start})") from None


def read_yaml(path: Path, label: str, missing: str = "file not found", not_mapping: str | None = None) -> dict:
    """A YAML file whose top level is a mapping (empty -> {}); every way it is not is one
    ConfigError naming the line (profiles, campaigns, matrices, the lever map)."""
    import yaml

    from parity.yamlload import safe_load

    text = read_utf8(path, label, missing)
    try:
        data = safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(label, where, f"YAML syntax error: {problem}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(label, "", not_mapping or f"top level must be a mapping, got {type(data).__name__}")
    return data



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
        if e.series not in (None, "auto"):
            e.series = expand_path(e.series)
        e.bin_dir = expand_path(e.bin_dir)
        e.fork = expand_path(e.fork)
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
    """Cross-references and value checks that types alone cannot express."""
    for mname, m in p.models.items():
        for i, c in enumerate(m.canonical):
            key = f"models.{mname}.canonical[{i}].md5"
            if not MD5_RE.match(c.md5):
                raise ConfigError(label, key, f"not an md5 (32 lowercase hex digits): {c.md5!r}")
            if c.md5 == "d41d8cd98f00b204e9800998ecf8427e":
                raise ConfigError(label, key, "is the md5 of empty output and can never be canonical")
        if not m.path and m.synth is None:
            raise ConfigError(label, f"models.{mname}.path", "missing (give a GGUF path or a synth: spec)")
        if m.hf is not None:
            if m.synth is not None:
                raise ConfigError(label, f"models.{mname}", "give synth: or hf:, not both")
            if not m.vllm_path:
                raise ConfigError(label, f"models.{mname}.vllm_path", "an hf: model needs the directory its checkpoint is written to")
            if m.hf.source is not None and m.hf.source not in p.sources:
                raise ConfigError(label, f"models.{mname}.hf.source", f"unknown source {m.hf.source!r} (known: {', '.join(p.sources) or 'none'})")
    for ename, e in p.engines.items():
        if e.source is not None and e.source not in p.sources:
            raise ConfigError(label, f"engines.{ename}.source", f"unknown source {e.source!r} (known: {', '.join(p.sources) or 'none'})")
        if e.kind == "llama" and e.source is None and e.bin_dir is None:
            raise ConfigError(label, f"engines.{ename}", "a llama engine needs a source (to build) or a bin_dir (prebuilt)")
        if e.default_path is not None and e.paths and e.default_path not in e.paths:
            raise ConfigError(label, f"engines.{ename}.default_path", f"{e.default_path!r} is not one of its paths ({', '.join(e.paths)})")
        if e.cuda_archs is not None and not re.fullmatch(r"\s*[0-9]{2,3}[a-z]?(-real|-virtual)?(\s*;\s*[0-9]{2,3}[a-z]?(-real|-virtual)?)*\s*", e.cuda_archs):
            raise ConfigError(label, f"engines.{ename}.cuda_archs", f"not a CUDA architecture list like '121' or '90;121a': {e.cuda_archs!r}")
        if e.kind == "vllm" and not 0 < e.gpu_memory_utilization <= 1:
            raise ConfigError(label, f"engines.{ename}.gpu_memory_utilization", "must be in (0, 1]")
    for sname, s in p.sources.items():
        need = {"git": ("url", "pin"), "path": ("path",), "archive": ("path", "sha256"), "pypi-sdist": ("package", "sha256"), "localai": ("path",)}[s.kind]
        for attr in need:
            if not getattr(s, attr):
                raise ConfigError(label, f"sources.{sname}.{attr}", f"required for a {s.kind} source")
        if s.archive and s.kind != "localai":
            raise ConfigError(label, f"sources.{sname}.archive", f"only a localai source takes an archive of the pin (a {s.kind} source does not)")
        if s.archive and (s.url or s.checkout):
            raise ConfigError(label, f"sources.{sname}", "give llama.cpp at the pin one way: archive, checkout or url (set the others to null)")
    for hname, h in p.hosts.items():
        if h.kind == "ssh" and h.slurm is not None:
            raise ConfigError(label, f"hosts.{hname}.slurm", "only a kind: slurm host takes slurm: options")
        if h.kind == "slurm":
            h.slurm = h.slurm or SlurmConfig()
            for key in ("poll_s", "pending_timeout_s", "controller_timeout_s", "kill_grace_s"):
                v = getattr(h.slurm, key)
                if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                    raise ConfigError(label, f"hosts.{hname}.slurm.{key}", "must be a number of seconds > 0")
            if h.slurm.time is not None and not re.fullmatch(r"\d+(-\d+)?(:\d+){0,2}|UNLIMITED|INFINITE", str(h.slurm.time)):
                raise ConfigError(label, f"hosts.{hname}.slurm.time", f"not a Slurm time limit (minutes, HH:MM:SS or D-HH:MM:SS): {h.slurm.time!r}")
    s = p.serving
    for key in ("model",):
        if s.model and s.model not in p.models:
            raise ConfigError(label, f"serving.{key}", f"unknown model {s.model!r}")
    for e in s.engines:
        if e not in p.engines:
            raise ConfigError(label, "serving.engines", f"unknown engine {e!r} (known: {', '.join(p.engines)})")
    if s.reference_engine and s.reference_engine not in p.engines:
        raise ConfigError(label, "serving.reference_engine", f"unknown engine {s.reference_engine!r}")
    for key in ("npl",):
        vals = getattr(s, key)
        if not vals or any(v <= 0 for v in vals):
            raise ConfigError(label, f"serving.{key}", "must be a non-empty list of positive integers")
    for key in ("ptok", "gen", "parallel", "ctx", "repeat", "request_timeout_s", "settle_timeout_s"):
        if getattr(s, key) <= 0:
            raise ConfigError(label, f"serving.{key}", "must be positive")
    for key in ("min_window_s", "settle_s", "settle_tolerance_mib"):
        if getattr(s, key) < 0:
            raise ConfigError(label, f"serving.{key}", "must not be negative")
    if not 0 <= s.invalid_tolerance < 1:
        raise ConfigError(label, "serving.invalid_tolerance", "must be a share in [0, 1)")
    from parity.serving.workload_defaults import BUILTIN

    for wname, w in s.workloads.items():
        if w.kind is None:
            if wname not in BUILTIN:
                raise ConfigError(label, f"serving.workloads.{wname}.kind", f"required key is missing (or name the workload after a built-in kind to override its fields: {', '.join(BUILTIN)})")
            w.kind = wname
        check_workload(w, label, f"serving.workloads.{wname}")
    if s.warmup.requests < 0 or s.warmup.gen <= 0:
        raise ConfigError(label, "serving.warmup", "requests must be >= 0 (0: no warmup) and gen positive")
    t = s.telemetry
    if t.client_cpus < 1 or t.pin_min_cpus < t.client_cpus + 1:
        raise ConfigError(label, "serving.telemetry", "client_cpus must be >= 1 and pin_min_cpus leave the server at least one core (pin_min_cpus > client_cpus)")
    op = s.output_parity
    if op.enabled and (not op.prompts or op.gen <= 0 or op.top_logprobs < 1 or not 0 <= op.min_agreement <= 1 or op.max_kl < 0):
        raise ConfigError(label, "serving.output_parity", "needs prompts, gen > 0, top_logprobs >= 1, min_agreement in [0, 1], max_kl >= 0")
    if p.gates.ctx is not None and p.gates.ctx <= 0:
        raise ConfigError(label, "gates.ctx", "must be a positive number of tokens")
    if p.gates.ctx is not None and {"-c", "--ctx-size"} & set(p.gates.completion_args):
        raise ConfigError(label, "gates.completion_args", "sets the context size too: give it once, as gates.ctx")
    for m in p.gates.models:
        if m not in p.models:
            raise ConfigError(label, "gates.models", f"unknown model {m!r}")
    for key in ("engine", "reference_engine"):
        val = getattr(p.gates, key)
        if val and val not in p.engines:
            raise ConfigError(label, f"gates.{key}", f"unknown engine {val!r}")
    for key in ("reference", "baseline", "candidate"):
        val = getattr(p.gates.kl, key)
        if val and val not in p.models:
            raise ConfigError(label, f"gates.kl.{key}", f"unknown model {val!r}")
    for i, b in enumerate(p.profiling.buckets):
        try:
            re.compile(b.pattern)
        except re.error as err:
            raise ConfigError(label, f"profiling.buckets[{i}].pattern", f"bad regex: {err}") from None
    if p.lock.idle_checks < 1:
        raise ConfigError(label, "lock.idle_checks", "must be at least 1")
    for key in ("min_delta_pct", "noise_k"):
        if getattr(p.stats, key) < 0:
            raise ConfigError(label, f"stats.{key}", "must not be negative")
    if not 0 < p.stats.confidence < 1:
        raise ConfigError(label, "stats.confidence", "must be between 0 and 1 (e.g. 0.95)")
    if not p.stats.metrics:
        raise ConfigError(label, "stats.metrics", "must name at least one metric")
    if p.stats.until_ci_pct is not None and not (math.isfinite(p.stats.until_ci_pct) and p.stats.until_ci_pct > 0):
        raise ConfigError(label, "stats.until_ci_pct", "must be a positive percentage (or null: a fixed number of repeats)")
    if p.stats.canary not in ("flag", "discard", "off"):
        raise ConfigError(label, "stats.canary", f"flag, discard or off, got {p.stats.canary!r}")
    for m, v in p.stats.until_ci_targets.items():
        if m not in p.stats.metrics or isinstance(v, bool) or not (math.isfinite(v) and v > 0):
            raise ConfigError(label, f"stats.until_ci_targets.{m}", f"a headline metric of stats.metrics ({', '.join(p.stats.metrics)}) with a positive percentage")
    if not positive_int(p.stats.max_repeats) or p.stats.max_repeats < 2:
        raise ConfigError(label, "stats.max_repeats", "must be an integer >= 2 (an interval needs two blocks)")
    c = s.calibrate
    if not (math.isfinite(c.margin) and c.margin >= 1):
        raise ConfigError(label, "serving.calibrate.margin", "must be >= 1 (the share of min_window_s a window must reach)")
    if not positive_int(c.max_gen):
        raise ConfigError(label, "serving.calibrate.max_gen", "must be a positive number of tokens")
    check_bounds(p, label)


ZERO_MEANS_OFF = {"keepalive_s", "min_window_s", "settle_s"}  # 0: no keepalive, no minimum window, no settle time


def check_bounds(obj, label: str, prefix: str = "") -> None:
    """Every timeout/interval (a field named *_s) is a finite number of seconds > 0, every
    *retries count >= 0, every port in 1..65535: a wait must have a bound, and 0 or a
    negative value is a typo, never "no wait"."""
    import math

    for f in dataclasses.fields(obj):
        v, key = getattr(obj, f.name), f"{prefix}{f.name}"
        if dataclasses.is_dataclass(v):
            check_bounds(v, label, key + ".")
        elif isinstance(v, dict):
            for k, item in v.items():
                if dataclasses.is_dataclass(item):
                    check_bounds(item, label, f"{key}.{k}.")
        elif isinstance(v, list):
            for i, item in enumerate(v):
                if dataclasses.is_dataclass(item):
                    check_bounds(item, label, f"{key}[{i}].")
        elif v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        elif f.name.endswith("_s"):
            low_ok = f.name in ZERO_MEANS_OFF and v == 0
            if not math.isfinite(v) or (v <= 0 and not low_ok):
                raise ConfigError(label, key, f"must be a finite number of seconds > 0{' (or 0: off)' if f.name in ZERO_MEANS_OFF else ''}, got {v:g}")
        elif f.name.endswith("retries") and v < 0:
            raise ConfigError(label, key, f"must be 0 or more, got {v}")
        elif f.name == "port" and not 1 <= v <= 65535:
            raise ConfigError(label, key, f"not a TCP port (1..65535): {v}")


# --------------------------------------------------------------------------- dataclass decoding


def _type_name(tp) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is list:
        return f"list of {_type_name(typing.get_args(tp)[0])}"
    if origin is dict:
        return f"mapping of {_type_name(typing.get_args(tp)[1])}"
    if tp is type(None):
        return "null"
    if dataclasses.is_dataclass(tp):
        return "mapping"
    return getattr(tp, "__name__", str(tp))


def decode_value(tp, value, label: str, key: str):
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return decode_value(a, value, label, key)
            except ConfigError as e:
                errors.append(e)
        raise errors[0] if len(errors) == 1 else ConfigError(label, key, f"expected {_type_name(tp)}, got {_describe(value)}")
    if origin is Literal:
        if value not in typing.get_args(tp):
            raise ConfigError(label, key, f"must be one of {_type_name(tp)}, got {value!r}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(label, key, f"expected {_type_name(tp)}, got {_describe(value)}")
        (item,) = typing.get_args(tp)
        return [decode_value(item, v, label, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(label, key, f"expected {_type_name(tp)}, got {_describe(value)}")
        _, vt = typing.get_args(tp)
        return {str(k): decode_value(vt, v, label, f"{key}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, label, key)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(label, key, f"expected a number, got {_describe(value)}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(label, key, f"expected an integer, got {_describe(value)}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(label, key, f"expected true or false, got {_describe(value)}")
        return value
    if tp is str:
        if isinstance(value, bool) or value is None or isinstance(value, (list, dict)):
            raise ConfigError(label, key, f"expected a string, got {_describe(value)}")
        return str(value)  # numbers like 121 are fine as strings
    if tp is Any:
        return value
    raise ConfigError(label, key, f"unsupported type {tp}")


def _describe(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {value}"
    if isinstance(value, (int, float)):
        return f"number {value}"
    if isinstance(value, str):
        return f"string {value!r}" if len(value) < 40 else "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


# keys that changed name or meaning: a file that still uses one gets the reason, not "unknown key"
RENAMED = {
    (LockConfig, "docker_filter"): "renamed to docker_busy_only_matching: by default ANY running container makes the GPU busy "
    "(the users' harness); set docker_busy_only_matching only to relax that to matching containers",
}


def from_dict(cls, data, label: str, prefix: str = ""):
    if not isinstance(data, dict):
        raise ConfigError(label, prefix, f"expected a mapping, got {_describe(data)}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for k, v in data.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if (cls, k) in RENAMED:
            raise ConfigError(label, key, RENAMED[(cls, k)])
        if k not in fields or k == "source_file":
            import difflib

            close = difflib.get_close_matches(str(k), [n for n in fields if n != "source_file"], n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigError(label, key, f"unknown key{hint}")
        kwargs[k] = decode_value(hints[k], v, label, key)
    for name, f in fields.items():
        if name not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(label, f"{prefix}.{name}" if prefix else name, "required key is missing")
    return cls(**kwargs)
