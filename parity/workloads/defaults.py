"""Every workload kind by name, on every profile: `parity snapshot --workload shared-prefix`
needs no YAML.  Each built-in is sized from the profile's serving shape (the context one request
gets, --parallel, gen and ptok) and from whether its engines run on a GPU; a CPU smoke run of
one finishes in a couple of minutes.  Overrides, field by field: serving.workloads.<kind> in
YAML (only the keys written there), then `--workload-opt KEY=VALUE` on the command line."""

from __future__ import annotations

from parity.decode import decode_value, record_fields, type_hints
from parity.engines.bound import bind
from parity.errors import ConfigError, UsageError
from parity.workloads import WORKLOADS
from parity.workloads.spec import BUILTIN, WorkloadConfig  # noqa: F401 (BUILTIN re-exported)
from parity.yamlload import safe_load


def request_context(profile, s) -> int:
    """Tokens the tightest engine gives one request, as each kind says (llama-server -c / --parallel,
    vLLM max_model_len); an engine that does not say counts as -c / --parallel."""
    limits = [bind(profile, e).context_need(s).tokens or s.ctx // max(1, s.parallel) for e in s.engines]
    return min(limits) if limits else s.ctx // max(1, s.parallel)


def on_gpu(profile, s) -> bool:
    return bool(profile.hardware_class) or any(bind(profile, e).on_gpu for e in s.engines)


def sized(kind: str, profile, s) -> dict:
    """The built-in's fields for this profile (only the ones it sizes; the rest keep their defaults):
    as its kind sizes them from the context a request gets, --parallel and whether it runs on a GPU."""
    # gen: long enough for a decode window of serving.min_window_s on the profile's machine
    # (the profile's own gen, sized for its sweep), within the context a request gets
    return WORKLOADS[kind].sized(on_gpu(profile, s), request_context(profile, s), max(1, s.parallel), s)


def builtin(kind: str, profile, s, declared=None, options: dict | None = None):
    """WorkloadConfig of the built-in `kind`: sized(), then the keys the YAML wrote
    (declared._given), then the command line's (options)."""

    fields = {"kind": kind, "description": f"built in: {kind}, sized for profile {profile.name}", **sized(kind, profile, s)}
    if declared is not None:
        fields.update({k: getattr(declared, k) for k in getattr(declared, "_given", ()) if k != "kind"})
    fields.update(options or {})
    return WorkloadConfig(**fields)


def parse_options(items: list[str]) -> dict:
    """--workload-opt KEY=VALUE (VALUE read as YAML: 4, 0.5, [1, 2], null) -> {key: typed value};
    a bad key or value is a UsageError naming it."""
    import yaml

    hints = type_hints(WorkloadConfig)
    names = [n for n in record_fields(WorkloadConfig) if n not in ("kind", "description")]
    out = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise UsageError(f"--workload-opt {item!r}: expected KEY=VALUE")
        if key not in names:
            import difflib

            close = difflib.get_close_matches(key, names, n=1)
            raise UsageError(f"--workload-opt {key}: unknown workload key{f' (did you mean {close[0]}?)' if close else ''}")
        try:
            out[key] = decode_value(hints[key], safe_load(raw), "--workload-opt", key)
        except (ConfigError, yaml.YAMLError) as e:
            raise UsageError(f"--workload-opt {item}: {e}") from None
    return out
