"""Adaptive repeats: add blocks until every headline interval is narrow enough, or a
budget ends it.  The stop looks at the intervals' half-widths only, never at
the estimates, and at a conservative half-width (paired.Paired.stop_half_width_pct:
the spread's 90 % upper bound), so a run of blocks that was quiet by luck does not
end the session with a too-narrow interval (benchmarks/verdict_power.py measures
the false-claim rate under this rule)."""

from __future__ import annotations

from dataclasses import dataclass

UNTIL_CI, MAX_REPEATS, TIME_BUDGET, FIXED = "until-ci", "max-repeats", "time-budget", "fixed"


@dataclass
class Budget:
    until_ci_pct: float | None = None  # None: a fixed number of blocks (min_blocks)
    min_blocks: int = 3  # an interval needs >= 2; 3 keeps t's tail from dominating
    max_blocks: int = 20
    max_seconds: float | None = None  # wall time of the measured blocks

    def describe(self) -> str:
        if self.until_ci_pct is None:
            return f"fixed: {self.min_blocks} blocks"
        tail = f", or {self.max_seconds:g} s" if self.max_seconds else ""
        return f"until every headline half-width <= {self.until_ci_pct:g}% (at least {self.min_blocks}, at most {self.max_blocks} blocks{tail})"


def stop(budget: Budget, blocks: int, half_widths: dict, elapsed_s: float = 0.0, block_s: float | None = None) -> tuple[str, str] | None:
    """None: run another block.  Else (rule, why).  half_widths: {label: % or None};
    block_s: the last block's duration (the next one is assumed to take as long)."""
    if budget.until_ci_pct is None:
        return (FIXED, f"{blocks} blocks as asked") if blocks >= budget.min_blocks else None
    if blocks >= budget.min_blocks:
        wide = {k: v for k, v in half_widths.items() if v is None or v > budget.until_ci_pct}
        if not wide:
            worst = max(half_widths.values(), default=0.0)
            return UNTIL_CI, f"every headline half-width <= {budget.until_ci_pct:g}% after {blocks} blocks (widest {worst:.2f}%)"
    else:
        wide = half_widths
    open_ = ", ".join(f"{k} {'n/a' if v is None else f'+-{v:.2f}%'}" for k, v in sorted(wide.items()))
    if blocks >= budget.max_blocks:
        return MAX_REPEATS, f"{blocks} blocks (--max-repeats) with {open_} still over {budget.until_ci_pct:g}%"
    if budget.max_seconds and block_s is not None and elapsed_s + block_s > budget.max_seconds:
        return TIME_BUDGET, f"{elapsed_s:.0f} s spent, another block (~{block_s:.0f} s) would pass the {budget.max_seconds:g} s budget; {open_} still over {budget.until_ci_pct:g}%"
    return None


# The budget the simulation (benchmarks/verdict_power.py) checks: <= 5 % false claims and
# >= 80 % of a 3 % effect found, on the users' recorded GB10 noise and the H100's.
RECOMMENDED = Budget(until_ci_pct=1.5, min_blocks=3, max_blocks=20)
