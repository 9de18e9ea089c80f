"""The series' trace envs read back (parity.traces): each format's parse_*() on lines the users'
docs quote and lines written from the patches' format strings, the [L5INSTR] counters on the
series' real output (through the md5 gate's parser), and per arm of a serving or bench run the
summary that lands in summary.json / bench.json (tests/data/traces/README.md says where each
line comes from)."""

from __future__ import annotations

import json
from pathlib import Path

from parity.gates import completion
from parity.results.model import PointRow
from parity.traces import formats as f
from parity.traces import summary as s

DATA = Path(__file__).resolve().parents[1] / "data"
DOCS = (DATA / "traces" / "users-docs-quoted.txt").read_text().splitlines()
PATCHES = (DATA / "traces" / "patch-format-strings.txt").read_text().splitlines()
BENCH = (DATA / "traces" / "h100-paged-bench-ntg8-b0.log").read_text()


def test_the_users_quoted_lines_parse():
    tag, shape = f.parse_mmq_shape(DOCS[0])
    assert tag == "[LLAMA_MOE_MMQ_SHAPE]" and shape == {
        "type": 40,
        "moe": 1,
        "ncols_dst": 104,
        "nchannels_x": 256,
        "ncols_max": 13,
        "n_active_est": 104,
        "density": 1,
        "mmq_x_max": 128,
        "mmq_x_lim": 64,
        "mmq_x_best": 16,
        "mmq_y": 128,
        "stream_k": 1,
    }
    assert f.parse_spec_shape(DOCS[1]) == (
        "spec shape:",
        {
            "kind": "verify",
            "batch_before": 0,
            "rows": 4,
            "outputs": 4,
            "draft": 3,
            "spec_i_first": 0,
            "spec_i_last": 3,
            "pos0": 5,
            "slot_tokens": 5,
        },
    )
    tag, adm = f.parse_serving_admission(DOCS[4])
    assert (adm["steps"], adm["decode_only_steps"], adm["decode_tokens"], adm["prompt_tokens"]) == (76, 0, 8064, 22913)
    assert adm["prompt_hist"] == {"0": 63, "1-64": 1, "513+": 12}
    assert adm["decode_hist"] == {"0": 3, "1-63": 10, "64-127": 10, "128-255": 53}
    assert (
        sum(adm["waiting_hist"].values()) == adm["steps"] == sum(adm["decode_hist"].values())
    )  # every step in one bucket
    assert f.parse_serving_admission(DOCS[6])[1]["ttft_deferred_decode_slots"] == 660  # the opt-in trace's field


def test_the_format_strings_lines_parse_each_under_its_env():
    """Each line is read by exactly one registered format, the one whose env the patch getenv()s."""
    owner = {}
    for line in PATCHES:
        hits = [env for env, fmt in f.TRACES.items() if fmt.parse(line) is not None]
        assert len(hits) == 1, (line, hits)
        owner.setdefault(hits[0], []).append(f.TRACES[hits[0]].parse(line))
    assert list(owner) == [
        "LLAMA_QUANT_TRACE",
        "LLAMA_MOE_WHOLE_PATTERN_TRACE",
        "LLAMA_MOE_WHOLE_PATTERN_EARLY_TRACE",
        "LLAMA_MOE_WHOLE_PATTERN_EXEC_TRACE",
        "LLAMA_BF16_STREAM_TRACE",
        "LLAMA_W4A16_DEBUG",
        "LLAMA_KV_PAGED_DISPATCH_LOG",
        "LLAMA_KV_PAGED_DEBUG",
    ]
    q = owner["LLAMA_QUANT_TRACE"][0][1]
    assert (q["route"], q["src0_type"], q["native_fp4"], q["K"], q["experts"]) == ("mmq_id", "nvfp4", 1, 512, 8)
    assert [r[1]["event"] for r in owner["LLAMA_BF16_STREAM_TRACE"]] == ["engaged", "miss"]
    assert owner["LLAMA_BF16_STREAM_TRACE"][1][1]["miss_op"] == "MUL_MAT"
    assert owner["LLAMA_W4A16_DEBUG"][0][1] == {
        "event": "engaged",
        "total_rows": 1024,
        "n_experts": 256,
        "K": 2048,
        "N": 512,
        "n_tiles": 96,
        "max_tpe": 23,
        "multi_tile_experts": 0,
    }
    assert owner["LLAMA_KV_PAGED_DISPATCH_LOG"] == [("[paged] decode", {"route": "VEC", "q_ne": "256,1,16,1"})]
    debug = owner["LLAMA_KV_PAGED_DEBUG"]
    assert [t for t, _ in debug] == [
        "[paged] placed",
        "[paged] placed",
        "[paged-attn]",
        "[paged-alloc]",
        "[paged-alloc]",
    ]
    assert debug[1][1] == {"tokens": 3, "nblk": 2, "base": 16, "stream": 0} and debug[2][1]["n_gather"] == 32


