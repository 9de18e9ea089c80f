"""The llama kind: llama.cpp built by parity from a source (+ a patch series), or prebuilt
binaries; llama-server serves it, its tools (llama-completion, llama-batched-bench,
test-backend-ops, llama-perplexity) run the gates and the static bench."""

from __future__ import annotations

import os
import re

import msgspec

from parity.llamacpp import build
from parity.engines.base import ContextNeed, EngineKind, EngineSection, Launch, engine_env
from parity.errors import ConfigError
from parity.gguf.header import context_length
from parity.metrics.prometheus import Series

DEFAULT_TARGETS = ["llama-server", "llama-completion", "llama-batched-bench", "llama-perplexity", "test-backend-ops"]
CUDA_ARCHS = re.compile(r"\s*[0-9]{2,3}[a-z]?(-real|-virtual)?(\s*;\s*[0-9]{2,3}[a-z]?(-real|-virtual)?)*\s*")

# llama-server --metrics: prompt_tokens_total excludes cached tokens, so the prompt total is
# prompt + cached, and the prefix-cache queries are that total; a build without the cached
# counter (the users' pin 0ed235ea) counts only the prompt tokens it computed
FAMILY = Series(
    prompt_tokens=("llamacpp:prompt_tokens_total",),
    prompt_cached="llamacpp:prompt_tokens_cached_total",
    generation_tokens=("llamacpp:tokens_predicted_total",),
    prefix_queries=("llamacpp:prompt_tokens_total", "llamacpp:prompt_tokens_cached_total"),
    prefix_hits=("llamacpp:prompt_tokens_cached_total",),
    # "Number of prompt tokens processed, excluding cached tokens": the reuse a build without the cached counter did
    prompt_computed="llamacpp:prompt_tokens_total",
)
STREAM_TIMINGS = {"timings_per_token": True}  # timings.predicted_n in every chunk: its token count as it streams
# each log line with the server's clock, at trace level: a task's slot selection, prompt cache and
# prompt start (parity.ttft.llama_log)
TRACE_LOG = ["--log-prefix", "--log-timestamps", "--log-verbosity", "4"]


class LlamaSection(EngineSection):
    kind: str = "llama"
    source: str | None = None  # a name under `sources`
    series: str | None = None  # directory of NNNN-*.patch files; "auto" = the localai source's patches/paged; None = stock
    expected_tree: str | None = None  # mirror invariant: git tree after the series (a constant; prefer fork)
    fork: str | None = None  # mirror invariant: a checkout of the fork branch the series mirrors (its fork_ref tree)
    fork_ref: str = "HEAD"
    # a variant of the series (a build lever's arm, a bisection probe): patches numbered <= series_until,
    # none of series_without; the mirror invariant is not checked for a variant
    series_until: str | None = None
    series_without: list[str] = msgspec.field(default_factory=list)
    cuda_archs: str | None = None  # "121", "121a", "90;121a"; None = CPU build
    cmake_flags: list[str] = msgspec.field(default_factory=list)
    targets: list[str] = msgspec.field(default_factory=lambda: list(DEFAULT_TARGETS))
    bin_dir: str | None = None  # use prebuilt binaries instead of building
    paths: dict[str, dict[str, str]] = msgspec.field(default_factory=dict)  # path name -> extra env
    default_path: str | None = None
    server_args: list[str] = msgspec.field(default_factory=list)


KV_UNIFIED, KV_PER_SLOT = ("-kvu", "--kv-unified"), ("-no-kvu", "--no-kv-unified")


