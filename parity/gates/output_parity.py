"""The cross-engine output-parity gate: every serving engine's greedy answers (with top-k
logprobs) against the reference engine's, token by token (parity.metrics.output_parity).

It needs the servers, so it is measured inside the serving snapshot (each engine's first arm
probes serving.output_parity.prompts), not in the pre/post gate set; its verdict is read
from the summary like any gate's: red marks the run invalid and `parity snapshot` exits 3."""

from __future__ import annotations

from parity.gates.base import GateKind
from parity.gates.checks import FAIL, PASS, Check
from parity.metrics.output_parity import compare_engines


class OutputParityGate(GateKind):
    name = "output_parity"
    what = "cross-engine output parity"
    reads = ("engines",)  # the served engines; its prompts and band are serving.output_parity's
    in_gate_set = False

    def measure(self, outputs: dict[str, list[dict]], reference: str, band) -> dict:
        """outputs: engine -> its probe answers; band: serving.output_parity (min_agreement, max_kl)."""
        return compare_engines(outputs, reference, band.min_agreement, band.max_kl)

    def from_summary(self, doc: dict) -> Check | None:
        op = doc.get("output_parity")
        if not isinstance(op, dict):
            return None
        pairs, band, failures = op.get("pairs") or [], op.get("band") or {}, op.get("failures") or []
        expected = f"agreement >= {band.get('min_agreement')}, mean KL <= {band.get('max_kl')} nats vs {op.get('reference')}"
        got = f"{sum(p.get('status') == PASS for p in pairs)}/{len(pairs)} pairs in band"
        status = PASS if op.get("status") == PASS else FAIL
        detail = failures[0] if failures else "" if status == PASS else f"status {op.get('status')!r}"
        return Check(self.what, self.name, expected, got, status, detail, data={"reference": op.get("reference")})


KIND = OutputParityGate()
