"""open-loop: for each rate, requests_per_rate requests due at seeded gamma arrival times
(parity.loadgen.arrivals; exact_rate: scaled so the schedule's mean rate is the requested
one), sent whatever is in flight.  A load generator that fell behind makes the point invalid;
a server that did not keep up makes it "not held"."""

from __future__ import annotations

import asyncio
from pathlib import Path

from parity.errors import ConfigError
from parity.loadgen import client as loadgen
from parity.loadgen.arrivals import open_loop_times
from parity.loadgen.prompts import token_prompts
from parity.results.model import PointRow
from parity.workloads.base import Measured, Plot, WorkloadKind
from parity.workloads.plots import HOLLOW, axes, by_engine, num, save


def open_loop_problems(row: dict, cfg) -> list[str]:
    """The load generator's self-check: late sends or a short send rate void the point."""
    out = []
    d = row.get("sched_delay_p99_ms")
    if d is None:
        out.append(f"no scheduling delay: {row['why'].get('sched_delay_p99_ms')}")
    elif d > cfg.max_delay_p99_ms:
        out.append(f"the load generator fell behind: scheduling delay p99 {d:g} ms > max_delay_p99_ms {cfg.max_delay_p99_ms:g}")
    share = row.get("achieved_share")
    if share is not None and share < cfg.min_achieved_share:
        out.append(f"the load generator sent at {row['achieved_rate']:g} req/s, {share:.1%} of the scheduled {row['scheduled_rate']:g} req/s (min_achieved_share {cfg.min_achieved_share:g})")
    return out


def held_verdict(row: dict, cfg) -> dict:
    """Did the server keep up with the rate?  The wait for the first token must not grow over the schedule."""
    share = row.get("served_share")
    if share is None:
        return {"held": None, "held_note": f"unknown: {row['why'].get('served_share')}"}
    if share >= cfg.min_achieved_share:
        return {"held": True, "held_note": f"held: took {row['served_rate']:g} req/s of the scheduled {row['scheduled_rate']:g} ({share:.1%})"}
    note = (f"not held: the wait for a first token grew {row['wait_growth_ms_per_s']:g} ms per second of the schedule: "
            f"the server took {row['served_rate']:g} req/s of the scheduled {row['scheduled_rate']:g} "
            f"({share:.1%} < {cfg.min_achieved_share:g}); its queue grew, so latencies here depend on the run's length")
    return {"held": False, "held_note": note}


# ------------------------------------------------------------------ plots


def rate_axis(ax, rates) -> None:
    rates = sorted(set(rates))
    if rates and rates[0] > 0 and rates[-1] / rates[0] >= 8:
        ax.set_xscale("log")
    ax.set_xticks(rates)
    ax.set_xticklabels([f"{r:g}" for r in rates])
    ax.minorticks_off()
    ax.set_xlabel("requested rate (req/s)")


def invalid(rows: list[PointRow] | None, key: str) -> list[PointRow]:
    """Rows a load generator voided (no median), still drawn as crosses: where the box gave up."""
    return [r for r in rows or [] if not r.valid and num(r.metric(key))]


