"""The endpoint kind: an OpenAI-compatible server that parity neither builds nor starts (a
vLLM, SGLang or TensorRT-LLM server that already runs on the GPU box): a base URL, optional
start and stop commands and a readiness path.  Build provenance, the binary gates and memory
per process do not apply to it and are reported so."""

from __future__ import annotations

import copy
import os
import re
import shlex
from typing import Any, Literal

import msgspec

from parity.engines import llama, vllm
from parity.engines.base import ContextNeed, DoctorRow, EngineKind, EngineSection, Launch, served_name
from parity.engines.server import answering
from parity import redact
from parity.errors import ConfigError
from parity.metrics.prometheus import Series

BASE_URL = re.compile(r"http://(?P<host>[A-Za-z0-9.\-]+|\[[0-9a-fA-F:]+\]):(?P<port>[0-9]{1,5})/?")


class EndpointSection(EngineSection):
    kind: str = "endpoint"
    base_url: str = ""  # http://HOST:PORT of the running server (parity's client speaks plain HTTP)
    model: str | None = None  # the model name it serves (default: the profile model's served_name, else its name)
    start: str | None = None  # a shell command that starts it (run once per arm, stopped after); null: it already runs
    stop: str | None = None  # a shell command that stops it (after each arm); null: nothing
    ready_path: str = "/health"
    models_path: str | None = "/v1/models"  # GET once ready: the served model must be listed (null: not checked)
    metrics_path: str | None = "/metrics"  # Prometheus text scraped around each point (null: none)
    metrics: Literal["vllm", "llama", "none"] = "vllm"  # whose /metrics names it speaks (reconciliation, engine clock)
    tokenize: Literal["prompt", "content"] = "prompt"  # /tokenize wire format: prompt ({model, prompt}: vLLM, SGLang), content ({content}: llama-server)
    count: Literal["usage", "chunks", "timings"] = "usage"  # how its stream tells tokens per chunk
    max_model_len: int | None = None  # tokens one request may use (prompt + generated); null: not known
    gpu: bool = False  # it runs on a GPU (sizes the built-in workloads)
    request_extra: dict[str, Any] = msgspec.field(default_factory=dict)  # fields added to every completion request (over what `count` needs)
    probe_extra: dict[str, Any] | None = None  # fields the output-parity probe adds (null: what its `metrics` server needs; vllm: token ids as logprob keys)


def address(e: EndpointSection) -> tuple[str, int]:
    m = BASE_URL.fullmatch(e.base_url)
    return m.group("host").strip("[]"), int(m.group("port"))


DIALECTS = {"vllm": vllm.FAMILY, "llama": llama.FAMILY, "none": Series()}  # whose /metrics names an endpoint speaks
PROBES = {"vllm": vllm.PROBE_EXTRA, "llama": {}, "none": {}}  # what that server needs to key the probe's logprobs by token id
COUNT_REQUEST = {"usage": vllm.STREAM_USAGE, "timings": llama.STREAM_TIMINGS, "chunks": {}}  # what each stream count asks of the request


