"""The four workload kinds by name, on every profile: `parity snapshot --workload shared-prefix`
needs no YAML.  Each built-in is sized from the profile's serving shape (the context one request
gets, --parallel, gen and ptok) and from whether its engines run on a GPU; a CPU smoke run of
one finishes in a couple of minutes.  Overrides, field by field: serving.workloads.<kind> in
YAML (only the keys written there), then `--workload-opt KEY=VALUE` on the command line."""

from __future__ import annotations

from parity.engines import kind_of

from parity.workloads.spec import BUILTIN  # noqa: F401 (re-exported)
from parity.decode import decode_value
from parity.errors import ConfigError, UsageError
from parity.workloads.spec import WorkloadConfig
from parity.yamlload import safe_load
HISTORY_MARGIN = 1.5  # multi-turn resends responses as text, tokenized again: a history may take more tokens than it had


def request_context(profile, s) -> int:
    """Tokens the tightest engine gives one request, as each kind says (llama-server -c / --parallel,
    vLLM max_model_len); an engine that does not say counts as -c / --parallel."""
    limits = [kind_of(profile, e).context_need(profile, e, s).tokens or s.ctx // max(1, s.parallel) for e in s.engines]
    return min(limits) if limits else s.ctx // max(1, s.parallel)


def on_gpu(profile, s) -> bool:
    return bool(profile.hardware_class) or any(kind_of(profile, e).on_gpu(profile.engine(e)) for e in s.engines)


def sized(kind: str, profile, s) -> dict:
    """The built-in's fields for this profile (only the ones it sizes; the rest keep their defaults)."""
    gpu, slot, par = on_gpu(profile, s), request_context(profile, s), max(1, s.parallel)
    # gen: long enough for a decode window of serving.min_window_s on the profile's machine
    # (the profile's own gen, sized for its sweep), within the context a request gets
    if kind == "shared-prefix":
        groups, suffix = (4, 32) if gpu else (2, 16)
        prefix = max(16, min(512 if gpu else 128, slot // 4))
        return {"groups": groups, "group_size": max(1, min(8 if gpu else 2, par // groups)), "suffix_tokens": suffix,
                "prefix_tokens": prefix, "gen": max(8, min(s.gen, slot - prefix - suffix))}  # fmt: skip
    if kind == "prefill-under-decode":
        streams = max(1, min(4 if gpu else 2, par - 1))
        gen, ptok = min(s.gen, 64 if gpu else 32), min(s.ptok, 64)
        return {"decode_streams": streams, "long_prompts": max(1, min(2, par - streams)), "gen": gen, "ptok": ptok,
                "decode_gen": max(32, min(256 if gpu else 384, slot - ptok)), "long_ptok": max(32, min(1024 if gpu else 320, slot - gen)),
                "long_every_s": 1.0 if gpu else 0.5}  # fmt: skip
    if kind == "open-loop":
        gen = max(8, min(s.gen, slot // 2))
        # on a CPU box the servers share the client's cores (vLLM's worker keeps one busy): a send
        # can wait hundreds of ms there (461 ms p99 seen at 1 req/s on 2 cores); still recorded per point
        return {"rates": [1.0, 2.0, 4.0] if gpu else [0.5, 1.0], "requests_per_rate": 32 if gpu else 8, "gen": gen, "ptok": max(8, min(s.ptok, slot - gen)),
                **({} if gpu else {"max_delay_p99_ms": 1000.0})}  # fmt: skip
    if kind == "multi-turn":  # the history is resent as text and tokenized again: half the context is margin
        turns = 4 if gpu else 2
        gen = max(8, min(s.gen, int(slot / (HISTORY_MARGIN * turns)) - 8))
        return {"conversations": max(1, min(4 if gpu else 2, par)), "turns": turns, "gen": gen,
                "turn_tokens": max(8, min(64, slot // (2 * turns) - gen))}  # fmt: skip
    raise KeyError(kind)


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
    import dataclasses
    import typing

    import yaml

    hints = typing.get_type_hints(WorkloadConfig)
    names = [f.name for f in dataclasses.fields(WorkloadConfig) if f.name not in ("kind", "description")]
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