def rate_latency(medians: list[dict], path: Path, rows: list[PointRow] | None = None, metrics=("ttft_p50_ms", "ttft_p99_ms", "e2e_p99_ms")) -> Path | None:
    """Latency percentiles vs the requested rate; hollow markers: the server did not hold the
    rate; crosses: invalid points (the load generator fell behind)."""
    lines = {(eng, k): pts for k in metrics for eng, pts in by_engine(medians, k).items()}
    bad = {k: invalid(rows, k) for k in metrics}
    if not lines and not any(bad.values()):
        return None
    fig, ax = axes()
    styles = {k: s for k, s in zip(metrics, ("-", "--", ":"))}
    colors: dict[str, str] = {}
    for (eng, k), pts in sorted(lines.items()):
        xs, ys = [m["n"] for m in pts], [m[k] for m in pts]
        (line,) = ax.plot(xs, ys, linestyle=styles[k], color=colors.get(eng), label=f"{eng} {k}")
        colors.setdefault(eng, line.get_color())
        for m in pts:
            ax.plot([m["n"]], [m[k]], marker="o", color=colors[eng], **(HOLLOW if m.get("held") is False else {}))
    for k, rs in bad.items():
        for r in rs:
            ax.plot([r.n], [r.metric(k)], marker="x", color=colors.get(r.engine, "black"), linestyle="none")
    ax.set_yscale("log")
    rate_axis(ax, [m["n"] for pts in lines.values() for m in pts] + [r.n for rs in bad.values() for r in rs])
    ax.set_ylabel("latency (ms, log)")
    ax.set_title("latency vs request rate (hollow: not held; x: invalid)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="x-small")
    return save(fig, path)


def goodput_vs_rate(medians: list[dict], path: Path, rows: list[PointRow] | None = None) -> Path | None:
    lines = by_engine(medians, "goodput_rps")
    bad = invalid(rows, "goodput_rps")
    if not lines and not bad:
        return None
    fig, ax = axes()
    rates = [m["n"] for pts in lines.values() for m in pts] + [r.n for r in bad]
    top = max(rates)
    low = min(rates)
    ax.plot([low, top], [low, top], color="grey", linestyle="--", linewidth=1, label="offered rate")
    for eng, pts in sorted(lines.items()):
        (line,) = ax.plot([m["n"] for m in pts], [m["goodput_rps"] for m in pts], label=eng)
        for m in pts:
            ax.plot([m["n"]], [m["goodput_rps"]], marker="o", color=line.get_color(), **(HOLLOW if m.get("held") is False else {}))
    for r in bad:
        ax.plot([r.n], [r.metric("goodput_rps")], marker="x", color="black", linestyle="none")
    rate_axis(ax, rates)
    if ax.get_xscale() == "log":
        ax.set_yscale("log")
    ax.set_ylabel("goodput (req/s meeting every SLO)")
    ax.set_title("goodput vs request rate (hollow: not held; x: invalid)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return save(fig, path)


# ------------------------------------------------------------------ the kind


class OpenLoop(WorkloadKind):
    name = "open-loop"
    what = "arrivals at each requested rate (seeded gamma gaps), sent whatever is in flight; a late load generator voids a point, a server that cannot keep up is 'not held'"
    positive = ("requests_per_rate", "burstiness", "max_delay_p99_ms")
    metrics = ("scheduled_rate", "achieved_rate", "achieved_share", "sched_delay_p50_ms", "sched_delay_p99_ms", "sched_delay_max_ms", "served_rate", "served_share", "wait_growth_ms_per_s",
               "goodput_rps", "slo_attainment", "e2e_p50_ms", "e2e_p99_ms", "tpot_p50_ms", "tpot_p99_ms")  # fmt: skip
    headline = ("goodput_rps", "ttft_p99_ms", "e2e_p99_ms")
    # its last request starts near the end, so its decode window (from the LAST first token) is short
    windows = ("wall_s",)
    shown = ("scheduled_rate", "achieved_rate", "sched_delay_p99_ms", "served_rate", "goodput_rps", "slo_attainment", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "e2e_p99_ms")
    params = ("rates", "requests_per_rate", "burstiness", "seed", "exact_rate", "max_delay_p99_ms", "min_achieved_share", "slo", "ptok", "gen")
    plots = (Plot("latency vs request rate", "workload_rate_latency.png", rate_latency, "both"),
             Plot("goodput vs request rate", "workload_goodput.png", goodput_vs_rate, "both"))  # fmt: skip

    def check(self, w, label: str, key: str) -> None:
        if not w.rates or any(not r > 0 for r in w.rates) or len(set(w.rates)) != len(w.rates):
            raise ConfigError(label, f"{key}.rates", "must be a non-empty list of distinct positive request rates (requests/s)")
        if w.requests_per_rate < 2:
            raise ConfigError(label, f"{key}.requests_per_rate", "must be at least 2 (a rate needs two sends)")
        if not 0 < w.min_achieved_share <= 1:
            raise ConfigError(label, f"{key}.min_achieved_share", "must be a share in (0, 1]")
        for k in ("ttft_ms", "tpot_ms", "e2e_ms"):
            v = getattr(w.slo, k)
            if v is not None and not v > 0:
                raise ConfigError(label, f"{key}.slo.{k}", "must be positive (or null: not bounded)")

    def sized(self, gpu: bool, slot: int, par: int, s) -> dict:
        gen = max(8, min(s.gen, slot // 2))
        # on a CPU box the servers share the client's cores (vLLM's worker keeps one busy): a send
        # can wait hundreds of ms there (461 ms p99 seen at 1 req/s on 2 cores); still recorded per point
        return {"rates": [1.0, 2.0, 4.0] if gpu else [0.5, 1.0], "requests_per_rate": 32 if gpu else 8, "gen": gen, "ptok": max(8, min(s.ptok, slot - gen)),
                **({} if gpu else {"max_delay_p99_ms": 1000.0})}  # fmt: skip

    def points(self, wl) -> list[tuple[float, str]]:
        return [(r, f"{r:g} req/s") for r in wl.cfg.rates]

    def run(self, arm, wl):
        c, t = wl.cfg, arm.target
        for rate, label in self.points(wl):
            specs = asyncio.run(token_prompts(t, c.requests_per_rate, wl.ptok, wl.gen))
            arm.fits(specs, f"{arm.engine} {wl.name}")
            for spec, at in zip(specs, open_loop_times(len(specs), rate, c.burstiness, c.seed, exact=c.exact_rate)):
                spec.at = at
            before, _ = arm.scrape()
            recs = loadgen.drive(t, specs, arm.timeout, arm.show(f"{wl.name} {label}"), open_loop=True)
            after, text = arm.scrape()
            yield Measured(rate, label, recs, before, after, text,
                           extra={"requested_rate": rate, "burstiness": c.burstiness, "seed": c.seed, "exact_rate": c.exact_rate, "slo": {k: getattr(c.slo, k) for k in ("ttft_ms", "tpot_ms", "e2e_ms")}})  # fmt: skip

    def judge(self, row: dict, sample, cfg) -> list[str]:
        problems = open_loop_problems(row, cfg)
        row.update(held_verdict(row, cfg))
        return problems


KIND = OpenLoop()