def test_a_line_of_another_trace_is_not_read():
    assert f.parse_whole_pattern("[LLAMA_MOE_WHOLE_PATTERN_EARLY] supported=1") is None
    assert f.parse_quant_trace(DOCS[0]) is None and f.parse_serving_admission(PATCHES[0]) is None


def test_which_envs_turn_a_trace_on():
    env = {
        "LLAMA_KV_PAGED": "1",
        "LLAMA_MOE_MMQ_SHAPE_TRACE": "4096",
        "LLAMA_QUANT_TRACE": "0",
        "LLAMA_SERVING_TRACE": "",
        "LLAMA_MUL_MAT_ROUTE_TRACE": "8192",
        "LLAMA_NEW_THING_TRACE": "1",
    }
    on = f.trace_envs(env)
    assert list(on) == [
        "LLAMA_MOE_MMQ_SHAPE_TRACE",
        "LLAMA_MUL_MAT_ROUTE_TRACE",
        "LLAMA_NEW_THING_TRACE",
    ]  # "0", "" are off
    assert on["LLAMA_MOE_MMQ_SHAPE_TRACE"].verified and not on["LLAMA_MUL_MAT_ROUTE_TRACE"].verified
    route = on["LLAMA_MUL_MAT_ROUTE_TRACE"]  # no line of it is quoted: the series' [NAME] convention
    assert route.parse("[LLAMA_MUL_MAT_ROUTE] route=mat_f type=30 ne1=12") == (
        "[LLAMA_MUL_MAT_ROUTE]",
        {"route": "mat_f", "type": 30, "ne1": 12},
    )
    assert "README row 0061" in route.source and "convention" in route.source
    assert on["LLAMA_NEW_THING_TRACE"].parse("[LLAMA_NEW_THING_TRACE] a=1") == ("[LLAMA_NEW_THING_TRACE]", {"a": 1})
    assert not f.is_on("0") and not f.is_on(" ") and f.is_on("1") and f.is_on("yes")


def test_the_l5instr_counters_are_the_md5_gates_parser():
    """One parser: parity.gates.completion.series_counters, here on the series' real bench log and a
    real line printed mid-line (a progress line without its newline)."""
    assert s.series_counters is completion.series_counters
    assert s.graph_reuse(completion.series_counters(BENCH)) == {"reused": 7, "steps": 17, "pct": 41.18}
    tail = (DATA / "runtime" / "h100-real-series-llama-perplexity-tail.txt").read_text()
    assert s.graph_reuse(completion.series_counters(tail)) == {"reused": 0, "steps": 2, "pct": 0.0}
    assert s.graph_reuse({"get_block_table": 0, "set_inputs": 1, "hostproc": 1}) is None  # before patch 0040


def test_summarize_counts_lines_and_histograms_fields():
    log = "\n".join(
        ["noise", DOCS[0], DOCS[0].replace("mmq_x_best=16", "mmq_x_best=64"), DOCS[0], *DOCS[4:6], "more noise"]
    )
    out = s.summarize(
        log + "\n" + BENCH, {"LLAMA_MOE_MMQ_SHAPE_TRACE": "4096", "LLAMA_SERVING_TRACE": "1", "LLAMA_QUANT_TRACE": "32"}
    )
    by = {t["env"]: t for t in out["traces"]}
    mmq = by["LLAMA_MOE_MMQ_SHAPE_TRACE"]
    assert (mmq["lines"], mmq["tags"], mmq["value"]) == (3, {"[LLAMA_MOE_MMQ_SHAPE]": 3}, "4096")
    assert mmq["fields"]["mmq_x_best"] == {
        "n": 3,
        "distinct": 2,
        "values": [[16, 2], [64, 1]],
        "other": 0,
        "min": 16,
        "median": 16,
        "max": 64,
    }
    assert mmq["fields"]["type"]["values"] == [[40, 3]]
    adm = by["LLAMA_SERVING_TRACE"]  # printed once, at exit: the last line is the summary
    assert adm["once"] and adm["lines"] == 2 and adm["last"]["ttft_deferred_decode_slots"] == 0 and "fields" not in adm
    assert (
        by["LLAMA_QUANT_TRACE"]["lines"] == 0
        and "was set, but the log holds no line of it" in by["LLAMA_QUANT_TRACE"]["note"]
    )
    assert out["graph_reuse"] == {"reused": 7, "steps": 17, "pct": 41.18}


