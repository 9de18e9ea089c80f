"""parity.replay on the publishers' own rows (tests/data/replay, README there): every format read
into one record, a file of none of them refused in one line, the window / session sample /
speedup, prompts whose equal hash ids are equal token blocks, and the prefix reuse a slice
allows, from its hash ids and from the token ids built for it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from parity.errors import EXIT_USAGE
from parity.replay import cache
from parity.replay.blocks import Blocks, digest, pool_of
from parity.replay.formats import TraceError, detect, parse_bailian, parse_mooncake, read_trace
from parity.replay.select import scaled, select, session_keys

DATA = Path(__file__).resolve().parents[1] / "data" / "replay"
# the pool llama-server made of POOL_TEXT with the synthesized tiny llama vocab: 75 distinct ids
POOL = pool_of(json.loads((DATA / "llama-server" / "pool-tiny-llama.json").read_text()))


def trace(name: str):
    return read_trace(DATA / name)


# ------------------------------------------------------------------ formats


@pytest.mark.parametrize("name, fmt, kept, dropped", [
    ("azure-code-2023.csv", "azure", 300, {}),
    ("azure-conv-2023.csv", "azure", 300, {}),
    ("burstgpt-1.csv", "burstgpt", 383, {"no input tokens": 17}),  # the publisher's failures: 0 in, 0 out
    ("burstgpt-3.csv", "burstgpt", 187, {"no input tokens": 1}),
    ("mooncake-conversation.jsonl", "mooncake", 252, {}),
])  # fmt: skip
def test_every_sample_is_read_into_one_record(name, fmt, kept, dropped):
    t = trace(name)
    text = (DATA / name).read_text()
    assert detect(text) == t.format == fmt and len(t.requests) == kept and t.dropped == dropped
    rows = len([ln for ln in text.splitlines() if ln.strip()]) - (0 if fmt == "mooncake" else 1)
    assert kept + sum(dropped.values()) == rows  # every row read: kept or counted
    assert t.requests[0].at_s == 0 and all(a.at_s <= b.at_s for a, b in zip(t.requests, t.requests[1:]))
    assert all(r.input_tokens > 0 and r.output_tokens > 0 for r in t.requests)


def test_azure_wall_clock_with_seven_fractional_digits():
    t = trace("azure-code-2023.csv")  # 18:17:03.9799600, 18:17:04.0319600, ... 18:20:40.8181990
    assert t.requests[1].at_s == pytest.approx(0.052, abs=1e-9)
    assert t.requests[-1].at_s == pytest.approx(216.838239, abs=1e-6)
    assert (t.requests[0].input_tokens, t.requests[0].output_tokens) == (4808, 10)
    assert t.block_size is None and all(r.hash_ids is None and r.session is None for r in t.requests)


def test_burstgpt_reads_columns_by_name_and_keeps_sessions():
    one, three = trace("burstgpt-1.csv"), trace("burstgpt-3.csv")  # _3 inserts Session ID and Elapsed time at 1 and 2
    assert (one.requests[0].input_tokens, one.requests[0].output_tokens, one.requests[0].session) == (472, 18, None)
    r = three.requests[0]
    assert (r.input_tokens, r.output_tokens, r.session) == (906, 446, "1722ac82-0a46-4bf0-aa08-89794e7a2b3f")
    assert sum(x.session is None for x in three.requests) == 6  # API log rows carry no Session ID
    assert len({x.session for x in three.requests if x.session}) == 70  # 71 in the file; one held only the row left out


def test_mooncake_hash_ids_cover_each_prompt_in_512_token_blocks():
    t = trace("mooncake-conversation.jsonl")
    assert t.block_size == 512
    assert all(len(r.hash_ids) == math.ceil(r.input_tokens / 512) and r.block_size == 512 for r in t.requests)
    assert all(r.hash_ids[0] == 0 for r in t.requests)  # every request of the conversation trace starts with block 0


def test_a_wrong_block_size_is_named():
    text = (DATA / "mooncake-conversation.jsonl").read_text()
    want = r"line 1: 14 hash ids for input_length 6758 at 16 tokens a block \(423 needed\): is the block size right"
    with pytest.raises(TraceError, match=want):
        parse_mooncake(text, "m.jsonl", block_size=16)


def test_a_file_that_is_no_trace_is_one_line_exit_2(tmp_path):
    with pytest.raises(TraceError) as e:
        read_trace(DATA / "README.md")
    assert e.value.exit_code == EXIT_USAGE and "\n" not in str(e.value)
    assert "not a request trace parity reads (Azure LLM CSV" in str(e.value)
    with pytest.raises(TraceError, match="no such trace file"):
        read_trace(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.csv"
    bad.write_text((DATA / "azure-code-2023.csv").read_text().replace("4808,10", "4808,ten", 1))
    with pytest.raises(TraceError, match=r"bad.csv line 2: GeneratedTokens 'ten' is not a whole number"):
        read_trace(bad)


def test_bailian_reads_the_record_its_readme_documents():
    # alibaba-edu/qwen-bailian-usagetraces-anon README's own example record (its data files are LFS
    # pointers: tests/data/replay/README.md); its hash_ids are elided there ("1091, 6326, ..., 13148")
    root = {"chat_id": 159, "parent_chat_id": -1, "timestamp": 61.114, "input_length": 521, "output_length": 132,
            "type": "text", "turn": 2}
    t = parse_bailian(json.dumps(root) + "\n", "bailian.jsonl")
    assert t.format == "bailian" and t.block_size == 16 and t.requests[0].session == "159"
    assert detect(json.dumps(root)) == "bailian"
    elided = {**root, "hash_ids": [1089, 1090, 1091, 6326, 13148]}
    with pytest.raises(TraceError, match=r"5 hash ids for input_length 521 at 16 tokens a block \(33 needed\)"):
        parse_bailian(json.dumps(elided), "bailian.jsonl")


# ------------------------------------------------------------------ selection


def test_a_window_keeps_the_requests_in_it_times_from_its_first():
    t = trace("azure-code-2023.csv")
    sel = select(t, start_s=30.0, duration_s=60.0)
    inside = [r for r in t.requests if 30.0 <= r.at_s < 90.0]
    assert len(sel.requests) == len(inside) == sel.notes["requests"] and sel.requests[0].at_s == 0
    assert [r.line for r in sel.requests] == [r.line for r in inside]
    assert [round(x, 6) for x in scaled(sel, 10.0)] == [round(r.at_s / 10.0, 6) for r in sel.requests]


def test_a_session_sample_keeps_whole_sessions_and_is_seeded():
    t = trace("burstgpt-3.csv")
    a, b, c = select(t, sessions=10, seed=1), select(t, sessions=10, seed=1), select(t, sessions=10, seed=2)
    assert a == b and a.requests != c.requests
    chosen = set(session_keys(a.requests))
    assert len(chosen) == 10
    every = [r for r, k in zip(t.requests, session_keys(t.requests)) if k in chosen]
    assert [r.line for r in a.requests] == [r.line for r in every]  # every request of a chosen session, none other


def test_mooncake_sessions_are_the_hash_id_after_the_shared_system_block():
    t = trace("mooncake-conversation.jsonl")
    sel = select(t)
    assert sel.notes["sessions_in_window"] == 120  # how the slice was cut: 120 conversations, whole (README)
    capped = select(t, max_request_tokens=16384)
    left = capped.notes["left_out_too_long"]
    assert left["requests"] == sum(r.input_tokens + r.output_tokens > 16384 for r in t.requests)
    assert left["longest"] > 16384
    assert len(capped.requests) + left["requests"] == 252


# ------------------------------------------------------------------ prompts


def lcp(a, b) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_equal_hash_ids_are_byte_identical_blocks_and_lengths_exact():
    reqs = select(trace("mooncake-conversation.jsonl")).requests
    blocks = Blocks(POOL, seed=0, salt=0)
    prompts = [blocks.prompt(r, i) for i, r in enumerate(reqs)]
    assert [len(p) for p in prompts] == [r.input_tokens for r in reqs]
    for i in range(0, len(reqs), 7):
        for j in range(i + 1, min(len(reqs), i + 40)):
            a, b = reqs[i], reqs[j]
            shared = lcp(a.hash_ids, b.hash_ids)
            tokens = min(shared * 512, a.input_tokens, b.input_tokens)
            got = lcp(prompts[i], prompts[j])
            assert prompts[i][:tokens] == prompts[j][:tokens]
            # a different block agrees with another at its start only by chance (1 / 75 a token)
            assert got >= tokens and (got - tokens <= 4 or tokens == min(a.input_tokens, b.input_tokens))
    assert digest(prompts) == digest([Blocks(POOL, seed=0, salt=0).prompt(r, i) for i, r in enumerate(reqs)])


def test_private_prompts_and_another_salt_share_nothing_but_chance():
    reqs = select(trace("azure-conv-2023.csv")).requests
    one = [Blocks(POOL, seed=0, salt=0).prompt(r, i) for i, r in enumerate(reqs)]
    other = [Blocks(POOL, seed=0, salt=1).prompt(r, i) for i, r in enumerate(reqs)]
    assert [len(p) for p in one] == [r.input_tokens for r in reqs]
    assert max(lcp(a, b) for k, a in enumerate(one) for b in one[k + 1 :]) <= 4
    assert max(lcp(a, b) for a, b in zip(one, other)) <= 4


def test_a_pool_of_few_ids_is_refused():
    with pytest.raises(Exception, match="distinct ids of the pool text"):
        pool_of([5, 6, 7] * 20)


# ------------------------------------------------------------------ what a slice allows a cache


def test_the_mooncake_slice_reuses_48_9_percent_at_an_infinite_cache():
    reqs = select(trace("mooncake-conversation.jsonl")).requests
    hits = cache.trace_hits(reqs)
    ins = [r.input_tokens for r in reqs]
    assert cache.rate(hits, ins) == pytest.approx(0.48906, abs=5e-5)
    # the same from the blocks alone: a block seen before (the ids are chained, so it is the leading run)
    seen, anyhit = set(), 0
    for r in reqs:
        anyhit += sum(min(512, r.input_tokens - k * 512) for k, h in enumerate(r.hash_ids) if h in seen)
        seen.update(r.hash_ids)
    assert anyhit == sum(hits)
    assert cache.trace_hits(select(trace("azure-code-2023.csv")).requests) is None


def test_the_sent_ids_allow_what_the_hash_ids_say_plus_chance():
    reqs = select(trace("mooncake-conversation.jsonl")).requests
    prompts = [Blocks(POOL, seed=0).prompt(r, i) for i, r in enumerate(reqs)]
    start, ready = cache.in_order(len(prompts))
    exp = cache.expected_hits(prompts, start, ready)
    trace_hits = cache.trace_hits(reqs)
    assert all(e >= t - (1 if t == r.input_tokens else 0) for e, t, r in zip(exp, trace_hits, reqs))
    ins = [r.input_tokens for r in reqs]
    assert 0 <= cache.rate(exp, ins) - cache.rate(trace_hits, ins) < 1e-3
    blocky = cache.expected_hits(prompts, start, ready, block=16)
    assert all(b % 16 == 0 and b <= e for b, e in zip(blocky, exp))


def test_a_prompt_is_reusable_only_once_it_is_in_the_cache():
    reqs = select(trace("mooncake-conversation.jsonl")).requests[:40]
    prompts = [Blocks(POOL, seed=0).prompt(r, i) for i, r in enumerate(reqs)]
    start, ready = cache.in_order(len(prompts))
    never = cache.expected_hits(prompts, start, [None] * len(prompts))
    assert never == [0] * len(prompts)
    late = cache.expected_hits(prompts, start, [t + 1000 for t in ready])
    assert late == never
    same = cache.expected_hits([prompts[0], prompts[0]], [0.0, 2.0], [1.0, 3.0])
    assert same == [0, len(prompts[0]) - 1]  # a full hit still computes its last token