class Llama(EngineKind):
    name = "llama"
    section = LlamaSection
    binary_gates = True
    variants = True
    model_source = "gguf"
    family = FAMILY

    def validate(self, eng, label: str) -> None:
        e, name, profile = eng.section, eng.name, eng.profile
        if e.source is not None and e.source not in profile.sources:
            raise ConfigError(label, f"engines.{name}.source", f"unknown source {e.source!r} (known: {', '.join(profile.sources) or 'none'})")
        if e.source is None and e.bin_dir is None:
            raise ConfigError(label, f"engines.{name}", "a llama engine needs a source (to build) or a bin_dir (prebuilt)")
        if e.default_path is not None and e.paths and e.default_path not in e.paths:
            raise ConfigError(label, f"engines.{name}.default_path", f"{e.default_path!r} is not one of its paths ({', '.join(e.paths)})")
        if e.cuda_archs is not None and not CUDA_ARCHS.fullmatch(e.cuda_archs):
            raise ConfigError(label, f"engines.{name}.cuda_archs", f"not a CUDA architecture list like '121' or '90;121a': {e.cuda_archs!r}")

    def expand_paths(self, e: LlamaSection, expand) -> None:
        if e.series not in (None, "auto"):
            e.series = expand(e.series)
        e.bin_dir = expand(e.bin_dir)
        e.fork = expand(e.fork)

    # ---- preparation ----------------------------------------------------------------------
    def provision(self, eng, runner, out) -> dict:
        if eng.section.bin_dir:
            return {"engine": eng.name, "prebuilt": eng.section.bin_dir}
        r = build.ensure_built(eng, runner, out)
        return {"key": r.key, "bin_dir": str(r.bin_dir), "cached": r.cached}

    def provenance(self, eng, runner, out) -> dict:
        if eng.section.bin_dir:
            return {"engine": eng.name, "prebuilt": eng.section.bin_dir}
        return build.ensure_built(eng, runner, out).provenance

    def dry_paths(self, eng, runner) -> dict[str, str]:
        targets = eng.section.targets
        return {f"{targets[0]} of {eng.name}": build.dry_tool_path(eng, targets[0], runner, None)} if targets else {}

    def tool_path(self, eng, tool: str, runner, out, dry: bool = False) -> str:
        return (build.dry_tool_path if dry else build.tool_path)(eng, tool, runner, out)

    # ---- serving ------------------------------------------------------------------------
    def env(self, eng, path: str | None = None) -> dict[str, str]:
        """The engine's env plus its path's (e.g. LLAMA_KV_PAGED=1 for the paged path)."""
        return engine_env(eng, path)

    def local_model_file(self, eng, model: str) -> str | None:
        m = eng.profile.models.get(model)
        return m.path if m is not None and m.path and os.path.isfile(m.path) else None

    def launch(self, eng, model_file, port, shape, path=None, dry=False, model=None, out=None) -> Launch:
        e, s = eng.section, shape
        argv = [self.tool_path(eng, "llama-server", None, out, dry), "-m", model_file, "-c", str(s.ctx), "--parallel", str(s.parallel), "-b", str(s.batch), "-ub", str(s.ubatch)]
        argv += TRACE_LOG if getattr(s, "server_log_trace", False) else []
        argv += [*s.server_args, *e.server_args, "--host", "127.0.0.1", "--port", str(port), "--no-webui", "--metrics"]
        return Launch(argv, self.env(eng, path), [], "/health", os.path.basename(model_file), "content", metrics_path="/metrics", engine=eng.name, kind=self.name,
                      count="timings", request_extra=dict(STREAM_TIMINGS), props_path="/props", family=self.family, port=port)  # fmt: skip

    def context_need(self, eng, shape, model_file=None) -> ContextNeed:
        """-c is split across --parallel slots (with -kvu one buffer: a request may fill it, the requests
        running at once share it: llama_context's n_ctx_seq), and llama-server caps a slot at the model's
        training context."""
        shared = kv_unified(eng.section, shape)
        per_slot = shape.ctx if shared else shape.ctx // max(1, shape.parallel)
        how = f"-c {shape.ctx}, one KV buffer every slot shares (-kvu)" if shared else f"-c {shape.ctx} / --parallel {shape.parallel}"
        train = context_length(model_file) if model_file else None
        if train and train < per_slot:
            return ContextNeed(train, f"the model's training context ({train}; llama-server caps each slot there, {how} would give {per_slot})")
        return ContextNeed(per_slot, f"{how} (raise serving.ctx / --ctx{'' if shared else ', or lower --parallel'})")

    def queue_limit(self, e, shape) -> int | None:
        return shape.parallel

    def load_caveats(self, eng, shape) -> list[str]:
        e = eng.section
        # llama.cpp splits a step into one ubatch per run of consecutive slot ids when each slot has its own KV
        # stream, and least-recently-used slot choice scatters them as a server ages (docs/CAPACITY.md)
        if shape.parallel > 1 and not kv_unified(e, shape):
            return [f"a KV stream per slot (--parallel {shape.parallel} without -kvu): its steps split per run of "
                    "neighbouring slots, so its step time can grow as the slots scatter over the run"]
        if kv_unified(e, shape) and self.env(eng).get("LLAMA_KV_PAGED") == "1":
            # docs/evidence/device-h200x2-1130/: one run, 16 warm-up prompts, SIGSEGV as their decode began
            return ["the paged KV (its default path sets LLAMA_KV_PAGED=1) with one KV buffer (-kvu): a paged llama-server crashed (SIGSEGV) on its first "
                    "decode so (H200, 2026-11-30); its users serve it with kv_unified:false"]
        return []

    def on_gpu(self, e: LlamaSection) -> bool:
        return bool(e.cuda_archs)


def kv_unified(e, shape) -> bool:
    """Whether the server runs one KV buffer for every slot: -kvu / -no-kvu in its arguments, the last
    one winning as in llama.cpp's parser (neither: a stream per slot, llama-server's default with --parallel)."""
    said = [a for a in (*shape.server_args, *e.server_args) if a in KV_UNIFIED + KV_PER_SLOT]
    return bool(said) and said[-1] in KV_UNIFIED


KIND = Llama()