def test_text_fields_are_counted_and_capped():
    recs = [{"route": r, "src0": f"blk.{i}.w"} for i, r in enumerate(["mmq"] * 5 + ["mat_f"] * 3 + ["op_cublas"] * 2)]
    h = s.histograms(recs, limit=2)
    assert h["route"] == {
        "n": 10,
        "distinct": 3,
        "values": [["mmq", 5], ["mat_f", 3]],
        "other": 2,
    }  # no min/median of text
    assert h["src0"]["distinct"] == 10 and h["src0"]["other"] == 8


def write_arm(run: Path, engine: str, repeat: int, env: dict, log: str) -> None:
    (run / "servers").mkdir(parents=True, exist_ok=True)
    (run / "servers" / f"{engine}-r{repeat}.json").write_text(json.dumps({"argv": ["llama-server"], "env": env}))
    (run / "servers" / f"{engine}-r{repeat}.log").write_text(log)


def test_serving_arms_carry_their_traces_and_a_lone_point_its_graph_reuse(tmp_path):
    write_arm(tmp_path, "paged", 0, {"LLAMA_KV_PAGED": "1", "LLAMA_MOE_MMQ_SHAPE_TRACE": "4"}, f"{DOCS[0]}\n{BENCH}")
    write_arm(tmp_path, "stock", 0, {}, "no series here\n")
    write_arm(tmp_path, "paged", 1, {"LLAMA_KV_PAGED": "1"}, BENCH)
    arms = [
        {
            "engine": "paged",
            "repeat": 0,
            "rows": [PointRow("paged", 8, repeat=0), PointRow("paged", 32, repeat=0)],
        },
        {"engine": "stock", "repeat": 0, "rows": [PointRow("stock", 8, repeat=0)]},
        {"engine": "paged", "repeat": 1, "rows": [PointRow("paged", 8, repeat=1)]},
    ]
    found = s.for_serving(tmp_path, arms)
    assert [(t["engine"], t["repeat"], t["points"]) for t in found] == [
        ("paged", 0, [8, 32]),
        ("paged", 1, [8]),
    ]  # stock: nothing
    assert found[0]["traces"][0]["lines"] == 1 and found[0]["log"] == "servers/paged-r0.log"
    rows = [r for a in arms for r in a["rows"]]
    s.one_point_reuse(found, rows)
    assert [r.metric("graph_reuse_pct") for r in rows] == [
        None,
        None,
        None,
        41.18,
    ]  # only the server that served one point


def test_bench_blocks_read_the_log_their_rows_came_from(tmp_path):
    (tmp_path / "bench-paged-b0.log").write_text("first try, cut short\n")
    (tmp_path / "bench-paged-b0-retry1.log").write_text(BENCH)
    (tmp_path / "bench-paged-b1.log").write_text(BENCH)
    (tmp_path / "bench-paged-bf16-b0.log").write_text(BENCH)  # another arm whose name starts alike
    (tmp_path / "bench-stock-b0.log").write_text("stock\n")
    found = s.for_bench(tmp_path, ["paged", "stock"], {"paged": {"LLAMA_KV_PAGED": "1"}, "stock": {}})
    assert [(t["arm"], t["block"], t["log"]) for t in found] == [
        ("paged", 0, "bench-paged-b0-retry1.log"),
        ("paged", 1, "bench-paged-b1.log"),
    ]
    assert all(t["graph_reuse"]["pct"] == 41.18 for t in found)
