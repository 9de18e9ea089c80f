"""Per-request records shaped like the users' h2h client's, built to match two rows the
users recorded (their per-request records were not published, only the aggregates):

- dense.json: docs/GB10_PARITY_PHASE0_RESULTS.md Phase 52 (dense Qwen3.6-27B NVFP4, n=128,
  PTOK 128, GEN 64), h2h row {"n": 128, "gen_total": 8192, "prompt_tok_total": 22785,
  "agg_tps": 139.0, "decode_agg_tps": 360.5, "decode_perseq_tps": 1.93, "prefill_tps": 629.5,
  "ttft_mean_ms": 23171.5, "ttft_max_ms": 36195.3, "wall_s": 58.921}
- moe.json: Phase 56 default arm (MoE Qwen3.6-35B-A3B NVFP4, n=128), h2h row {"n": 128,
  "gen_total": 8191, "prompt_tok_total": 17793, "agg_tps": 341.1, "decode_agg_tps": 651.2,
  "decode_perseq_tps": 3.93, "prefill_tps": 1555.9, "ttft_mean_ms": 7168.1,
  "ttft_max_ms": 11435.5, "wall_s": 24.015}  (one request stopped one token short)

Shape: requests sent at t=0 except the one whose first token comes last (h2h opens its
connections one after the other, so the last request leaves late: that is why their
wall_s exceeds ttft_max + the decode window); TTFTs spread evenly below the max; early
starters finish after one common decode duration (solved for the recorded decode_perseq_tps),
the others run to the end of the batch.  Each record: send, first, end (seconds), tokens,
prompt_tokens; token arrivals are spread evenly from first to end.  Run this file to
regenerate (deterministic)."""

import json
from pathlib import Path


def build(n, gen, short, prompt_each, prompt_extra, wall, ttft_max, window, ttft_mean, perseq, ttft_hi):
    late_send = wall - window - ttft_max
    recs = [{"send": late_send, "first": late_send + ttft_max, "end": wall, "tokens": gen, "prompt_tokens": prompt_each + prompt_extra}]
    others = n - 1
    want_sum = n * ttft_mean - ttft_max

    def firsts(a):
        return [a + (ttft_hi - a) * (i + 0.5) / others for i in range(others)]

    lo, hi = 0.0, ttft_hi
    for _ in range(200):  # the lowest TTFT that gives the recorded mean
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if sum(firsts(mid)) < want_sum else (lo, mid)
    fs = firsts((lo + hi) / 2)
    toks = [gen - (1 if i < short else 0) for i in range(others)]

    def ends(d):  # early starters finish early; the rest run to the end of the batch
        return [min(wall - 0.05 * (i + 0.5) / others, f + d) for i, f in enumerate(fs)]

    def mean_rate(d):
        r = [(t - 1) / (e - f) for t, f, e in zip(toks, fs, ends(d))] + [(gen - 1) / window]
        return sum(r) / len(r)

    lo, hi = 1.0, wall  # a longer decode duration gives a lower mean rate
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mean_rate(mid) > perseq else (lo, mid)
    es = ends((lo + hi) / 2)
    for f, e, t in zip(fs, es, toks):
        recs.append({"send": 0.0, "first": f, "end": e, "tokens": t, "prompt_tokens": prompt_each})
    return recs


here = Path(__file__).resolve().parent
rows = {
    "dense": dict(n=128, gen=64, short=0, prompt_each=178, prompt_extra=1, wall=58.921, ttft_max=36.1953, window=8064 / 360.5,
                  ttft_mean=23.1715, perseq=1.93, ttft_hi=36.1),
    "moe": dict(n=128, gen=64, short=1, prompt_each=139, prompt_extra=1, wall=24.015, ttft_max=11.4355, window=8063 / 651.2,
                ttft_mean=7.1681, perseq=3.93, ttft_hi=11.4),
}
if __name__ == "__main__":
    for name, kw in rows.items():
        (here / f"{name}.json").write_text(json.dumps(build(**kw), indent=0) + "\n")
