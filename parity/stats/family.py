"""Family-wise control for a verdict that reads several cells at once (a lever's points, a
nightly's engine x N x metric): Holm's step-down over the cells' p-values.

Each paired cell tests "B/A = 1" with its Student t test on the log block ratios (the test
its interval inverts: the interval excludes 1 exactly when p < 1 - confidence).  Holm orders
the m cells by p and compares the k-th smallest (k = 0..m-1) with alpha / (m - k), stopping
at the first that fails: the chance that ANY cell of an A/A is claimed stays <= alpha, where
m independent cells at alpha each would claim up to 1 - (1 - alpha)^m (14 % for 3 at 5 %).
A claim (improved / regressed) then needs the cell's Holm rejection AND its estimate beyond
the practical threshold, as before; each cell's interval is reported at its own Holm level
(1 - alpha / (m - k)).  "Equivalent" is untouched: a verdict of "flat" needs EVERY cell
equivalent (an intersection-union test, which needs no adjustment), and a cell Holm does not
reject is inconclusive unless equivalent."""

from __future__ import annotations

import math

from parity.stats import usable
from parity.stats.paired import IMPROVED, INCONCLUSIVE, REGRESSED, exp_or_none, t_quantile

METHOD = "Holm step-down over the family's cells (k-th smallest p against alpha / (m - k)); a claim needs the Holm rejection and the estimate beyond the threshold"


def holm(pvalues: list[float | None], alpha: float = 0.05) -> list[dict]:
    """Per p-value (same order): {p, rank (0 = smallest), level (alpha / (m - rank)), rejected}.
    A missing p (no interval) is never rejected and counts in m."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: (pvalues[i] is None or math.isnan(pvalues[i]), pvalues[i] if pvalues[i] is not None else 1.0))
    out: list[dict] = [{} for _ in range(m)]
    going = True
    for rank, i in enumerate(order):
        level = alpha / (m - rank)
        p = pvalues[i]
        going = going and p is not None and not math.isnan(p) and p <= level
        out[i] = {"p": p, "rank": rank, "level": level, "rejected": going}
    return out


def t_pvalue(mean: float, sd: float, n: int) -> float | None:
    """Two-sided p of a one-sample t test of mean = 0 (n values, sample sd)."""
    from scipy.special import stdtr

    if n < 2 or sd is None:
        return None
    if sd == 0:
        return 0.0 if mean != 0 else 1.0
    return float(2 * stdtr(n - 1, -abs(mean) / (sd / math.sqrt(n))))


def paired_cell_p(cell: dict) -> float | None:
    """p of a paired cell (parity.stats.paired.Paired.to_dict or a summary's paired row):
    from its block ratios, else its ratio, sd_log and n_blocks."""
    ratios = [r for r in cell.get("ratios") or [] if usable(r) and r > 0]
    if len(ratios) >= 2:
        logs = [math.log(r) for r in ratios]
        mean = sum(logs) / len(logs)
        sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
        return t_pvalue(mean, sd, len(logs))
    if _summarized(cell):
        return t_pvalue(math.log(cell["ratio"]), cell["sd_log"], cell["n_blocks"])
    return None


def _summarized(cell: dict) -> bool:
    """The cell carries a usable ratio, sd_log and at least 2 blocks (a summary's paired row without its ratios)."""
    ratio = cell.get("ratio")
    return usable(ratio) and ratio > 0 and usable(cell.get("sd_log")) and (cell.get("n_blocks") or 0) >= 2


def interval_at(cell: dict, level: float) -> tuple[float | None, float | None]:
    """The cell's ratio interval at confidence 1 - level (its t interval on the log ratios)."""
    ratios = [r for r in cell.get("ratios") or [] if usable(r) and r > 0]
    if len(ratios) >= 2:
        logs = [math.log(r) for r in ratios]
        n, mean = len(logs), sum(logs) / len(logs)
        sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
    elif _summarized(cell):
        n, mean, sd = cell["n_blocks"], math.log(cell["ratio"]), cell["sd_log"]
    else:
        return None, None
    hw = t_quantile(1 - level, n - 1) * sd / math.sqrt(n)
    high = exp_or_none(mean + hw)
    return (None, None) if high is None else (math.exp(mean - hw), high)


def adjust(cells: list[dict], alpha: float = 0.05) -> list[dict]:
    """The cells with their family-wise outcome: each gains "family" {p, rank, level, low, high,
    outcome, unadjusted} and its "outcome" becomes the adjusted one (a claim Holm does not
    reject turns inconclusive; equivalent and inconclusive stay)."""
    ps = [paired_cell_p(c) for c in cells]
    marks = holm(ps, alpha)
    out = []
    for c, mk in zip(cells, marks):
        before = c.get("outcome")
        low, high = interval_at(c, mk["level"])
        # Holm's level is <= alpha, so a cell it rejects was a claim already: it only takes claims away
        outcome = (before if mk["rejected"] else INCONCLUSIVE) if before in (IMPROVED, REGRESSED) else before
        fam = {"m": len(cells), "alpha": alpha, "p": mk["p"], "rank": mk["rank"], "level": mk["level"], "rejected": mk["rejected"],
               "low": None if low is None else round(low, 6), "high": None if high is None else round(high, 6), "unadjusted": before, "outcome": outcome}  # fmt: skip
        out.append({**c, "outcome": outcome, "family": fam})
    return out


def family_line(cells: list[dict], what: str) -> str:
    """One sentence for a report: the family, its size, the levels and what survived."""
    fams = [c["family"] for c in cells if c.get("family")]
    if not fams:
        return ""
    m, alpha = fams[0]["m"], fams[0]["alpha"]
    lost = sum(1 for f in fams if f["unadjusted"] in (IMPROVED, REGRESSED) and f["outcome"] not in (IMPROVED, REGRESSED))
    kept = sum(1 for f in fams if f["outcome"] in (IMPROVED, REGRESSED))
    levels = ", ".join(f"{f['level']:.4g}" for f in sorted(fams, key=lambda f: f["rank"]))
    return (f"family: {m} cells ({what}); Holm at alpha {alpha:g}, levels in p order {levels}; {kept} claim(s) stand"
            + (f", {lost} per-cell claim(s) did not survive the family" if lost else ""))


def adjust_tests(tests: list[dict], alpha: float = 0.05) -> list[dict]:
    """The same for unpaired tests (parity.stats.unpaired.welch dicts: p, se_log, df, ratio,
    outcome): each gains "family" with its Holm level and its interval at that level; a claim
    Holm does not reject turns inconclusive."""
    marks = holm([t.get("p") for t in tests], alpha)
    out = []
    for t, mk in zip(tests, marks):
        before = t.get("outcome")
        low = high = None
        if t.get("ratio") and t.get("se_log") is not None and t.get("df"):
            hw = t_quantile(1 - mk["level"], t["df"]) * t["se_log"]
            top = exp_or_none(math.log(t["ratio"]) + hw)  # None: past the floating-point range, it bounds nothing
            low, high = (None, None) if top is None else (round(math.exp(math.log(t["ratio"]) - hw), 6), round(top, 6))
        outcome = (before if mk["rejected"] else INCONCLUSIVE) if before in (IMPROVED, REGRESSED) else before
        out.append({**t, "outcome": outcome, "family": {"m": len(tests), "alpha": alpha, "p": mk["p"], "rank": mk["rank"], "level": mk["level"], "rejected": mk["rejected"],
                                                        "low": low, "high": high, "unadjusted": before, "outcome": outcome}})  # fmt: skip
    return out
