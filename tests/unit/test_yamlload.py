"""Every YAML parity reads is bounded (issue 56, N7): a billion-laughs file of a few hundred bytes,
a recursive alias or an endless file is refused in one line, fast, in bounded memory; the
aliases people write (merge keys, a shared mapping) still load."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from parity.yamlload import MAX_NODES, TooBig, safe_load

REPO = Path(__file__).resolve().parents[2]


def laughs(levels: int = 9, width: int = 9) -> str:
    """The classic, as one flow mapping: each anchor a list of `width` aliases of the one before,
    so *a<levels> stands for width**levels leaves (9**9: 387 million) in a few hundred bytes."""
    chain = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    chain += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels + 1)]
    return "{" + ", ".join(chain) + "}"


def billion_laughs(what: str = "map") -> str:
    """A bomb where each reader walks what it is given: a lever map's row, a profile's endpoint
    request_extra (any JSON), a campaign step's options (its variables substituted), a bucket table."""
    if what == "profile":
        return f'extends: smoke\nengines:\n  ep: {{kind: endpoint, base_url: "http://127.0.0.1:9", request_extra: {{chain: {laughs()}, pad: *a9}}}}\n'
    if what == "campaign":
        return f"name: bomb\nvars: {laughs()}\nsteps:\n  - {{name: s, kind: shell, with: {{argv: [\"true\"], env: {{X: *a9}}}}}}\n"
    if what == "buckets":
        return f"chain: {laughs()}\nbuckets:\n  - {{name: x, pattern: y, group: *a9}}\n"
    return f"chain: {laughs()}\nlevers:\n  - {{lever: bomb, verdict: GO, pad: *a9}}\n"


def test_a_billion_laughs_is_refused_at_once():
    text = billion_laughs()
    assert len(text) < 1500
    t0 = time.monotonic()
    with pytest.raises(TooBig, match=f"aliases expand it past {MAX_NODES:,} nodes"):
        safe_load(text)
    assert time.monotonic() - t0 < 1.0
    assert isinstance(TooBig("x"), yaml.YAMLError)  # every caller's `except yaml.YAMLError` makes it one line


def test_a_recursive_alias_is_refused():
    with pytest.raises(TooBig, match=r"a recursive alias \*x \(line 1\)"):
        safe_load("a: &x [1, *x]\n")


def test_an_oversized_text_is_refused():
    with pytest.raises(TooBig, match="over parity's limit"):
        safe_load("# " + "x" * (9 * 1024 * 1024) + "\n")
    with pytest.raises(TooBig, match=f"it holds more than {MAX_NODES:,} nodes"):  # 2.2 MB, no alias: counted before a node is built
        safe_load("[" + "1," * (MAX_NODES + 1) + "1]")


def test_the_aliases_people_write_still_load():
    text = "base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  y: 3\nboth: [*b, *b]\nlevels: &l [1, 2]\nagain: *l\n"
    assert safe_load(text) == {"base": {"x": 1, "y": 2}, "other": {"x": 1, "y": 3}, "both": [{"x": 1, "y": 2}] * 2, "levels": [1, 2], "again": [1, 2]}
    assert safe_load("a: 1 * 2\n") == {"a": "1 * 2"}  # a '*' that is no alias
    with pytest.raises(yaml.YAMLError, match="undefined alias"):
        safe_load("a: *nope\n")


LIMITED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 * 1024 ** 3, 2 * 1024 ** 3))  # 2 GiB: the bomb cannot eat the box
from parity.cli import main
sys.exit(main(sys.argv[1:]))
"""


def limited_cli(*args: str, tmp_path: Path, timeout: float = 120):
    return subprocess.run([sys.executable, "-c", LIMITED, "--artifacts", str(tmp_path / "runs"), *args], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout, stdin=subprocess.DEVNULL)  # fmt: skip


@pytest.mark.parametrize("what", ["levers --map", "ab --map", "profile", "campaign", "buckets"])
def test_every_reader_refuses_a_bomb_in_one_line_under_a_memory_limit(tmp_path, what):
    """The files users give: a lever map (levers, ab), a profile, a campaign, a bucket table."""
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(billion_laughs(what.split()[0]))
    args = {
        "levers --map": ["levers", "--map", str(bomb)],
        "ab --map": ["ab", "--env", "LLAMA_X=1", "--map", str(bomb), "--dry-run"],
        "profile": ["config", "show", "-p", str(bomb)],
        "campaign": ["campaign", "run", str(bomb), "--dry-run"],
        "buckets": ["profile", "analyze", str(tmp_path / "x.csv"), "--buckets", str(bomb)],
    }[what]
    (tmp_path / "x.csv").write_text('"Time (%)","Total Time (ns)","Instances","Avg (ns)","Med (ns)","Min (ns)","Max (ns)","StdDev (ns)","Name"\n')
    t0 = time.monotonic()
    r = limited_cli(*args, tmp_path=tmp_path)
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "aliases expand it past" in lines[0] and str(bomb) in lines[0], r.stderr[-2000:]
    assert time.monotonic() - t0 < 60


def test_an_endless_file_is_refused_not_read_whole(tmp_path):
    r = limited_cli("config", "show", "-p", "/dev/zero", tmp_path=tmp_path)
    assert r.returncode == 2 and r.stderr.strip() == "parity: error: /dev/zero: over parity's limit of 8,388,608 bytes for a YAML file", r.stderr[-2000:]
