"""Server-side truth next to the client's numbers: the engines' own Prometheus /metrics.

The text (Prometheus exposition format 0.0.4) is read by parse() below, tested equal to
prometheus_client's parser on the engines' captured /metrics: importing that package costs
~0.15 CPU-s a run (its HTTP exposition), for a format of one sample per line.  Every sample is
summed over its labels (vLLM labels each series with engine and model_name).  Around each point
parity scrapes before and after, keeps the deltas of the counters below (and the
gauges' values after), and reconciles them with the client:
- generated tokens and finished requests must match the client exactly, and so must prompt
  tokens, counted the way the server counts them: vLLM's prompt_tokens_total holds the tokens
  it took from its prefix cache, llama-server's holds only those it computed (plus
  prompt_tokens_cached_total where the build has it; without it, the client's count less the
  cached tokens each response reported);
- the server's mean TTFT and E2E latency must agree with the client's: the client's
  include the network and the HTTP frontend (vLLM's API server tokenizes before its
  engine clock starts: ~6 ms on the 2-core CI box), so the client may be longer by up
  to max(25 %, 10 ms) but shorter by no more than max(5 %, 1 ms); that frontend time sits in
  the client's E2E as well (a quiet smoke run on the CI box: TTFT gaps 3.1, 10.4, 6.9 ms beside
  E2E gaps 3.6, 10.4, 7.1 ms), so the client's TTFT may also be longer by the E2E gap plus
  max(5 %, 1 ms): what no frontend offset explains is still a mismatch;
a mismatch is a warning in the run and a row of the report's reconciliation table.
What an engine does not expose is said ("not exposed"), never guessed."""

from __future__ import annotations

import msgspec

# (relative, absolute ms) bounds on client - server: above it, then below it
CLIENT_LONGER = (0.25, 10.0)
CLIENT_SHORTER = (0.05, 1.0)
TIME_RULE = "client - server within [-max(5 %, 1 ms), +max(25 %, 10 ms)]"
TTFT_RULE = "client - server within [-max(5 %, 1 ms), +max(25 %, 10 ms, the E2E gap + max(5 %, 1 ms))]"


class Series(msgspec.Struct, frozen=True):
    """What one engine family calls a quantity: counters (deltas) and the histogram for means."""

    requests: tuple[str, ...] = ()
    prompt_tokens: tuple[str, ...] = ()
    generation_tokens: tuple[str, ...] = ()
    preemptions: tuple[str, ...] = ()
    prefix_queries: tuple[str, ...] = ()
    prefix_hits: tuple[str, ...] = ()
    kv_usage: str | None = None  # gauge, 0..1
    ttft: str | None = None  # histogram base name
    e2e: str | None = None
    decode: str | None = None  # histogram of a request's decode time (the engine clock)
    queue: str | None = None  # histogram of a request's wait before it was scheduled (the TTFT anatomy's queue)
    prefill: str | None = None  # histogram of a request's prefill, scheduled -> first token (its prompt part)
    prompt_computed: str | None = None  # counter of prompt tokens computed, reused ones excluded
    prompt_cached: str | None = None  # counter of prompt tokens reused from cache, which prompt_tokens leaves out


