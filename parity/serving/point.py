"""What every measured point shares (the N sweep's and a workload's): its prompts, the fit of its
requests in the context the engine gives, the server's /metrics around it, the client's side of
the reconciliation, the records as written into the run dir."""

from __future__ import annotations

import asyncio

import msgspec

from parity.engines.server import probe, scrape
from parity.errors import InfraError
from parity.loadgen.record import RequestRecord
from parity.metrics import prometheus as server_metrics
from parity.loadgen.prompts import prompts, shortest_context_need


def records_json(recs: list[RequestRecord]) -> list[dict]:
    out = []
    for r in recs:
        d = msgspec.structs.asdict(r)
        d["valid"] = r.valid
        out.append(d)
    return out


def scrape_parsed(la) -> tuple[dict | None, str | None]:
    """The server's /metrics, parsed (None when it has none or it is not Prometheus text)."""
    text = scrape(la.port, la.metrics_path, host=la.host)
    if text is None:
        return None, None
    try:
        return server_metrics.parse(text), text
    except ValueError:  # not Prometheus text
        return None, text


def slot_context(la) -> int | None:
    """The context one llama-server slot really has (GET /props), None when it does not say."""
    if not la.props_path:
        return None
    try:
        status, body = probe(la.port, la.props_path, 10.0, la.host)
    except (OSError, asyncio.TimeoutError, ValueError):
        return None
    settings = body.get("default_generation_settings") if status == 200 and isinstance(body, dict) else None
    n = settings.get("n_ctx") if isinstance(settings, dict) else None
    return n if isinstance(n, int) and n > 0 else None


def build_specs(target, s, n: int, gen: int):
    return asyncio.run(prompts(target, s.prompt, n, s.ptok, gen))


def check_fits(specs, limit: int | None, label: str, what: str) -> None:
    """Refuse requests that do not fit the context the engine really gives them (a
    word prompt's length is only known once tokenized, after the server started)."""

    need = shortest_context_need(specs)
    if limit and need > limit:
        raise InfraError(f"{label}: a request needs {need} tokens (prompt + generated) but {what} gives {limit}")


def client_side(recs: list[RequestRecord], row: dict) -> dict:
    ok = [r for r in recs if r.valid]
    e2e = [(r.end - r.send) * 1000 for r in ok if r.end is not None]
    return {
        "requests": len(ok),
        "prompt_tokens": row.get("prompt_tok_total"),
        # what the responses said came from the server's cache (usage cached_tokens / timings.cache_n): all, or unknown
        "cached_prompt_tokens": sum(r.cached_tokens for r in ok) if ok and all(r.cached_tokens is not None for r in ok) else None,
        "generation_tokens": row.get("gen_total"),
        "ttft_mean_ms": row.get("ttft_mean_ms"),
        "e2e_mean_ms": round(sum(e2e) / len(e2e), 3) if e2e else None,
    }
