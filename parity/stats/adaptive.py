"""Adaptive repeats: add blocks until every headline interval is narrow enough, or a
budget ends it.  The stop looks at the intervals' half-widths only, never at
the estimates, and at a conservative half-width (paired.Paired.stop_half_width_pct:
the spread's 90 % upper bound), so a run of blocks that was quiet by luck does not
end the session with a too-narrow interval (benchmarks/verdict_power.py measures
the false-claim rate under this rule)."""

from __future__ import annotations

from dataclasses import dataclass, field

from parity.stats.paired import stop_blocks_for

UNTIL_CI, MAX_REPEATS, TIME_BUDGET, FIXED = "until-ci", "max-repeats", "time-budget", "fixed"


@dataclass
class Budget:
    until_ci_pct: float | None = None  # None: a fixed number of blocks (min_blocks), unless targets name metrics
    min_blocks: int = 3  # an interval needs >= 2; 3 keeps t's tail from dominating
    max_blocks: int = 20
    max_seconds: float | None = None  # wall time of the measured blocks
    targets: dict = field(default_factory=dict)  # {metric: pct}: its own target (a half-width label ends in its metric)
    last_open: list = field(default_factory=list, compare=False, repr=False)  # the labels still over their target at the last look

    @property
    def adaptive(self) -> bool:
        return self.until_ci_pct is not None or bool(self.targets)

    def target(self, label: str) -> float | None:
        """The target of one half-width (None: not waited on)."""
        return self.targets.get(label.rsplit(" ", 1)[-1], self.until_ci_pct)

    def describe(self) -> str:
        if not self.adaptive:
            return f"fixed: {self.min_blocks} blocks"
        tail = f", or {self.max_seconds:g} s" if self.max_seconds else ""
        what = ", ".join([*(f"{m} <= {v:g}%" for m, v in self.targets.items()), *([f"every other headline <= {self.until_ci_pct:g}%"] if self.until_ci_pct is not None and self.targets else [])])
        what = what or f"every headline <= {self.until_ci_pct:g}%"
        return f"until the half-widths reach their targets: {what} (at least {self.min_blocks}, at most {self.max_blocks} blocks{tail})" if self.targets else \
            f"until every headline half-width <= {self.until_ci_pct:g}% (at least {self.min_blocks}, at most {self.max_blocks} blocks{tail})"


def kept_going(labels) -> str:
    """The metrics whose half-widths kept the blocks going, for the stop line."""
    metrics = sorted({lbl.rsplit(" ", 1)[-1] for lbl in labels})
    return ", ".join(metrics)


def stop(budget: Budget, blocks: int, half_widths: dict, elapsed_s: float = 0.0, block_s: float | None = None) -> tuple[str, str] | None:
    """None: run another block.  Else (rule, why).  half_widths: {label: % or None};
    block_s: the last block's duration (the next one is assumed to take as long)."""
    if not budget.adaptive:
        return (FIXED, f"{blocks} blocks as asked") if blocks >= budget.min_blocks else None
    watched = {k: v for k, v in half_widths.items() if budget.target(k) is not None}
    wide = {k: v for k, v in watched.items() if v is None or v > budget.target(k)}
    if blocks >= budget.min_blocks and not wide:
        worst = max((v for v in watched.values() if v is not None), default=0.0)
        last = f"; the last to narrow: {kept_going(budget.last_open)}" if budget.targets and budget.last_open else ""
        if budget.targets:
            return UNTIL_CI, f"every half-width at its target after {blocks} blocks (widest {worst:.2f}%){last}"
        return UNTIL_CI, f"every headline half-width <= {budget.until_ci_pct:g}% after {blocks} blocks (widest {worst:.2f}%)"
    wide = wide if blocks >= budget.min_blocks else watched
    budget.last_open = sorted(wide)
    over = f"{budget.until_ci_pct:g}%" if not budget.targets else "its target"
    open_ = ", ".join(f"{k} {'n/a' if v is None else f'+-{v:.2f}%'}" for k, v in sorted(wide.items()))
    if budget.targets:
        open_ += f" (kept going by {kept_going(wide)})"
    if blocks >= budget.max_blocks:
        return MAX_REPEATS, f"{blocks} blocks (--max-repeats) with {open_} still over {over}{_more(budget, blocks, wide)}"
    if budget.max_seconds and block_s is not None and elapsed_s + block_s > budget.max_seconds:
        return TIME_BUDGET, (f"{elapsed_s:.0f} s spent, another block (~{block_s:.0f} s) would pass the "
                             f"{budget.max_seconds:g} s budget; {open_} still over {over}{_more(budget, blocks, wide)}")
    return None


def _more(budget: Budget, blocks: int, wide: dict) -> str:
    """'; about K blocks at this spread would reach it' for the widest open half-width (its blocks
    read as the run's: a label with fewer valid pairs makes K an underestimate)."""
    worst = max(((v / budget.target(k), k, v) for k, v in wide.items() if v is not None and budget.target(k)),
                default=None)
    if worst is None:
        return ""
    _, label, width = worst
    n = stop_blocks_for(width, blocks, budget.target(label))
    return f"; at this spread about {n} blocks would reach {budget.target(label):g}% ({label})" if n else \
        f"; at this spread more than 1000 blocks would reach {budget.target(label):g}% ({label})"


# The budget the simulation (benchmarks/verdict_power.py) checks: <= 5 % false claims and
# >= 80 % of a 3 % effect found, on the users' recorded GB10 noise and the H100's.
RECOMMENDED = Budget(until_ci_pct=1.5, min_blocks=3, max_blocks=20)
