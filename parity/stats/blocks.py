"""Blocks of a same-session measurement (a serving sweep, a batched-bench A/B): the engine order of each block, the paired half-widths
after a block, and the loop that adds blocks until the stop rule (parity.stats.adaptive)
ends it.  A block is one repeat in which every engine ran once, back to back.

run_blocks is pure: it takes a callable that runs one block, so the loop is tested
with a fake one (tests/unit/test_blocks.py)."""

from __future__ import annotations

import time
from typing import Callable

from parity import interrupts
from parity.stats.adaptive import Budget, stop
from parity.stats.paired import by_point


def block_order(engines: list[str], block: int, order: str) -> list[str]:
    """The engines of block `block`, in run order: abab every block in engine order; abba
    rotated by the block number (two engines: A B, B A, A B, ... which cancels a linear
    drift; three: ABC BCA CAB).  aabb has no blocks (every repeat of A, then of B): it is
    not extendable, and adaptive repeats refuse it."""
    if order == "aabb":
        raise ValueError("aabb runs every repeat of one engine before the next: it has no blocks")
    k = block % len(engines) if order == "abba" and engines else 0
    return engines[k:] + engines[:k]


def half_widths(rows: list, reference: str | None, metrics: list[str], threshold_pct: float, confidence: float, direction: Callable[[str], str], key: str = "n") -> dict:
    """{"<engine> N=<n> <metric>": conservative half-width % (None: no interval yet)} over
    the valid rows (PointRows, or flat dicts), every engine but the reference, every point, every
    headline metric; direction(metric) says whether higher or lower is better."""
    if reference is None:
        return {}
    out = {}
    for p in by_point(rows, reference, metrics, direction, threshold_pct, confidence, key=key):
        out[f"{p['engine']} {'N=' if key == 'n' else ''}{p[key]} {p['metric']}"] = p["stop_half_width_pct"]
    return out


def pct(v: float) -> str:
    """A half-width for the screen: two blocks' conservative bound can be astronomically wide."""
    return f"+-{v:.2f}%" if v < 1000 else "+->1000%"


def block_line(block: int, counted: int, widths: dict, decision, budget: Budget) -> str:
    """One progress line after a block: which block, the widest half-width and where, the rule's state."""
    done = [(v, k) for k, v in widths.items() if v is not None]
    if widths and done:
        v, k = max(done)
        open_ = sum(1 for lbl, x in widths.items() if budget.target(lbl) is not None and (x is None or x > budget.target(lbl)))
        over = "their targets" if budget.targets else f"{budget.until_ci_pct:g}%" if budget.until_ci_pct is not None else ""
        wide = f"widest {pct(v)} ({k})" + (f", {open_}/{len(widths)} over {over}" if budget.adaptive else "")
    elif widths:
        wide = "no interval yet (needs 2 blocks)"
    else:
        wide = "no paired interval (one engine or no reference)"
    state = f"stop: {decision[0]}: {decision[1]}" if decision else ("next block" if not budget.adaptive else f"next block (at least {budget.min_blocks}, at most {budget.max_blocks})")
    return f"block {block} done ({counted} measured): {wide}; {state}"


def run_blocks(budget: Budget, run_block: Callable[[int], bool | None], widths: Callable[[], dict], report: Callable | None = None, clock: Callable[[], float] = time.monotonic) -> tuple[str, str, int, float]:
    """Run blocks 0, 1, ... until adaptive.stop() says stop.  run_block(b) runs block b
    and returns False when it does not count (block 0 only: a calibration trial, neither a
    measured block nor measured time).  widths() -> the half-widths over the blocks so far.
    report(block, counted, widths, decision) after each counted block.
    Returns (rule, why, measured blocks, measured seconds)."""
    counted, elapsed, b = 0, 0.0, 0
    while True:
        interrupts.check()  # a Ctrl-C whose KeyboardInterrupt was swallowed inside the last block
        t0 = clock()
        kept = run_block(b)
        dt = clock() - t0
        b += 1
        if kept is False and b == 1:  # only block 0 may be the calibration trial
            continue
        counted += 1
        elapsed += dt
        hw = widths()
        decision = stop(budget, counted, hw, elapsed, dt)
        if report is not None:
            report(b - 1, counted, hw, decision)
        if decision is not None:
            return decision[0], decision[1], counted, elapsed
