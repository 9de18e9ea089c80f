"""The lever loop's pure parts: the map (read, append keeping the users' comments, render in
their layout, filter, refusal), the arms' derivation, the verdict mapping, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_parity, shared_or_skip
from parity.errors import ConfigError, UsageError
from parity.levers import map as levermap
from parity.levers.ab import FLAT, GO, INCONCLUSIVE, NO_GO, decide
from parity.levers.arms import derive, make_lever, parse_env

PIN = "0ed235ea2c17a19fc8238668653946721ed136fd"


def _row(lever="LLAMA_X=1", verdict="FLAT", hw="hopper", pin=PIN, **kw) -> dict:
    return {"lever": lever, "kind": "runtime", "hardware_class": hw, "pin": pin, "verdict": verdict, "key_number": "S_TG B/A 1.0010 [0.9900, 1.0120] at PP=128 TG=128 B=32 (6 blocks)",
            "gates": "md5 4/4 equal", "gate_kind": "BE", "artifact": "/runs/20261101_ab", "date": "2026-11-01", **kw}  # fmt: skip


# ------------------------------------------------------------------ map


def test_map_append_keeps_comments_and_edits(tmp_path):
    path = tmp_path / "m.yaml"
    assert levermap.load(path) == []
    levermap.append(path, _row(verdict="INCONCLUSIVE"))
    text = path.read_text()
    assert text.startswith("# Lever map") and levermap.load(path)[0]["verdict"] == "INCONCLUSIVE"
    # the users edit: a verdict in their words, a note, a comment of their own
    path.write_text(text.replace("verdict: INCONCLUSIVE", "verdict: REJECTED  # too noisy to ship\n  note: see phase 70") + "# keep this comment\n")
    rows = levermap.append(path, _row(lever="series-without=0043", verdict="GO"))
    assert [r["verdict"] for r in rows] == ["REJECTED", "GO"] and levermap.load(path) == rows
    assert "# keep this comment" in path.read_text() and "# too noisy to ship" in path.read_text() and levermap.load(path)[0]["note"] == "see phase 70"
    assert "ratio" not in levermap.load(path)[1]  # None fields are left out, not written as null


def test_map_append_keeps_crlf_line_ends(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_bytes(b"# ours\r\nlevers:\r\n- lever: A=1\r\n  verdict: GO\r\n")
    levermap.append(path, _row(lever="B=1"))
    raw = path.read_bytes()
    assert raw.startswith(b"# ours\r\nlevers:\r\n- lever: A=1\r\n  verdict: GO\r\n- lever: B=1\r\n") and b"\n" not in raw.replace(b"\r\n", b"")


def test_map_that_no_longer_ends_in_its_list_keeps_comments_and_keys(tmp_path):
    """It used to be rewritten whole from its data (comments and the other keys' layout lost)."""
    path = tmp_path / "m.yaml"
    path.write_text("# ours\nlevers:\n- lever: A=1\n  verdict: GO  # shipped in 0.3\nowner: perf team  # ask them\n")
    rows = levermap.append(path, _row(lever="B=1"))
    assert [r["lever"] for r in rows] == ["A=1", "B=1"] and [r["lever"] for r in levermap.load(path)] == ["A=1", "B=1"]
    text = path.read_text()
    assert text.startswith("# ours\nlevers:\n- lever: A=1\n  verdict: GO  # shipped in 0.3\n- lever: B=1\n") and text.endswith("owner: perf team  # ask them\n")


@pytest.mark.parametrize("text, where", [("levers: [\n", "YAML syntax"), ("- a\n- b\n", "levers"), ("levers:\n- verdict: GO\n", "levers[0]")])
def test_map_broken_file_is_a_config_error(tmp_path, text, where):
    path = tmp_path / "m.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        levermap.load(path)
    assert where in str(e.value) and str(path) in str(e.value)


def test_map_render_in_the_users_layout():
    md = levermap.render_markdown([_row(verdict="GO"), _row(lever="series-without=0043", verdict="REJECTED", reopen=None), _row(lever="L=2", verdict="FLAT", reopen="new pin")])
    lines = md.splitlines()
    head = lines.index("## Master lever table")
    assert lines[head + 2].startswith("| # | Lever | What it changes | Hardware | Pin / series | Gate | Key number [95 % interval] | Verdict | Artifact | Date |")
    assert lines[head + 4].startswith("| 1 | **LLAMA_X=1** |") and "| 0ed235ea / - |" in lines[head + 4] and "**GO**" in lines[head + 4]
    assert "**FLAT** (reopened: new pin)" in md
    drop = lines.index("## Drop / closed (do NOT pursue)")
    closed = lines[drop + 4:]
    assert lines[drop + 2] == "| Lever | Why dropped |" and [c.split(" | ")[0] for c in closed] == ["| series-without=0043", "| L=2"]
    assert "**REJECTED** - S_TG B/A 1.0010 [0.9900, 1.0120]" in closed[0]


def test_map_filter():
    rows = [_row(verdict="GO"), _row(lever="B=1", verdict="flat", hw="cpu_only"), _row(lever="C=1", verdict="REJECTED")]
    assert [r["lever"] for r in levermap.filter_rows(rows, verdict="FLAT")] == ["B=1"]
    assert [r["lever"] for r in levermap.filter_rows(rows, verdict="go,rejected")] == ["LLAMA_X=1", "C=1"]
    assert [r["lever"] for r in levermap.filter_rows(rows, hardware="hopper")] == ["LLAMA_X=1", "C=1"]
    assert [r["lever"] for r in levermap.filter_rows(rows, lever="b=")] == ["B=1"]
    assert levermap.filter_rows(rows) == rows


@pytest.mark.parametrize("verdict", ["REJECTED", "FLAT", "NO-GO", "dropped", "Rejected"])
def test_map_refuses_a_closed_lever_on_the_same_hardware_and_pin(tmp_path, verdict):
    rows = [_row(verdict=verdict)]
    with pytest.raises(levermap.LeverRefused) as e:
        levermap.refuse_if_closed(rows, "LLAMA_X=1", "hopper", PIN, None, tmp_path / "m.yaml")
    msg = str(e.value)
    assert e.value.exit_code == 2 and "\n" not in msg
    assert all(s in msg for s in ("2026-11-01", verdict, "S_TG B/A 1.0010 [0.9900, 1.0120]", "/runs/20261101_ab", "--reopen REASON", "hopper"))
    assert levermap.refuse_if_closed(rows, "LLAMA_X=1", "hopper", PIN, "retry on the new driver", tmp_path) == rows[0]  # reopened
    # an empty reason is no reason
    with pytest.raises(levermap.LeverRefused):
        levermap.refuse_if_closed(rows, "LLAMA_X=1", "hopper", PIN, "  ", tmp_path)


def test_map_does_not_refuse_elsewhere_or_when_reopened_since(tmp_path):
    rows = [_row(verdict="REJECTED")]
    for lever, hw, pin in (("LLAMA_X=2", "hopper", PIN), ("LLAMA_X=1", "gb10_or_workstation_blackwell", PIN), ("LLAMA_X=1", "hopper", "f" * 40)):
        assert levermap.refuse_if_closed(rows, lever, hw, pin, None, tmp_path) is None
    for open_verdict in ("GO", "INCONCLUSIVE", "SHIPPED", "default-off"):
        assert levermap.refuse_if_closed([*rows, _row(verdict=open_verdict)], "LLAMA_X=1", "hopper", PIN, None, tmp_path) is None  # the latest row decides


# ------------------------------------------------------------------ verdicts


def _cell(point, ratio, low, high, outcome, **kw):
    return {"point": point, "ratio": ratio, "low": low, "high": high, "outcome": outcome, "n_blocks": 6, **kw}


GATE_OK = {"ok": True, "problem": None}


def test_decide_go_no_go_flat_inconclusive():
    eq = _cell("B=1", 1.001, 0.99, 1.01, "equivalent")
    d = decide(GATE_OK, [eq, _cell("B=32", 1.08, 1.05, 1.11, "improved")], "s_tg")
    assert d["verdict"] == GO and d["key"]["point"] == "B=32" and d["key"]["text"] == "S_TG B/A 1.0800 [1.0500, 1.1100] at B=32 (6 blocks)"
    d = decide(GATE_OK, [_cell("B=1", 0.9, 0.85, 0.95, "regressed"), _cell("B=32", 1.08, 1.05, 1.11, "improved")], "s_tg")
    assert d["verdict"] == NO_GO and d["key"]["point"] == "B=1" and "regressed at B=1" in d["why"]
    d = decide(GATE_OK, [eq, _cell("B=32", 0.999, 0.985, 1.013, "equivalent")], "s_tg")
    assert d["verdict"] == FLAT and d["key"]["point"] == "B=32"
    # noise is never FLAT: an interval that holds 1 but reaches past the threshold is INCONCLUSIVE
    d = decide(GATE_OK, [eq, _cell("B=32", 1.0, 0.9, 1.1, "inconclusive", blocks_needed=40)], "s_tg")
    assert d["verdict"] == INCONCLUSIVE and d["key"]["point"] == "B=32" and "40 blocks" in d["why"]
    assert decide(GATE_OK, [], "s_tg")["verdict"] == INCONCLUSIVE
    one = decide(GATE_OK, [_cell("B=1", 1.3, None, None, "inconclusive", n_blocks=1)], "s_tg")  # one block: a ratio, no interval
    assert one["verdict"] == INCONCLUSIVE and one["key"]["text"] == "S_TG B/A 1.3000 (no interval: fewer than 2 blocks with both arms) at B=1"


def test_decide_red_gate_is_no_go_whatever_the_numbers():
    gate = {"ok": False, "problem": "md5 pre tiny/paged differ: paged aaa != paged+lever bbb"}
    d = decide(gate, [_cell("B=32", 1.2, 1.1, 1.3, "improved")], "s_tg")
    assert d["verdict"] == NO_GO and d["why"] == f"gate red: {gate['problem']}" and d["key"]["ratio"] == 1.2


# ------------------------------------------------------------------ arms


def test_parse_env_and_lever_names():
    assert parse_env(["A=1", "B_2=x=y", "C="]) == {"A": "1", "B_2": "x=y", "C": ""}
    for bad in ("NOEQUALS", "=1", "1A=2", "A-B=1"):
        with pytest.raises(UsageError, match="NAME=VALUE"):
            parse_env([bad])
    with pytest.raises(UsageError, match="twice"):
        parse_env(["A=1", "A=2"])
    assert make_lever(["LLAMA_X=1"], None, None, None, None).label() == "LLAMA_X=1"
    lv = make_lever(None, ["0055", "43"], "0050", "/x/series-b/", None)
    assert lv.kind == "build" and lv.label() == "series=series-b series-until=0050 series-without=0055 series-without=43"
    assert make_lever(["A=1"], None, None, None, "my lever").label() == "my lever"
    with pytest.raises(UsageError, match="no lever given"):
        make_lever(None, None, None, None, None)
    with pytest.raises(UsageError, match="not a patch number"):
        make_lever(None, ["55a"], None, None, None)


def _profile(**engines):
    from parity.config import profile_from_dict

    base = {"sources": {"s": {"kind": "path", "path": "/nonexistent"}}, "engines": {"paged": {"source": "s", "series": "/x/series", "env": {"K": "1"}, "paths": {"paged": {"P": "1"}}},
                                                                               "stock": {"source": "s"}, "v": {"kind": "vllm"}, **engines}}  # fmt: skip
    return profile_from_dict(base, "t")


def test_derive_runtime_and_build_arms():
    prof = _profile()
    p2, a, b = derive(prof, "paged", make_lever(["LLAMA_X=1"], None, None, None, None))
    assert (a, b) == ("paged", "paged+lever") and "paged+lever" not in prof.engines  # the caller's profile is untouched
    eb = p2.engine(b)
    assert eb.env == {"K": "1", "LLAMA_X": "1"} and eb.paths == {"paged": {"P": "1", "LLAMA_X": "1"}} and eb.series == "/x/series" and not eb.series_without
    assert prof.engine("paged").paths == {"paged": {"P": "1"}}
    p5, _, b = derive(prof, "paged", make_lever(["P=0"], None, None, None, None))  # a path's own env does not hide the lever
    assert p5.engine(b).paths == {"paged": {"P": "0"}}
    assert p2.serving.reference_engine == "paged" and p2.engine("paged").env == {"K": "1"}
    p3, _, b = derive(prof, "paged", make_lever(None, ["0055"], "0054", None, None))
    assert p3.engine(b).series_without == ["0055"] and p3.engine(b).series_until == "0054" and p3.engine(b).env == {"K": "1"}
    p4, _, b = derive(prof, "stock", make_lever(None, None, None, "/other/series", None))
    assert p4.engine(b).series == "/other/series"


@pytest.mark.parametrize("engine, lever, msg", [
    ("v", (["A=1"], None, None, None), "needs a llama engine"),
    ("stock", (None, ["0055"], None, None), "has no patch series"),
    ("nope", (["A=1"], None, None, None), "no such engine"),
])  # fmt: skip
def test_derive_refuses(engine, lever, msg):
    with pytest.raises(UsageError, match=msg):
        derive(_profile(), engine, make_lever(*lever, None))


@pytest.mark.parametrize("env, same", [
    (["K=1"], True),  # the engine's own env
    (["P=1"], True),  # what the measured (default) path already sets: LLAMA_KV_PAGED=1 on a paged path
    (["K=1", "P=1"], True),
    (["P=0"], False),
    (["X=1"], False),
    (["K=2"], False),
])  # fmt: skip
def test_identical_arms_are_named(env, same):
    from parity.levers.arms import identical

    prof = _profile(paged={"source": "s", "series": "/x/series", "env": {"K": "1"}, "paths": {"paged": {"P": "1"}, "off": {}}, "default_path": "paged"})
    p2, a, b = derive(prof, "paged", make_lever(env, None, None, None, None))
    why = identical(p2, a, b, {a: {"key": "k1"}, b: {"key": "k1"}})
    assert (why is not None) == same
    if same:
        assert why == "arm B would be arm A: the same build k1 and the same env on path paged (K=1 P=1)"
    assert identical(p2, a, b, {a: {"key": "k1"}, b: {"key": "k2"}}) is None  # another build is another arm


def test_identical_prebuilt_arms():
    from parity.levers.arms import identical

    prof = _profile(pre={"bin_dir": "/opt/llama/bin", "env": {"A": "1"}})
    p2, a, b = derive(prof, "pre", make_lever(["A=1"], None, None, None, None))
    assert identical(p2, a, b, {a: {"prebuilt": "/opt/llama/bin"}, b: {"prebuilt": "/opt/llama/bin"}}) == \
        "arm B would be arm A: the same prebuilt /opt/llama/bin and the same env on its env (A=1)"


def test_runtime_arms_share_a_build_build_arms_do_not():
    shared_or_skip("localai-paged/Makefile", "localai-paged/patches/paged")
    from parity.config import load_profile
    from parity.levers.arms import check_build

    prof = load_profile("localai-paged-cpu")
    p, a, b = derive(prof, "paged", make_lever(["LLAMA_PAGED_NO_BT_CACHE=1"], None, None, None, None))
    assert check_build(p, a)["key"] == check_build(p, b)["key"]
    p, a, b = derive(prof, "paged", make_lever(None, ["0055"], None, None, None))
    ka, kb = check_build(p, a), check_build(p, b)
    assert ka["key"] != kb["key"] and (ka["patches"], kb["patches"]) == (46, 45) and kb["series_selection"] == "without 0055"
    p, a, b = derive(prof, "paged", make_lever(None, None, "0054", None, None))
    assert check_build(p, b)["key"] == kb["key"]  # the same patches, the same build
    p, a, b = derive(prof, "paged", make_lever(None, ["0005"], None, None, None))
    with pytest.raises(UsageError, match="no patch 0005 to leave out"):
        check_build(p, b)


# ------------------------------------------------------------------ CLI: bad input, one line, exit 2


@pytest.mark.parametrize("args, needle", [
    (["--env", "LLAMA_X"], "NAME=VALUE"),
    ([], "no lever given"),
    (["--series-without", "9999"], "no patch 9999 to leave out"),
    (["--series-until", "x1"], "not a patch number"),
    (["--series", "/nonexistent/series"], "not a directory"),
    (["--env", "A=1", "--engine", "nope"], "no such engine"),
    (["--env", "A=1", "--npl", "0"], "--npl"),
    (["--env", "A=1", "--gate-paths", "sideways"], "no path 'sideways'"),
    (["--env", "LLAMA_KV_PAGED=1"], "arm B would be arm A: the same build"),  # the paged path sets it already
    (["--env", "GGML_NO_BACKTRACE=1"], "arm B would be arm A"),  # the engine's own env
    (["--env", "LLAMA_X=1", "--aa"], "--aa: the arms differ"),
    (["--env", "LLAMA_X=1", "--map", "/etc/hostname/lever_map.yaml"], "not writable"),  # a file where its directory should be
])  # fmt: skip
def test_ab_bad_input_one_line_exit_2(tmp_path, args, needle):
    shared_or_skip("localai-paged/Makefile", "localai-paged/patches/paged")
    r = run_parity("--artifacts", str(tmp_path), "ab", "--profile", "localai-paged-cpu", *args, "--dry-run")
    assert r.returncode == 2 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not list(tmp_path.glob("*/manifest.json"))  # refused before any run dir


def test_ab_lossy_without_kl_reference(tmp_path):
    prof = tmp_path / "p.yaml"
    prof.write_text("extends: smoke\ngates: {kl: {reference: null}}\n")
    r = run_parity("--artifacts", str(tmp_path), "ab", "--profile", str(prof), "--engine", "paged", "--env", "A=1", "--lossy", "--dry-run")
    assert r.returncode == 2 and "no KL reference (gates.kl.reference" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.parametrize("args, rc, said", [
    (["--serving", "--until-ci", "decode_agg_tps=1"], 0, "decode_agg_tps <= 1%"),
    (["--serving", "--until-ci", "2,ttft_mean_ms=10"], 0, "ttft_mean_ms <= 10%, every other headline <= 2%"),
    (["--until-ci", "s_tg=1"], 0, "every headline half-width <= 1%"),
    (["--serving", "--until-ci", "s_tg=1"], 2, "s_tg is not a headline metric the stop rule watches (stats.metrics: "),
    (["--serving", "--until-ci", "bogus_tps=1"], 2, "bogus_tps is not a headline metric the stop rule watches"),
    (["--until-ci", "decode_agg_tps=1"], 2, "decode_agg_tps is not what llama-batched-bench's stop rule watches"),
])  # fmt: skip
def test_ab_until_ci_names_the_metrics_its_measurement_watches(tmp_path, args, rc, said):
    """Issue 56 N12: `ab --serving --until-ci decode_agg_tps=1` was refused as "not what
    llama-batched-bench watches"; with --serving the snapshot's validator decides (serving metrics
    in, s_tg and unknown names out), without it batched-bench's."""
    from inproc import cli

    r = cli("--artifacts", tmp_path, "ab", "--profile", "smoke", "--env", "LLAMA_X=1", *args, "--dry-run", "--json")
    assert r.rc == rc, r.err
    if rc == 0:
        assert said in json.loads(r.out)["measure"]["blocks"]
    else:
        assert len(r.error_lines()) == 1 and said in r.err


def test_levers_missing_map_and_empty_default(tmp_path):
    r = run_parity("--artifacts", str(tmp_path), "levers", "--map", str(tmp_path / "nope.yaml"))
    assert r.returncode == 2 and "no such file" in r.stderr
    r = run_parity("--artifacts", str(tmp_path), "levers", "--json")
    d = json.loads(r.stdout)
    assert r.returncode == 0 and (d["map"], d["rows"], d["count"]) == (str(tmp_path / "lever_map.yaml"), [], 0) and "## Master lever table" in d["markdown"]


def test_levers_json_never_prints_a_bare_nan(tmp_path):
    """A row a hand edit (or an older parity) left with .nan / .inf / an unquoted date: the
    listing is valid JSON, the value is null and the row says why; a warning names the row."""
    path = tmp_path / "lever_map.yaml"
    path.write_text("levers:\n- lever: A=1\n  verdict: GO\n  ratio: .nan\n  high: -.inf\n  date: 2026-11-01\n- lever: B=1\n  verdict: FLAT\n  ratio: 1.002\n")
    r = run_parity("--artifacts", str(tmp_path), "levers", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout, parse_constant=lambda c: pytest.fail(f"bare {c} in --json output"))
    a, b = d["rows"]
    assert a["ratio"] is None and a["high"] is None and a["date"] == "2026-11-01" and b["ratio"] == 1.002
    assert a["problems"] == "ratio is nan (not a finite number); high is -inf (not a finite number)" and "problems" not in b
    assert d["problems"] == ["row 1 (lever 'A=1'): ratio is nan (not a finite number); high is -inf (not a finite number)"]
    assert "row 1 (lever 'A=1'): ratio is nan" in r.stderr
    human = run_parity("--artifacts", str(tmp_path), "levers")
    assert human.returncode == 0 and "warning: lever map" in human.stderr + human.stdout


def test_map_append_names_a_non_finite_number_instead_of_writing_it(tmp_path):
    path = tmp_path / "m.yaml"
    rows = levermap.append(path, _row(ratio=float("nan"), low=float("-inf"), high=1.01))
    assert ".nan" not in path.read_text() and ".inf" not in path.read_text()
    (r,) = levermap.load(path)
    assert rows == [r] and "ratio" not in r and "low" not in r and r["high"] == 1.01
    assert r["problems"] == "ratio was nan (not a finite number); low was -inf (not a finite number)"


# ------------------------------------------------------------------ dry run on the H100 profile


H100 = str(Path(__file__).resolve().parents[2] / "campaigns" / "profiles" / "h100-noise.yaml")


@pytest.mark.parametrize("lever, same_build", [(["--env", "LLAMA_MOE_NO_FORCE_GRAPHS=1"], True), (["--series-without", "0043"], False)])
def test_ab_dry_run_h100_noise(tmp_path, lever, same_build):
    shared_or_skip("localai-paged/Makefile", "localai-paged/patches/paged")
    r = run_parity("--artifacts", str(tmp_path), "ab", "--profile", H100, "--engine", "paged", *lever, "--model", "moe-big-q8", "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    bld = d["builds"]
    assert (bld["paged"]["key"] == bld["paged+lever"]["key"]) is same_build and bld["paged"]["patches"] == 46
    assert bld["paged+lever"]["patches"] == (46 if same_build else 45)
    m = d["measure"]
    assert m["kind"] == "batched-bench" and m["model"] == "moe-big-q8" and m["npl"] == [1, 8, 32] and m["reference"] == "paged"
    argv = m["commands"]["paged+lever"]["argv"]
    assert "-ngl" in argv and argv[argv.index("-m") + 1].endswith("moe-big-q8_0.gguf")
    env_b, env_a = m["commands"]["paged+lever"]["env"], m["commands"]["paged"]["env"]
    assert env_a["LLAMA_MOE_FORCE_GRAPHS"] == "1" and ("LLAMA_MOE_NO_FORCE_GRAPHS" in env_b) is same_build and "LLAMA_MOE_NO_FORCE_GRAPHS" not in env_a
    assert d["gates"] == {"kind": "BE", "models": ["tiny", "tiny-qwen35"], "paths": ["paged"], "phases": ["pre", "post"], "kl": None}
    assert d["map"]["path"] == str(tmp_path / "lever_map.yaml") and d["map"]["identity"]["pin"] == PIN and d["map"]["refusal"] is None
    assert d["lock"]["dir"] and not list(tmp_path.glob("*/manifest.json"))  # nothing started


def test_ab_dry_run_names_the_refusal(tmp_path):
    shared_or_skip("localai-paged/Makefile", "localai-paged/patches/paged")
    from parity.gpu.hardware import inventory
    from parity.runners.local import LocalRunner

    hw = inventory(LocalRunner())["hardware_class"]
    levermap.append(tmp_path / "lever_map.yaml", _row(lever="LLAMA_MOE_NO_FORCE_GRAPHS=1", verdict="REJECTED", hw=hw))
    args = ("--artifacts", str(tmp_path), "ab", "--profile", H100, "--env", "LLAMA_MOE_NO_FORCE_GRAPHS=1", "--dry-run")
    r = run_parity(*args)
    assert r.returncode == 2 and "REJECTED" in r.stderr.splitlines()[-1] and "/runs/20261101_ab" in r.stderr.splitlines()[-1]
    r = run_parity(*args, "--reopen", "new driver", "--json")
    assert r.returncode == 0 and "reopens it" in json.loads(r.stdout)["map"]["refusal"]


def test_ab_aa_on_purpose_is_its_own_lever(tmp_path):
    """--aa lets identical arms run, recorded under a name of their own (its FLAT never closes the real lever)."""
    shared_or_skip("localai-paged/Makefile", "localai-paged/patches/paged")
    r = run_parity("--artifacts", str(tmp_path), "ab", "--profile", "localai-paged-cpu", "--env", "LLAMA_KV_PAGED=1", "--aa", "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["lever"] == "LLAMA_KV_PAGED=1 (A/A)" and d["builds"]["paged"] == d["builds"]["paged+lever"]
    assert d["measure"]["commands"]["paged"]["env"] == d["measure"]["commands"]["paged+lever"]["env"]
