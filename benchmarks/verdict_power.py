"""How often the paired verdict claims a change that is not there (A/A), and how often
it finds a 3 % one that is, over synthetic sessions drawn from recorded noise.

    python benchmarks/verdict_power.py [--sessions 1000] [--tsv FILE --metric M --a ENGINE --b ENGINE]

Noise sources: the users' GB10 same-binary CV (seeds, Phase139: 7 runs, agg_tps CV
1.349 %) and the per-block log ratios of parity runs (the H100 long sweep on a
host-bound 0.9 GB model, and the H100 A/A on a GPU-bound 16 GB model, N 1/8/32;
--tsv adds another parity_summary.tsv).  Budgets: 5 fixed blocks, the
recommended --until-ci 1.5 (3..20 blocks), and --until-ci 3.  Prints one row per
source x budget; exits 1 when the recommended budget claims more than 5 % + 3
Monte-Carlo standard errors on any source.  Then the family-wise rate: A/A sessions
over all the cells one verdict reads (a lever's points, a nightly's N x metric), any
cell claimed, per cell and under Holm (parity.stats.family); exits 1 when Holm's
exceeds the same bound.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--effect", type=float, default=0.03)
    ap.add_argument("--tsv", action="append", default=[])
    ap.add_argument("--metric", default="decode_agg_tps")
    ap.add_argument("--a", default="stock", help="control engine of --tsv")
    ap.add_argument("--b", default="paged", help="candidate engine of --tsv")
    args = ap.parse_args()

    from parity.stats import adaptive, simulate

    data = ROOT / "tests" / "data"
    recorded = [("H100 long sweep paged/stock", data / "h100-long-sweep-parity_summary.tsv", "stock", "paged"),
                ("H100 A/A 16 GB dense", data / "h100-noise" / "aa-parity_summary.tsv", "stock", "stock_b")]  # fmt: skip
    recorded += [(Path(t).stem, Path(t), args.a, args.b) for t in args.tsv]
    sources = [simulate.Noise("GB10 users same-binary", "seeds Phase139 CV 1.349 %", arm_cv_pct=1.349)]
    for name, tsv, a, b in recorded:
        for n in sorted({int(line.split("\t")[2]) for line in tsv.read_text().splitlines()[1:] if line.startswith("row\t")}):
            logs = simulate.logs_from_tsv(str(tsv), args.metric, n, a, b)
            if len(logs) >= 2:
                sources.append(simulate.Noise(f"{name} N={n}", str(tsv), block_logs=logs))
    budgets = [("fixed 5", adaptive.Budget(None, 5, 5)), ("until-ci 1.5 (recommended)", adaptive.RECOMMENDED), ("until-ci 3", adaptive.Budget(3.0, 3, 20))]
    bound = 0.05 + 3 * math.sqrt(0.05 * 0.95 / args.sessions)
    print(f"{'noise source':<34} {'sd(log) %':>9} {'budget':<28} {'A/A claims':>10} {'A/A equiv':>9} {f'{args.effect:.0%} found':>9} {'blocks':>6}")
    bad = []
    for src in sources:
        for label, budget in budgets:
            aa = simulate.rates(src, 0.0, budget, args.sessions, seed=11)
            ab = simulate.rates(src, args.effect, budget, args.sessions, seed=12)
            print(f"{src.name:<34} {src.sd_log() * 100:>9.2f} {label:<28} {aa['claims']:>10.1%} {aa['equivalent']:>9.1%} {ab['improved']:>9.1%} {ab['mean_blocks']:>6.1f}")
            if budget is adaptive.RECOMMENDED and aa["claims"] > bound:
                bad.append(f"{src.name}: {aa['claims']:.1%} false claims")
    print(f"{args.sessions} sessions per cell; a claim is improved or regressed; bound on A/A claims {bound:.1%}")
    bad += families(args.sessions)
    if bad:
        print("FAIL: " + "; ".join(bad))
    return 1 if bad else 0


def families(sessions: int) -> list[str]:
    """The family-wise false-claim rate: A/A sessions over every cell one verdict reads (a lever's
    points; a nightly's or compare's N x metric), drawn with the recorded spreads and correlations
    of tests/data/h100-noise; "any cell claimed" per cell (before) and under Holm (after)."""
    from parity.stats import adaptive, simulate

    data = ROOT / "tests" / "data" / "h100-noise"
    fams = [("lever A/B (S_TG per point)", simulate.family_from_bench(str(data / "lever-bench.json"))),
            ("nightly / compare (serving A/A)", simulate.family_from_tsv(str(data / "aa-parity_summary.tsv"), ["decode_agg_tps", "agg_tps", "ttft_mean_ms"], "stock", "stock_b"))]  # fmt: skip
    budgets = [("fixed 5", adaptive.Budget(None, 5, 5)), ("until-ci 1.5 (recommended)", adaptive.RECOMMENDED)]
    bound = 0.05 + 3 * math.sqrt(0.05 * 0.95 / sessions)
    print()
    print(f"{'family (recorded A/A spreads)':<34} {'cells':>5} {'budget':<28} {'any claim, per cell':>19} {'any claim, Holm':>15} {'blocks':>6}")
    bad = []
    for label, fam in fams:
        for bl, budget in budgets:
            r = simulate.family_rates(fam, budget, sessions, seed=21)
            print(f"{label:<34} {len(fam.cells):>5} {bl:<28} {r['before']:>19.1%} {r['after']:>15.1%} {r['mean_blocks']:>6.1f}")
            if r["after"] > bound:
                bad.append(f"{label} {bl}: {r['after']:.1%} family-wise false claims under Holm")
        print(f"{'':<34} {'':>5} cells: {', '.join(fam.cells)} ({len(fam.blocks)} recorded blocks, {Path(fam.source).name})")
    print(f"{sessions} A/A sessions per row; a family-wise false claim is any cell improved or regressed; bound under Holm {bound:.1%}")
    return bad


if __name__ == "__main__":
    sys.exit(main())
