"""What `parity bench` (or a campaign's bench step) asks for: one run, or blocks of runs (an A/B, an A/A, repeats)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from parity.errors import UsageError


@dataclass
class BenchRequest:
    """What `parity bench` (or a campaign's bench step) asks for; None keeps serving.bench's value."""

    engine: str | None = None
    model: str | None = None
    npp: list[int] | None = None
    ntg: list[int] | None = None
    npl: list[int] | None = None
    allow_env: list[str] = field(default_factory=list)
    # the A/B (parity.bench.ab): any of these makes blocks of runs
    engines: list[str] | None = None
    aa: bool = False
    repeat: int | None = None
    until_ci: float | str | None = None  # PCT, or s_tg=PCT
    max_repeats: int | None = None
    budget_s: float | None = None
    order: str | None = None
    dry_run: bool = False  # the checked plan, its commands and the go / no-go; nothing runs
    # focused op timing (parity.optime): test-backend-ops perf of these ops instead of batched-bench
    ops: list[str] | str | None = None  # a list, or OP[,OP] as --ops takes it
    ops_backend: str | None = None  # None: gates.op_backend
    ops_params: str | None = None  # test-backend-ops -p REGEX

    def blocks(self) -> bool:
        """Blocks of runs (an A/B, an A/A, or one engine's repeats) rather than the single run."""
        return bool((self.engines and len(self.engines) > 1) or self.aa or self.repeat is not None or self.until_ci is not None or self.max_repeats is not None or self.budget_s is not None)

    def ab_request(self) -> "BenchRequest":
        """The same request with --engine folded into engines (what parity.bench.ab reads)."""
        if self.engine and self.engines:
            raise UsageError("give --engine or --engines, not both")
        return replace(self, engine=None, engines=list(self.engines or ([self.engine] if self.engine else [])), allow_env=list(self.allow_env or []))
