"""Server slots for the N sweep.  The users start one server per engine with --parallel at their
largest N (their snapshot script: NPL "8 32 128", PARALLEL 128), so a sweep whose largest N is
above serving.parallel gets --parallel N -- when the context still gives every slot a whole
request.  Otherwise (or when --parallel was given) one line names the key to raise."""

from __future__ import annotations

from parity.decode import replace
from parity.engines.bound import Engine
from parity.errors import UsageError


def size_for_npl(engines: dict[str, Engine], shape, parallel_given: bool):
    """(shape, note): shape with parallel raised to max(npl) where an engine's slots would queue
    the largest N, and the note that says so (None: nothing changed).  engines: bound, by name."""
    top = max(shape.npl)
    slots = {e: eng.queue_limit(shape) for e, eng in engines.items()}
    short = [e for e, q in slots.items() if q is not None and q < top]
    if not short:
        return shape, None
    if parallel_given:
        raise UsageError(f"N={top} exceeds --parallel {shape.parallel}: engine {short[0]} would queue requests; "
                         f"raise --parallel to {top} (or leave it out: parity sizes it for the largest N)")  # fmt: skip
    sized = replace(shape, parallel=top)
    need = shape.ptok + shape.gen
    for e in short if shape.prompt == "tokens" else ():  # word prompts are checked once tokenized
        limit = engines[e].context_need(sized).tokens
        if limit is not None and limit < need:
            raise UsageError(
                f"N={top} exceeds serving.parallel {shape.parallel}, and at --parallel {top} engine {e} gives a "
                f"request {limit} tokens (serving.ctx {shape.ctx} over {top} slots), short of ptok {shape.ptok} + "
                f"gen {shape.gen}: raise serving.ctx (--ctx) to {top * need}, or lower --npl"
            )
    return sized, f"--parallel {top} (serving.parallel {shape.parallel}): sized for the largest N, as the users run it"
