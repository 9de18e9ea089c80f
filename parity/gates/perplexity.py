"""The llama-perplexity tool: KL-divergence runs and their parsing."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

# printf("%f") prints nan/-nan/inf/-inf for non-finite values: parse them, never skip them
_NUM = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)(?:inity)?)"
_PM = rf"{_NUM}\s*(?:±|\+/-)\s*{_NUM}"
_PATTERNS = {
    "ppl_q": rf"^Mean PPL\(Q\)\s*:\s*{_PM}",
    "ppl_base": rf"^Mean PPL\(base\)\s*:\s*{_PM}",
    "ln_ppl_ratio": rf"^Mean ln\(PPL\(Q\)/PPL\(base\)\)\s*:\s*{_PM}",
    "ppl_ratio": rf"^Mean PPL\(Q\)/PPL\(base\)\s*:\s*{_PM}",
    "kld": rf"^Mean\s+KLD:\s*{_PM}",
    "same_top_p": rf"^Same top p:\s*{_PM}\s*%",
}
_SINGLE = {  # printed without an error
    "kld_p99": rf"^99\.0%\s+KLD:\s*{_NUM}",
    "kld_max": rf"^Maximum\s+KLD:\s*{_NUM}",
}
_FINAL = re.compile(rf"Final estimate: PPL = {_NUM} \+/- {_NUM}")
# the base run: "perplexity: calculating perplexity over 4 chunks"; a KL run: "kl_divergence: computing over 4 chunks"
_CHUNKS = re.compile(r"(?:calculating perplexity|computing) over (\d+) chunks")


@dataclass
class Stat:
    value: float
    err: float | None  # None: printed without one (percentiles, the maximum)


def _f(s: str) -> float:
    return float(s.replace("-nan", "nan"))


def parse(text: str) -> dict[str, Stat]:
    """Statistics a --kl-divergence run prints (or PPL of a base run)."""
    out: dict[str, Stat] = {}
    for key, pat in _PATTERNS.items():
        m = re.search(pat, text, re.M | re.I)
        if m:
            out[key] = Stat(_f(m.group(1)), _f(m.group(2)))
    for key, pat in _SINGLE.items():
        m = re.search(pat, text, re.M | re.I)
        if m:
            out[key] = Stat(_f(m.group(1)), None)
    m = _FINAL.search(text)
    if m and "ppl_q" not in out:
        out["ppl"] = Stat(_f(m.group(1)), _f(m.group(2)))
    return out


def chunks(text: str) -> int | None:
    """The chunks llama-perplexity evaluated (fewer than asked when the text ran short)."""
    m = _CHUNKS.search(text)
    return int(m.group(1)) if m else None


def is_finite(stats: dict[str, Stat], key: str) -> bool:
    return key in stats and math.isfinite(stats[key].value)


def base_argv(binary: str, model: str, text: str, n_ctx: int, chunks: int, logits: str, extra: list[str]) -> list[str]:
    return [binary, "-m", model, "-f", text, "-c", str(n_ctx), "--chunks", str(chunks), "--kl-divergence-base", logits, *extra]


def kl_argv(binary: str, model: str, logits: str, n_ctx: int, chunks: int, extra: list[str]) -> list[str]:
    return [binary, "-m", model, "-c", str(n_ctx), "--chunks", str(chunks), "--kl-divergence-base", logits, "--kl-divergence", *extra]
