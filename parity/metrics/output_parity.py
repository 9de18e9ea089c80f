"""Cross-engine output parity: the same weights and prompts, greedy, compared token by token.

Each engine's answer to a prompt is a Trace: the generated token ids and, per
position, its top-k {token id: logprob} (both APIs return logprobs).  Against the
reference engine's trace:
- agreement: the share of the reference's tokens generated identically before the
  first divergence (after it the contexts differ, so later positions say nothing);
- first_divergence: the position of the first different token (None: identical);
- KL: per position up to and including the first divergence (same context), the
  KL divergence KL(reference || engine) over the tokens both top-k lists hold, each
  distribution renormalized over that shared set; mean and max over positions.
A pair passes when agreement >= min_agreement and mean KL <= max_kl."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class Trace:
    tokens: list[int]
    top: list[dict[int, float]] = field(default_factory=list)  # per position: token id -> logprob
    text: str = ""


def shared_kl(p: dict[int, float], q: dict[int, float]) -> float | None:
    """KL(p || q) over the keys both hold, each renormalized there; None when they share none."""
    keys = [k for k in p if k in q]
    if not keys:
        return None
    pp = [math.exp(p[k]) for k in keys]
    qq = [math.exp(q[k]) for k in keys]
    sp, sq = sum(pp), sum(qq)
    return sum((a / sp) * math.log((a / sp) / (b / sq)) for a, b in zip(pp, qq) if a > 0)


def compare(ref: Trace, other: Trace) -> dict:
    n = len(ref.tokens)
    div = next((i for i, (a, b) in enumerate(zip(ref.tokens, other.tokens)) if a != b), None)
    if div is None and len(other.tokens) != n:
        div = min(n, len(other.tokens))
    same = n if div is None else div
    upto = min(n if div is None else div + 1, len(ref.top), len(other.top))
    kls = [shared_kl(ref.top[i], other.top[i]) for i in range(upto)]
    unshared = sum(k is None for k in kls)
    kls = [k for k in kls if k is not None]
    return {
        "tokens": n,
        "agreement": round(same / n, 4) if n else None,
        "first_divergence": div,
        "kl_positions": len(kls),
        "kl_unshared_positions": unshared,
        "kl_mean": round(sum(kls) / len(kls), 6) if kls else None,
        "kl_max": round(max(kls), 6) if kls else None,
    }


def verdict(result: dict, min_agreement: float, max_kl: float) -> tuple[str, str]:
    """("pass" | "fail", why)."""
    a, kl = result["agreement"], result["kl_mean"]
    if a is None:
        return "fail", "the reference generated no token"
    if a < min_agreement:
        return "fail", f"agreement {a:.3f} < {min_agreement:g} (first divergence at token {result['first_divergence']})"
    if kl is None:
        return "fail", "no position where both top-k lists share a token: KL cannot be computed"
    if kl > max_kl:
        return "fail", f"mean KL {kl:.4g} nats > {max_kl:g} over the shared top-k"
    return "pass", f"agreement {a:.3f} >= {min_agreement:g}, mean KL {kl:.4g} <= {max_kl:g} nats"


def parse_logprobs(body: dict) -> Trace:
    """A non-streamed /v1/completions answer with logprobs, in either engine's shape:
    llama-server: logprobs.content = [{id, token, logprob, top_logprobs: [{id, logprob}]}];
    vLLM (return_tokens_as_token_ids): logprobs.tokens = ["token_id:N"], top_logprobs = [{"token_id:N": lp}]."""
    ch = (body.get("choices") or [{}])[0]
    lp = ch.get("logprobs") or {}
    if isinstance(lp.get("content"), list):
        tokens = [int(e["id"]) for e in lp["content"]]
        top = [{int(t["id"]): float(t["logprob"]) for t in e.get("top_logprobs") or []} for e in lp["content"]]
    elif isinstance(lp.get("tokens"), list):
        tokens = [_token_id(s) for s in lp["tokens"]]
        top = [{_token_id(k): float(v) for k, v in (d or {}).items()} for d in lp.get("top_logprobs") or []]
    else:
        raise ValueError("no logprobs in the answer (the engine ignored the logprobs request?)")
    return Trace(tokens, top, ch.get("text") or "")


def _token_id(s: str) -> int:
    if not s.startswith("token_id:"):
        raise ValueError(f"token {s!r} is not token_id:N (vLLM needs return_tokens_as_token_ids)")
    return int(s[9:])


def trace_of(answer: dict) -> Trace:
    return Trace(list(answer["tokens"]), [{int(k): v for k, v in d.items()} for d in answer["top"]], answer.get("text", ""))


def compare_engines(outputs: dict[str, list[dict]], reference: str, min_agreement: float, max_kl: float) -> dict:
    """outputs: engine -> probe answers (same prompts, same order).  Every engine against the
    reference, per prompt; status fail when any pair fails (including prompts the engines
    tokenized differently)."""
    pairs, failures = [], []
    ref = outputs.get(reference) or []
    for eng, answers in sorted(outputs.items()):
        if eng == reference:
            continue
        for a, b in zip(ref, answers):
            if a["ids"] != b["ids"]:
                row = {"engine": eng, "prompt": a["prompt"], "status": "fail", "why": f"the engines tokenize the prompt differently ({len(a['ids'])} vs {len(b['ids'])} ids)"}
            else:
                r = compare(trace_of(a), trace_of(b))
                status, why = verdict(r, min_agreement, max_kl)
                row = {"engine": eng, "prompt": a["prompt"], **r, "status": status, "why": why, "prompt_tokens": len(a["ids"])}
            pairs.append(row)
            if row["status"] != "pass":
                failures.append(f"{eng} on {a['prompt']!r}: {row['why']}")
    return {"reference": reference, "pairs": pairs, "status": "fail" if failures else "pass", "failures": failures,
            "band": {"min_agreement": min_agreement, "max_kl": max_kl}}  # fmt: skip