class Endpoint(EngineKind):
    name = "endpoint"
    section = EndpointSection
    profiled_serving = False

    def validate(self, eng, label: str) -> None:
        e, name = eng.section, eng.name
        key = f"engines.{name}.base_url"
        if not e.base_url:
            raise ConfigError(label, key, "required: the http://HOST:PORT of the running server")
        if e.base_url.startswith("https://"):
            raise ConfigError(label, key, f"https is not supported: parity's client speaks plain HTTP (a plain-HTTP port or a local proxy in front of it), got {redact.url(e.base_url)!r}")
        if redact.url(e.base_url) != e.base_url:
            raise ConfigError(label, key, "credentials in the URL are not supported (parity's client sends none): "
                                          f"give http://HOST:PORT, got {redact.url(e.base_url)!r}")  # fmt: skip
        m = BASE_URL.fullmatch(e.base_url)
        if not m and BASE_URL.match(e.base_url):
            raise ConfigError(label, key, f"give the server's root, http://HOST:PORT: parity adds /v1/completions, /tokenize and /metrics itself, got {redact.url(e.base_url)!r}")
        if not m or not 1 <= int(m.group("port")) <= 65535:
            raise ConfigError(label, key, f"must be http://HOST:PORT (plain HTTP, a port 1..65535), got {redact.url(e.base_url)!r}")
        for key in ("start", "stop"):
            cmd = getattr(e, key)
            if cmd is not None:
                try:
                    if not shlex.split(cmd):
                        raise ValueError("it is empty")
                except ValueError as err:
                    raise ConfigError(label, f"engines.{name}.{key}", f"not a command line ({err}): {cmd!r}") from None
        for key in ("ready_path", "models_path", "metrics_path"):
            v = getattr(e, key)
            if v is not None and not v.startswith("/"):
                raise ConfigError(label, f"engines.{name}.{key}", f"must be a path starting with /, got {v!r}")
        if e.max_model_len is not None and e.max_model_len <= 0:
            raise ConfigError(label, f"engines.{name}.max_model_len", "must be a positive number of tokens (or null: not known)")

    def binary_gates_note(self) -> str:
        return "not applicable: parity runs no binary of an endpoint"

    def provenance(self, eng, runner, out) -> dict:
        return {"engine": eng.name, "kind": self.name, "base_url": redact.url(eng.section.base_url),
                "build": "not applicable: parity neither builds nor starts an endpoint"}

    def provenance_cells(self, row: dict) -> dict:
        na = "not applicable"
        return {"source": f"endpoint {row.get('base_url', '?')} (not built or started by parity)", "series": na, "tree": na, "flags": na, "cuda_archs": na, "bin": na, "key": na}

    def provenance_identity(self, row: dict) -> tuple[str, str] | None:
        return ("endpoint", row.get("base_url"))

    def dry_paths(self, eng, runner) -> dict[str, str]:
        """The executables of its start and stop commands (the only programs parity runs for it)."""
        e, name = eng.section, eng.name
        out = {}
        for key in ("start", "stop"):
            cmd = getattr(e, key)
            if cmd:
                exe = os.path.expanduser(shlex.split(cmd)[0])
                out[f"{key} command of {name}"] = exe if "/" in exe else (runner.which(exe) or f"<{exe}: not on PATH (engines.{name}.{key})>")
        return out

    def doctor(self, eng, runner) -> list:
        """Whether it answers its readiness path now (parity neither builds nor starts it)."""
        e, name = eng.section, eng.name
        host, port = address(e)
        url = f"http://{host}:{port}{e.ready_path}"
        said = answering(self.launch(eng, "", port, eng.profile.serving), e.ready_probe_timeout_s)
        if said == "HTTP 200":
            return [DoctorRow("ok", f"{name}: {url} answers (HTTP 200); build and memory per process: not applicable (parity neither builds nor starts it)")]
        if e.start:
            return [DoctorRow("degraded", f"{name}: {url} does not answer now ({said})", f"engines.{name}.start starts it before each arm")]
        return [DoctorRow("missing", f"{name}: {url} does not answer ({said})", f"a run with engine {name} fails at readiness: start the server, or give engines.{name}.start")]

    def model_file(self, eng, model: str) -> str:
        return eng.section.model or served_name(eng.profile, model, model)

    def launch(self, eng, model_file, port, shape, path=None, dry=False, model=None, out=None) -> Launch:
        e = eng.section
        host, eport = address(e)
        extra = {**copy.deepcopy(COUNT_REQUEST[e.count]), **e.request_extra}
        probe = dict(PROBES[e.metrics] if e.probe_extra is None else e.probe_extra)
        return Launch([], dict(e.env), [], e.ready_path, e.model or served_name(eng.profile, model, model_file), e.tokenize, e.models_path, e.metrics_path,
                      engine=eng.name, kind=self.name, count=e.count, request_extra=extra, probe_extra=probe, family=DIALECTS[e.metrics], host=host, port=eport,
                      start=shlex.split(e.start) if e.start else [], stop=shlex.split(e.stop) if e.stop else [], spawned=False)  # fmt: skip

    def context_need(self, eng, shape, model_file=None) -> ContextNeed:
        e = eng.section
        if e.max_model_len is None:
            return ContextNeed(None, f"engines.{eng.name}.max_model_len is not set (the endpoint's own limit is not known)")
        return ContextNeed(e.max_model_len, f"engines.{eng.name}.max_model_len {e.max_model_len}")

    def on_gpu(self, e: EndpointSection) -> bool:
        return e.gpu


KIND = Endpoint()
