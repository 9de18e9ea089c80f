"""Adding to a YAML file a person edits: what they wrote stays, byte for byte where the change
is an item after a block list's last item, and the result always reads back as the old data
plus the change (or nothing is written)."""

from __future__ import annotations

import pytest
import yaml

from parity.yamledit import YamlEditError, append_to_list, edit

ROW = {"lever": "NEW=1", "verdict": "GO", "ratio": 1.0234, "date": "2026-11-01", "key_number": "S_TG B/A 1.0234 [1.0100, 1.0400] at PP=1 (6 blocks)"}


def _lines_kept(before: str, after: str) -> bool:
    """Every line of before is in after, in order (only lines were added)."""
    it = iter(after.splitlines())
    return all(any(line == got for got in it) for line in before.splitlines())


@pytest.mark.parametrize("name, text", [
    ("parity's own layout", "# Lever map\nlevers:\n- lever: A=1\n  verdict: REJECTED  # too noisy\n  note: see phase 70\n# our closing comment\n"),
    ("indented four, keys after", "levers:\n    -   lever: A=1   # first\n        verdict: GO\n\n    -   lever: B=1\n        verdict: \"FLAT\"\nowner: perf team   # who\nnotes:\n  - one\n  - two\n"),
    ("list indented under its key", "# top\nowner: me\nlevers:\n  - lever: A=1\n    verdict: GO\n  # between\n  - lever: B=1\n    verdict: NO-GO\ntrailer: {a: 1, b: [1, 2]}\n"),
    ("document markers", "---\nlevers:\n- lever: A=1\n  verdict: GO\n...\n"),
    ("no newline at the end", "levers:\n- lever: A=1\n  verdict: GO"),
    ("a block scalar last", "levers:\n- lever: A=1\n  note: |\n    two lines\n    of notes\nowner: x\n"),
    ("empty list key", "# just a comment\nlevers:\nowner: x\n"),
])  # fmt: skip
def test_an_item_is_added_as_text_and_every_line_stays(name, text):
    out = append_to_list(text, "levers", ROW)
    data, before = yaml.safe_load(out), yaml.safe_load(text)
    assert data["levers"] == [*(before["levers"] or []), ROW] and {k: v for k, v in data.items() if k != "levers"} == {k: v for k, v in before.items() if k != "levers"}
    assert _lines_kept(text, out), out


def test_the_new_item_takes_the_list_layout():
    out = append_to_list("levers:\n    -   lever: A=1\n        verdict: GO\nowner: x\n", "levers", {"lever": "B=1", "verdict": "GO"})
    assert "    -   lever: B=1\n        verdict: GO\nowner: x\n" in out


@pytest.mark.parametrize("text", ["levers: []\nowner: x  # kept\n", "levers: [{lever: A=1, verdict: GO}]\n# end\n"])
def test_a_flow_list_goes_round_trip_keeping_comments(text):
    out = append_to_list(text, "levers", ROW)
    comment = "# kept" if "# kept" in text else "# end"
    assert yaml.safe_load(out)["levers"][-1] == ROW and comment in out


@pytest.mark.parametrize("text, starts", [("", "# header\n"), ("   \n", "# header\n"), ("# only a comment\n", "# only a comment\n")])
def test_an_empty_file_gets_the_header_and_the_list(text, starts):
    out = append_to_list(text, "levers", ROW, header="# header\n")
    assert yaml.safe_load(out) == {"levers": [ROW]} and out.startswith(starts)


@pytest.mark.parametrize("text", ["- a\n- b\n", "levers: 3\n", "levers: {a: 1}\n", "just text\n", "a: [\n"])
def test_what_is_not_a_mapping_with_a_list_is_refused(text):
    with pytest.raises((YamlEditError, yaml.YAMLError)):
        append_to_list(text, "levers", ROW)


def test_edit_keeps_comments_and_other_keys():
    text = "# our registry\nseries:\n  abc:   # the demo series\n  - {pin_tree: p1, tree: t1}\nowner: me\n"

    def change(d):
        d["series"]["def"] = [{"pin_tree": "p2", "tree": "t2"}]

    out = edit(text, change)
    assert "# our registry" in out and "# the demo series" in out and yaml.safe_load(out) == {
        "series": {"abc": [{"pin_tree": "p1", "tree": "t1"}], "def": [{"pin_tree": "p2", "tree": "t2"}]}, "owner": "me"}


def test_nan_in_the_old_rows_does_not_stop_an_append():
    out = append_to_list("levers:\n- lever: A\n  ratio: .nan\n", "levers", {"lever": "B"})
    assert yaml.safe_load(out)["levers"][1] == {"lever": "B"}


@pytest.mark.parametrize("text", [
    "# ours\nseries:\n  0000000000000000:   # a comment after the key\n  - {pin_tree: a, tree: b}\n",
    "series:\n  abc:\n    - pin_tree: a\n      tree: b\nowner: me\n",
])  # fmt: skip
def test_many_edits_keep_the_layout(text):
    """Twenty edits in a row: the lines first written stay as they were (ruamel's own indent guess
    misread the first file and indented it further on every rewrite, until it took minutes)."""
    out = text
    for i in range(20):
        out = edit(out, lambda d, i=i: d["series"].__setitem__(f"d{i}", [{"pin_tree": "c", "tree": str(i)}]))
    assert _lines_kept(text, out) and len(out) < 40 * len(text), out
    assert len(yaml.safe_load(out)["series"]) == 21


def test_crlf_lines_stay_crlf():
    text = "# edited on Windows\r\nlevers:\r\n- lever: A=1\r\n  verdict: GO\r\nowner: x\r\n"
    out = append_to_list(text, "levers", {"lever": "B=1", "verdict": "GO"})
    assert out == text.replace("owner: x\r\n", "- lever: B=1\r\n  verdict: GO\r\nowner: x\r\n")
