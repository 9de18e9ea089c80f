"""The gates section's checks (config.GatesConfig, its kl: too): the models and engines it names,
the completion context, the KL bounds."""

from __future__ import annotations

from parity.engines import ENGINES
from parity.errors import ConfigError


def check_gates(g, label: str, key: str, models, engines) -> None:
    """`models`: the profile's model names; `engines`: its engine sections by name (a gate engine's
    kind must run the gates' binaries)."""
    if g.ctx is not None and g.ctx <= 0:
        raise ConfigError(label, f"{key}.ctx", "must be a positive number of tokens")
    if g.ctx is not None and {"-c", "--ctx-size"} & set(g.completion_args):
        raise ConfigError(label, f"{key}.completion_args", "sets the context size too: give it once, as gates.ctx")
    for m in g.models:
        if m not in models:
            raise ConfigError(label, f"{key}.models", f"unknown model {m!r}")
    for name in ("engine", "reference_engine"):
        val = getattr(g, name)
        if val and val not in engines:
            raise ConfigError(label, f"{key}.{name}", f"unknown engine {val!r}")
        if val and (note := ENGINES[engines[val].kind].binary_gates_note()):
            raise ConfigError(label, f"{key}.{name}", f"engine {val}: the gates run an engine's own binaries, {note}")
    check_kl(g.kl, label, f"{key}.kl", models)


def check_kl(kl, label: str, key: str, models) -> None:
    """gates.kl (config.KLConfig): the models it compares and its bounds."""
    for name in ("reference", "baseline", "candidate"):
        val = getattr(kl, name)
        if val and val not in models:
            raise ConfigError(label, f"{key}.{name}", f"unknown model {val!r}")
    if kl.min_same_top_p is not None and not 0 <= kl.min_same_top_p <= 100:
        raise ConfigError(label, f"{key}.min_same_top_p", "must be a percentage from 0 to 100 (or null: no bound)")
    if kl.same_top_p_slack is not None and not kl.same_top_p_slack >= 0:
        raise ConfigError(label, f"{key}.same_top_p_slack", "must be 0 or more percentage points (or null)")
    if kl.ctx < 2 or kl.chunks < 1:
        raise ConfigError(label, key, "ctx must be at least 2 tokens and chunks at least 1")
    if kl.on_md5_change and not (kl.reference and kl.candidate):
        raise ConfigError(label, f"{key}.on_md5_change", "needs gates.kl.reference and gates.kl.candidate")
