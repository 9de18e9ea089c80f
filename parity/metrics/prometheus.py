"""Server-side truth next to the client's numbers: the engines' own Prometheus /metrics.

The text (Prometheus exposition format 0.0.4) is read by parse() below, tested equal to
prometheus_client's parser on the engines' captured /metrics: importing that package costs
~0.15 CPU-s a run (its HTTP exposition), for a format of one sample per line.  Every sample is
summed over its labels (vLLM labels each series with engine and model_name).  Around each point
parity scrapes before and after, keeps the deltas of the counters below (and the
gauges' values after), and reconciles them with the client:
- generated tokens and finished requests must match the client exactly;
- the server's mean TTFT and E2E latency must agree with the client's: the client's
  include the network and the HTTP frontend (vLLM's API server tokenizes before its
  engine clock starts: ~6 ms on the 2-core CI box), so the client may be longer by up
  to max(25 %, 10 ms) but shorter by no more than max(5 %, 1 ms);
a mismatch is a warning in the run and a row of the report's reconciliation table.
What an engine does not expose is said ("not exposed"), never guessed."""

from __future__ import annotations

from dataclasses import dataclass

# (relative, absolute ms) bounds on client - server: above it, then below it
CLIENT_LONGER = (0.25, 10.0)
CLIENT_SHORTER = (0.05, 1.0)
TIME_RULE = "client - server within [-max(5 %, 1 ms), +max(25 %, 10 ms)]"


@dataclass(frozen=True)
class Series:
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
    prompt_computed: str | None = None  # counter of prompt tokens computed, reused ones excluded


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
    return {
        "requests": _delta(before, after, f.requests),
        "prompt_tokens": _delta(before, after, f.prompt_tokens),
        "generation_tokens": _delta(before, after, f.generation_tokens),
        "preemptions": _delta(before, after, f.preemptions),
        "prefix_queries": queries,
        "prefix_hits": hits,
        "prefix_hit_rate": round(hits / queries, 4) if queries and hits is not None else None,
        "kv_usage_after": after.get(f.kv_usage) if f.kv_usage else None,
        "ttft_mean_ms": None if (m := _hist_mean(before, after, f.ttft)) is None else round(m * 1000, 3),
        "e2e_mean_ms": None if (m := _hist_mean(before, after, f.e2e)) is None else round(m * 1000, 3),
    }


def _within(client_ms: float, server_ms: float) -> bool:
    gap = client_ms - server_ms
    longer, shorter = max(CLIENT_LONGER[0] * abs(client_ms), CLIENT_LONGER[1]), max(CLIENT_SHORTER[0] * abs(client_ms), CLIENT_SHORTER[1])
    return -shorter <= gap <= longer


def reconcile(server: dict, client: dict) -> list[dict]:
    """Rows {quantity, client, server, rule, status: ok | MISMATCH | not exposed}.
    client: {"requests", "prompt_tokens", "generation_tokens", "ttft_mean_ms", "e2e_mean_ms"}."""
    rows = []
    for key, rule in (("requests", "exact"), ("generation_tokens", "exact"), ("prompt_tokens", "exact"), ("ttft_mean_ms", "tolerance"), ("e2e_mean_ms", "tolerance")):
        c, s = client.get(key), server.get(key)
        if s is None:
            status = "not exposed"
        elif c is None:
            status = "no client value"
        elif rule == "exact":
            status = "ok" if round(s) == round(c) else "MISMATCH"
        else:
            status = "ok" if _within(c, s) else "MISMATCH"
        rows.append({"quantity": key, "client": c, "server": s, "rule": "exact" if rule == "exact" else TIME_RULE, "status": status})
    return rows


def mismatches(rows: list[dict]) -> list[str]:
    return [f"{r['quantity']}: client {r['client']} vs server {r['server']} ({r['rule']})" for r in rows if r["status"] == "MISMATCH"]
