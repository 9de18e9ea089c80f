"""Value checks shared by every option, flag and campaign step: one meaning, one message."""

from __future__ import annotations

import math
from dataclasses import dataclass

from parity.errors import ConfigError, UsageError


def positive_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def positive_seconds(value, name: str) -> float:
    """A CLI/step timeout: a finite number of seconds > 0 (else a one-line UsageError naming it)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{name} {value!r}: not a number of seconds") from None
    if not math.isfinite(v) or v <= 0:
        raise UsageError(f"{name} {value!r}: must be a finite number of seconds > 0")
    return v


def check_step_options(kind: str, options: dict, known: set[str]) -> None:
    """A campaign step's `with:` names only options its kind knows (typos fail before anything runs)."""
    bad = set(options) - known
    if bad:
        raise ConfigError("campaign", f"with.{sorted(bad)[0]}", f"unknown {kind} option (known: {', '.join(sorted(known))})")


# --------------------------------------------------------------------------- declared once
# The options several commands share: each declared once (flag, what it takes, help, the profile
# field it overrides); the CLI's flags (parity.cli.common.flag), the requests' checks and the
# campaign steps (the same field names under `with:`) all read these.


@dataclass(frozen=True)
class Option:
    name: str  # the request field and the campaign step's key
    flag: str
    takes: str  # "count" (a positive integer), "pct" (a positive %, or METRIC=PCT,...), "seconds", "choice", or
    # "text" (checked where it is used: op names, a backend, a regex)
    help: str
    metavar: str | None = None
    profile: str | None = None  # the profile field it overrides (None: the command's own default)
    choices: tuple[str, ...] = ()

    def check(self, value):
        """The value, checked (None: not given); bad input is one UsageError naming the flag."""
        if value is None:
            return None
        if self.takes == "count":
            if not positive_int(value):
                raise UsageError(f"{self.flag} must be a positive integer, got {value!r}")
        elif self.takes == "seconds":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise UsageError(f"{self.flag} must be a positive number, got {value!r}")
        elif self.takes == "pct":
            parse_until_ci(value, self.flag)
        elif self.takes == "choice":
            if value not in self.choices:
                raise UsageError(f"{self.flag} must be {', '.join(self.choices[:-1])} or {self.choices[-1]}, got {value!r}")
        return value


OPTIONS: dict[str, Option] = {
    o.name: o
    for o in (
        Option("repeat", "--repeat", "count", "Blocks (a block runs every engine or arm once); with --until-ci the minimum.", "N", "serving.repeat"),
        Option("until_ci", "--until-ci", "pct", "Adaptive repeats: add blocks until every headline paired half-width (every engine vs the reference, every point) is <= PCT %, or each named metric's <= its own (decode_agg_tps=1,ttft_mean_ms=10; PCT,METRIC=PCT: PCT for the others; batched-bench watches s_tg; a trace replay: its request-paired ratios, request_ttft_median=2,..., or its headline, ttft_sched_p50_ms=2).", "PCT|METRIC=PCT,..", "stats.until_ci_pct"),
        Option("max_repeats", "--max-repeats", "count", "With --until-ci: at most N blocks.", "N", "stats.max_repeats"),
        Option("budget_s", "--budget-s", "seconds", "With --until-ci: no block that would end past S seconds of measured blocks.", "S", "stats.budget_s"),
        Option("order", "--order", "choice", "Engine order across blocks: abba (rotated every block: a linear drift cancels), abab, or aabb (every repeat of one engine, then the next; serving only).", "ORDER", "serving.order", ("abab", "abba", "aabb")),
        Option("ops", "--ops", "text", "Focused op timing instead of llama-batched-bench: test-backend-ops perf -o OP"
               " on each arm in paired blocks; B/A of the time per run per case and per op.", "OP[,OP]"),
        Option("ops_backend", "--ops-backend", "text",
               "With --ops: test-backend-ops -b, a backend such as CPU or CUDA0.",
               "NAME", "gates.op_backend"),
        Option("ops_params", "--ops-params", "text",
               "With --ops: test-backend-ops -p REGEX, only the cases whose parameters match.", "REGEX"),
    )
}


def check(**values) -> None:
    """Check the declared options given by field name, e.g. check(until_ci=-1) (UsageError)."""
    for name, value in values.items():
        OPTIONS[name].check(value)


def parse_until_ci(value, name: str = "--until-ci") -> tuple[float | None, dict]:
    """(the target of every headline metric, {metric: its own target}) from 1.5, "1.5",
    "decode_agg_tps=1,ttft_mean_ms=10" (those metrics only), "2,ttft_mean_ms=10" (2 % for the
    others) or a profile's mapping {metric: pct} ("*": the others).  Bad input: UsageError."""

    def pct(v, what):
        try:
            x = float(v) if not isinstance(v, bool) else math.nan
        except (TypeError, ValueError):
            x = math.nan
        if not (math.isfinite(x) and x > 0):
            raise UsageError(f"{name} must be a positive number, got {what!r}" if what is value else f"{name}: {what!r} is not a positive percentage")
        return x

    if value is None:
        return None, {}
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return pct(value, value), {}
    items = list(value.items()) if isinstance(value, dict) else [part.partition("=")[::2] if "=" in part else ("*", part) for part in str(value).split(",") if part.strip()]
    if not items:
        raise UsageError(f"{name} must be a positive number or METRIC=PCT,..., got {value!r}")
    default, per = None, {}
    for k, v in items:
        k = str(k).strip()
        if k == "*":
            default = pct(v, value if len(items) == 1 and not isinstance(value, dict) else f"{v}")
        elif not k.replace("_", "").isalnum():
            raise UsageError(f"{name}: {k!r} is not a metric name (METRIC=PCT,...)")
        else:
            per[k] = pct(v, f"{k}={v}")
    return default, per
