"""What every workload kind has: its section checks, its sizing for a profile, its points and
their width, its runner, its metrics, headline and windows, its calibration knob, what it adds to
the summary and its report (description, columns, parameters, plots, tables); and the point a
runner hands back."""

from __future__ import annotations

from typing import Callable, Iterator

import msgspec

from parity.errors import ConfigError
from parity.loadgen.record import RequestRecord


class Measured(msgspec.Struct):
    """One point's raw results, before the row is computed."""

    key: float
    label: str
    records: list[RequestRecord]
    before: dict | None = None
    after: dict | None = None
    metrics_text: str | None = None
    decode: list[RequestRecord] = msgspec.field(default_factory=list)
    long: list[RequestRecord] = msgspec.field(default_factory=list)
    prefix_tokens: int = 0
    extra: dict = msgspec.field(default_factory=dict)
    problems: list[str] = msgspec.field(default_factory=list)
    side: dict = msgspec.field(default_factory=dict)  # other requests kept beside the point (primers): name -> records


class Plot(msgspec.Struct):
    """One of the report's plots: draw(data, path[, rows]) writes a PNG and returns its path (None: nothing to draw)."""

    title: str
    file: str
    draw: Callable
    reads: str  # what the summary gives it: "medians", "rows", or "both" (medians, path, rows)


class WorkloadKind:
    """The lifecycle every kind shares.  A kind sets its declarations and overrides what it
    knows; `wl` is a resolved workload (parity.serving.workloads.Workload: name, cfg, gen,
    ptok), `cfg` its section (parity.workloads.spec.WorkloadConfig)."""

    name = ""
    what = ""  # the report's description of what it sends and measures
    positive: tuple[str, ...] = ()  # section keys that must be positive (gen and ptok always)
    metrics: tuple[str, ...] = ()  # its own metrics, by name in the metric registry (parity.metrics.workload)
    headline: tuple[str, ...] = ()  # what its ratios and headline compare across engines
    windows: tuple[str, ...] = ("wall_s", "decode_window_s")  # the measurement windows a point must have (validity.point_verdict)
    knob = "gen"  # the section field block 0's calibration may raise (parity.workloads.calibration)
    shown: tuple[str, ...] = ()  # the columns its table shows first (every metric is still in the rows and medians)
    params: tuple[str, ...] = ()  # the section keys the report lists
    plots: tuple[Plot, ...] = ()
    stop_metrics: tuple[str, ...] = ()  # what --until-ci may name beyond the headline (stop_widths gives them)
    # each point is one measured run with nothing beside it (no primers, no turns): its two arms can meet before
    # it on two GPUs at once, and a telemetry window can hold its whole run (parity.serving.workloads.measured)
    one_run_points = False

    # ---- the section ----------------------------------------------------------------------
    def check(self, w, label: str, key: str) -> None:
        """Value checks beyond `positive` (ConfigError naming the key)."""

    def check_positive(self, w, label: str, key: str) -> None:
        for k in self.positive + ("gen", "ptok"):
            v = getattr(w, k)
            if v is not None and not v > 0:
                raise ConfigError(label, f"{key}.{k}", "must be positive")

    def sized(self, gpu: bool, slot: int, par: int, s) -> dict:
        """The built-in's fields for a profile: on a GPU or not, the tokens one request gets,
        --parallel, and the serving shape s (gen, ptok)."""
        raise NotImplementedError

    # ---- the plan -------------------------------------------------------------------------
    def points(self, wl) -> list[tuple[float, str]]:
        """(numeric key, label) of each point, in run order."""
        raise NotImplementedError

    def concurrency(self, wl) -> int | None:
        """Requests in flight at once (None: as many as its schedule makes)."""
        return None

    def need(self, wl) -> int:
        """The most tokens one request takes (prompt + generated)."""
        return wl.ptok + wl.gen

    # ---- the run --------------------------------------------------------------------------
    def run(self, arm, wl) -> Iterator[Measured]:
        """Every point on one arm's server, one Measured each.  arm (parity.serving.workloads.Arm):
        target, engine, timeout, fits(specs, label), scrape(), status(msg), show(label)."""
        raise NotImplementedError

    def judge(self, row: dict, sample, cfg) -> list[str]:
        """The point's own verdict beside the common one: adds its fields to row, returns its problems."""
        return []

    # ---- calibration ----------------------------------------------------------------------
    def paced(self, records: list[RequestRecord], decode: list[RequestRecord]) -> list[RequestRecord]:
        """The requests whose length the knob sets (the last of them to end paces the point)."""
        return records

    def cap(self, limit: int, wl) -> tuple[int, str]:
        """(the largest knob value a request context of `limit` tokens allows, what else takes it)."""
        return limit - wl.ptok, f"less {wl.ptok} prompt tokens"

    # ---- the summary and the report --------------------------------------------------------
    def summarize(self, rows: list[dict], reference: str | None, threshold_pct: float, confidence: float) -> dict:
        """What it adds to summary.json from every point's rows (fits across points, their pairing); {}: nothing."""
        return {}

    def console(self, summary: dict) -> list[str]:
        """Lines the console prints after the medians (what its summarize() added, in words)."""
        return []

    def stop_widths(self, rows: list, reference: str | None, threshold_pct: float, confidence: float) -> dict:
        """{"<engine> <point> <stop metric>": conservative half-width % (None: no interval yet)} over
        the blocks so far, for --until-ci (a label ends in one of stop_metrics)."""
        return {}

    def tables(self, summary: dict, fmt) -> list[dict]:
        """Tables of its own beside the points ({title, head, rows}), numbers through the report's fmt."""
        return []
