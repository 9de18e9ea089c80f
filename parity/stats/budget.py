"""The stop rule's budget (adaptive.Budget) from a command's flags and the profile's stats
defaults: one resolution for the serving snapshot, capacity, the batched-bench A/B and the op
timing.  Each command passes what its rule watches and the wording of its own refusals; every
bad value is one UsageError."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from parity.errors import UsageError
from parity.options import check as check_options
from parity.options import parse_until_ci
from parity.stats.adaptive import Budget


@dataclass(frozen=True)
class StatsDefaults:
    """What the budget reads of the profile's stats section."""

    until_ci_pct: float | None = None
    until_ci_targets: dict = field(default_factory=dict)
    max_repeats: int = Budget.max_blocks
    budget_s: float | None = None

    @classmethod
    def of(cls, stats) -> StatsDefaults:
        """From a StatsConfig (or any object with some of its fields: the others take these defaults)."""
        return cls(getattr(stats, "until_ci_pct", None), dict(getattr(stats, "until_ci_targets", None) or {}),
                   getattr(stats, "max_repeats", None) or Budget.max_blocks, getattr(stats, "budget_s", None))


def resolve_budget(until_ci, max_repeats, budget_s, repeat: int, defaults: StatsDefaults, *, watched: Collection[str],
            unwatched: str, too_few: str, one: bool = False, use_defaults: bool = True, floor: int = 1,
            lone_bounds: str | None = None, refusals: Sequence[str] = ()) -> Budget:
    """Fixed: `repeat` blocks.  Adaptive (--until-ci, or the profile's target where use_defaults):
    at least max(repeat, floor) blocks, at most --max-repeats (stats.max_repeats), within --budget-s
    (stats.budget_s).
    watched: the metrics a target may name (else `unwatched`, formatted with metric= and value=);
    one: the rule watches its one metric, METRIC=PCT is its PCT (a profile's other targets are another
    command's); lone_bounds: the word for blocks in the refusal of --max-repeats / --budget-s without
    a target (None: they are ignored); refusals: why this request cannot add blocks (the first is
    raised when it would); too_few: formatted with lo= and hi= when --max-repeats is below the minimum."""
    check_options(max_repeats=max_repeats, budget_s=budget_s, until_ci=until_ci)
    if until_ci is not None:
        pct, targets = parse_until_ci(until_ci)
    elif use_defaults:
        pct, targets = defaults.until_ci_pct, dict(defaults.until_ci_targets)
        targets = {m: v for m, v in targets.items() if m in watched} if one else targets
    else:
        pct, targets = None, {}
    if unknown := sorted(set(targets) - set(watched)):
        raise UsageError(unwatched.format(metric=unknown[0], value=until_ci))
    if one:
        pct, targets = next(iter(targets.values()), pct), {}
    if pct is None and not targets:
        if lone_bounds and (max_repeats is not None or budget_s is not None):
            flag = "--max-repeats" if max_repeats is not None else "--budget-s"
            raise UsageError(f"{flag} bounds adaptive {lone_bounds}: give --until-ci PCT too (or --repeat N for a "
                             "fixed count)")
        return Budget(None, min_blocks=repeat, max_blocks=repeat)
    if refusals:
        raise UsageError(refusals[0])
    lo = max(repeat, floor)
    hi = max_repeats if max_repeats is not None else defaults.max_repeats
    if hi < lo:
        raise UsageError(too_few.format(lo=lo, hi=hi))
    return Budget(None if pct is None else float(pct), min_blocks=lo, max_blocks=hi,
                  max_seconds=budget_s if budget_s is not None else defaults.budget_s, targets=targets)