def parse(text: str) -> dict[str, float]:
    """{sample name: value summed over its label sets} (histogram buckets and _created dropped).
    A line is `name[{labels}] value [timestamp]`; label values are quoted and may hold spaces,
    braces and escaped quotes; `#` lines are comments (HELP, TYPE)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] == "#":
            continue
        name, rest = _split_sample(line)
        if name.endswith("_bucket") or name.endswith("_created"):
            continue
        out[name] = out.get(name, 0.0) + float(rest.split()[0])
    return out


def _split_sample(line: str) -> tuple[str, str]:
    """(name, what follows the name and its labels)."""
    brace = line.find("{")
    space = line.find(" ")
    if brace < 0 or (0 <= space < brace):
        return line[:space], line[space:]
    i, quoted = brace + 1, False
    while i < len(line):
        c = line[i]
        if quoted and c == "\\":
            i += 2
            continue
        if c == '"':
            quoted = not quoted
        elif c == "}" and not quoted:
            return line[:brace], line[i + 1 :]
        i += 1
    raise ValueError(f"unterminated labels in a metrics line: {line[:120]!r}")


def families(text: str) -> int:
    """How many metric families the text declares (a sanity figure for the run log)."""
    return sum(1 for line in text.splitlines() if line.startswith("# TYPE "))


def _sum(d: dict, names: tuple[str, ...]) -> float | None:
    vals = [d[n] for n in names if n in d]
    return sum(vals) if vals else None


def _delta(before: dict, after: dict, names: tuple[str, ...]) -> float | None:
    a, b = _sum(after, names), _sum(before, names)
    if a is None:
        return None
    return a - (b or 0.0)


def _hist_mean(before: dict, after: dict, base: str | None) -> float | None:
    if not base:
        return None
    n = _delta(before, after, (f"{base}_count",))
    s = _delta(before, after, (f"{base}_sum",))
    return s / n if n and s is not None else None


def deltas(f: Series, before: dict, after: dict) -> dict:
    """The point's server-side figures under the engine's family (None: it does not expose it)."""
    queries, hits = _delta(before, after, f.prefix_queries), _delta(before, after, f.prefix_hits)
    prompt = _delta(before, after, f.prompt_tokens)
    cached = _delta(before, after, (f.prompt_cached,)) if f.prompt_cached else None
    return {
        "requests": _delta(before, after, f.requests),
        "prompt_tokens": prompt if prompt is None or cached is None else prompt + cached,
        # False: this server's prompt count leaves out the tokens it reused from its cache
        "prompt_includes_cached": None if prompt is None else not (f.prompt_cached and cached is None),
        "generation_tokens": _delta(before, after, f.generation_tokens),
        "preemptions": _delta(before, after, f.preemptions),
        "prefix_queries": queries,
        "prefix_hits": hits,
        "prefix_hit_rate": round(hits / queries, 4) if queries and hits is not None else None,
        "kv_usage_after": after.get(f.kv_usage) if f.kv_usage else None,
        "ttft_mean_ms": None if (m := _hist_mean(before, after, f.ttft)) is None else round(m * 1000, 3),
        "e2e_mean_ms": None if (m := _hist_mean(before, after, f.e2e)) is None else round(m * 1000, 3),
    }


def _within(client_ms: float, server_ms: float, offset_ms: float | None = None) -> bool:
    """client - server inside the time rule; offset_ms (the E2E gap) also bounds a longer client."""
    gap = client_ms - server_ms
    slack = max(CLIENT_SHORTER[0] * abs(client_ms), CLIENT_SHORTER[1])
    longer = max(CLIENT_LONGER[0] * abs(client_ms), CLIENT_LONGER[1], (offset_ms + slack) if offset_ms is not None else 0.0)
    return -slack <= gap <= longer


def _e2e_gap(server: dict, client: dict) -> float | None:
    """The client's E2E less the server's, when both are there and agree by the time rule."""
    c, s = client.get("e2e_mean_ms"), server.get("e2e_mean_ms")
    return c - s if c is not None and s is not None and _within(c, s) else None


def reconcile(server: dict, client: dict) -> list[dict]:
    """Rows {quantity, client, server, rule, status: ok | MISMATCH | not exposed}.
    client: {"requests", "prompt_tokens", "generation_tokens", "ttft_mean_ms", "e2e_mean_ms",
    "cached_prompt_tokens"}; the last is what the responses said came from the server's cache
    (None when not every one said), which a server whose prompt count leaves cached tokens out
    (server["prompt_includes_cached"] False) is reconciled against."""
    rows = []
    for key, rule in (("requests", "exact"), ("generation_tokens", "exact"), ("prompt_tokens", "exact"), ("ttft_mean_ms", "tolerance"), ("e2e_mean_ms", "tolerance")):
        c, s = client.get(key), server.get(key)
        text = "exact" if rule == "exact" else TTFT_RULE if key == "ttft_mean_ms" else TIME_RULE
        if s is None:
            status = "not exposed"
        elif c is None:
            status = "no client value"
        elif key == "prompt_tokens" and server.get("prompt_includes_cached") is False:
            status, text = _prompt_without_cached(c, s, client.get("cached_prompt_tokens"))
        elif rule == "exact":
            status = "ok" if round(s) == round(c) else "MISMATCH"
        else:
            status = "ok" if _within(c, s, _e2e_gap(server, client) if key == "ttft_mean_ms" else None) else "MISMATCH"
        rows.append({"quantity": key, "client": c, "server": s, "rule": text, "status": status})
    return rows


def _prompt_without_cached(client: float, server: float, cached: float | None) -> tuple[str, str]:
    """A server that counts only the prompt tokens it computed (llama-server without
    prompt_tokens_cached_total): its count is the client's less what the responses said came
    from its cache; when they did not all say, it can only be lower than the client's."""
    if cached is not None:
        ok = round(server) == round(client - cached)
        return ("ok" if ok else "MISMATCH"), f"exact, less the {cached:g} prompt tokens the responses said the server took from its cache (its counter leaves them out)"
    ok = 0 <= round(client - server)
    return ("ok" if ok else "MISMATCH"), "at most the client's: the server's counter leaves out tokens taken from its cache, and the responses did not all say how many"


def mismatches(rows: list[dict]) -> list[str]:
    return [f"{r['quantity']}: client {r['client']} vs server {r['server']} ({r['rule']})" for r in rows if r["status"] == "MISMATCH"]
