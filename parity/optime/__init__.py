"""Focused op timing: `test-backend-ops perf -o OP -b BACKEND` on two arms in paired blocks
(`parity bench --ops`, `parity ab --ops`), the users' kernel kill-gate (Phases 107-138).

plan.py checks the request (arms, ops, backend, order, stop rule, env) before anything runs;
measure.py runs the blocks (each arm once per block, ABBA by default; one tool run per op) and
reads each run through parity.gates.test_backend_ops.parse_perf; stats.py (pure) gives per case
and per op the B/A of time per run and, where the tool reports them, FLOPS and GB/s, with the
paired intervals (parity.stats.paired), the three-way outcome and the users' rule beside, and
names every missing or non-finite number and every case one arm has and the other has not."""
