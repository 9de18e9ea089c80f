"""The binary gates' check functions in one import: every failure mode is a non-pass Check.

md5_gate (md5.py), op_gate (oracle.py), kl_gate (kl.py); the kinds that wrap them are
kinds.GATES.  Each takes the gate inputs (base.gate_inputs) and the run (parity.context.Run)."""

from parity.gates.common import resolve_model
from parity.gates.kl import kl_gate
from parity.gates.md5 import greedy, md5_gate
from parity.gates.oracle import op_gate

__all__ = ["resolve_model", "kl_gate", "greedy", "md5_gate", "op_gate"]
