"""Files several parity processes write, tried with real processes: concurrent writers lose
nothing, what the user wrote survives an append (comments, other keys, indentation, mode),
and a writer SIGKILLed at random points leaves a readable file, the previous one or the new one."""

from __future__ import annotations

import csv
import io
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import REPO

WRITERS, ROWS = 8, 25

# a writer process: waits for the start file (all start together), then appends its rows
WRITER = r"""
import os, sys, time
from pathlib import Path
what, target, wid, n, go = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5])
while not go.exists():
    time.sleep(0.005)
if what == "map":
    from parity.levers import map as levermap
    for i in range(n):
        levermap.append(target, {"lever": f"W{wid}-{i}", "kind": "runtime", "verdict": "FLAT", "ratio": 1.0 + i / 1000, "date": "2026-11-30"}, markdown=True)
elif what == "ledger":
    from parity.report import ledger
    for i in range(n):
        ledger.append(target, {"date": "2026-11-30", "phase": 100 * wid + i, "title": f"W{wid}-{i}", "verdict": "FLAT", "key_ratios": "1.00", "report": f"r{wid}-{i}.md", "artifact": "/runs/x"})
elif what == "steps":
    from parity.artifacts import RunDir
    rd = RunDir(target)
    for i in range(n):
        rd.record_step(f"W{wid}-{i}", "complete", seconds=i)
elif what == "forever-map":
    from parity.levers import map as levermap
    i = int(os.environ.get("START", "0"))
    while True:
        levermap.append(target, {"lever": f"K{i}", "verdict": "GO", "key_number": "x" * 200})
        i += 1
elif what == "forever-ledger":
    from parity.report import ledger
    i = int(os.environ.get("START", "0"))
    while True:
        ledger.append(target, {"date": "2026-11-30", "phase": i, "title": f"K{i}", "verdict": "GO", "key_ratios": "y" * 200, "report": f"k{i}.md", "artifact": "/runs/k"})
        i += 1
"""

USER_MAP = """\
# Our lever map.  Verdicts in our words; parity appends below.
levers:
    -   lever: LLAMA_OLD=1   # the first one we tried
        verdict: SHIPPED
        note: "kept since phase 12"

    -   lever: series-without=0043
        verdict: REJECTED    # too noisy
owner: perf team   # who answers for it
notes:
  - ask before reopening anything REJECTED
"""


def _writers(what: str, target: Path, tmp_path: Path, n_writers: int = WRITERS, rows: int = ROWS) -> None:
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, what, str(target), str(w), str(rows), str(go)], cwd=REPO, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for w in range(n_writers)]  # fmt: skip
    time.sleep(1.0)  # every interpreter up and waiting
    go.write_text("")
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-2000:]


def test_eight_writers_lose_no_lever_map_row_and_keep_what_the_user_wrote(tmp_path):
    from parity.levers import map as levermap

    path = tmp_path / "lever_map.yaml"
    path.write_text(USER_MAP)
    path.chmod(0o640)  # neither the umask's 644 nor mkstemp's 600: it must stay what it was
    _writers("map", path, tmp_path)
    rows = levermap.load(path)
    got = [r["lever"] for r in rows[2:]]
    assert len(rows) == 2 + WRITERS * ROWS and sorted(got) == sorted(f"W{w}-{i}" for w in range(WRITERS) for i in range(ROWS))
    for w in range(WRITERS):  # each writer's rows in its own order
        mine = [g for g in got if g.startswith(f"W{w}-")]
        assert mine == [f"W{w}-{i}" for i in range(ROWS)]
    text = path.read_text()
    assert text.startswith(USER_MAP.split("owner:")[0])  # every byte above the new rows, as written
    assert "owner: perf team   # who answers for it\nnotes:\n  - ask before reopening anything REJECTED\n" in text
    assert yaml.safe_load(text)["owner"] == "perf team" and "    -   lever: W" in text  # new rows in the list's own layout
    assert path.stat().st_mode & 0o777 == 0o640
    assert not list(tmp_path.glob(".lever_map.yaml.*.tmp"))
    md = (tmp_path / "lever_map.md").read_text()  # rendered under the map's lock: never older than the map
    assert sum(1 for ln in md.splitlines() if ln.startswith("| ") and "**W" in ln) == WRITERS * ROWS


def test_eight_writers_lose_no_ledger_entry(tmp_path):
    out = tmp_path / "reports"
    out.mkdir()
    (out / "BENCHMARK.md").write_text("# Benchmark ledger\n\nOurs.\n\n| date | phase | title | verdict | key_ratios | report | artifact |\n|---|---|---|---|---|---|---|\n\n"
                                      "Notes below the table stay below it.\n")  # fmt: skip
    (out / "BENCHMARK.md").chmod(0o664)
    _writers("ledger", out, tmp_path)
    rows = list(csv.DictReader(io.StringIO((out / "BENCHMARK.csv").read_text())))
    want = sorted(f"W{w}-{i}" for w in range(WRITERS) for i in range(ROWS))
    assert sorted(r["title"] for r in rows) == want
    md = (out / "BENCHMARK.md").read_text()
    titles = [ln.split(" | ")[2] for ln in md.splitlines() if ln.startswith("| 2026-11-30 ")]
    assert sorted(titles) == want
    assert md.startswith("# Benchmark ledger\n\nOurs.\n") and md.endswith("\nNotes below the table stay below it.\n")
    assert (out / "BENCHMARK.md").stat().st_mode & 0o777 == 0o664


def test_eight_processes_recording_steps_lose_none(tmp_path):
    """The manifest of one run, changed by many at once (a matrix's host threads, settle, resume)."""
    from parity.artifacts import RunDir

    rd = RunDir.create(tmp_path / "runs", "x", argv=[], env={})
    _writers("steps", rd.path, tmp_path, rows=10)
    steps = rd.manifest()["steps"]
    assert sorted(steps) == sorted(f"W{w}-{i}" for w in range(WRITERS) for i in range(10))
    assert sorted(os.listdir(rd.path)) == ["manifest.json"]  # the lock is the directory's own: no file added


def test_matrix_threads_recording_steps_lose_none(tmp_path):
    """What parity.matrix.run really does: one thread per host, each recording its targets."""
    import threading

    from parity.artifacts import RunDir

    rd = RunDir.create(tmp_path / "runs", "x", argv=[], env={})

    def host(h: int) -> None:
        for i in range(20):
            rd.record_step(f"h{h}-t{i}", "running", kind="target")
            rd.record_step(f"h{h}-t{i}", "complete", exit_code=0)

    threads = [threading.Thread(target=host, args=(h,)) for h in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    steps = rd.manifest()["steps"]
    assert len(steps) == 80 and all(s["status"] == "complete" and s["kind"] == "target" for s in steps.values())


def _kill_loop(tmp_path: Path, what: str, target: Path, read_titles, kills: int, seed: int) -> int:
    """Start a writer appending forever, SIGKILL it after a random delay, check the file, start
    the next one where the file left off; how many kills landed while a write was under way."""
    rng = random.Random(seed)
    (tmp_path / "go").write_text("")
    mid_write = 0
    for k in range(kills):
        before = read_titles()
        env = {**os.environ, "START": str(len(before))}
        p = subprocess.Popen([sys.executable, "-c", WRITER, what, str(target), "0", "0", str(tmp_path / "go")], cwd=REPO, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(0.4 + rng.random() * 0.6)  # the interpreter starts in ~0.3 s; then somewhere in its writes
        os.kill(p.pid, signal.SIGKILL)
        p.communicate(timeout=30)
        after = read_titles()  # parses whole: it raises on a torn file
        assert after[: len(before)] == before, f"kill {k}: rows changed or lost"
        n = len(before)
        assert after[n:] == [f"K{i}" for i in range(n, len(after))], f"kill {k}: not the writer's rows in order"
        mid_write += bool(list((target if target.is_dir() else target.parent).glob(".*.tmp")))
    return mid_write


def test_sigkill_during_lever_map_writes_leaves_a_whole_file(tmp_path):
    from parity.levers import map as levermap

    path = tmp_path / "lever_map.yaml"
    path.write_text(USER_MAP + "".join(f"# padding, so that a write takes a while: {i}\n" for i in range(2000)))
    path.chmod(0o644)
    user_rows = levermap.load(path)

    def titles():
        rows = levermap.load(path)
        assert rows[:2] == user_rows
        return [r["lever"] for r in rows[2:]]

    torn = _kill_loop(tmp_path, "forever-map", path, titles, kills=25, seed=41)
    text = path.read_text()
    assert text.startswith(USER_MAP.split("owner:")[0]) and "owner: perf team" in text and path.stat().st_mode & 0o777 == 0o644
    levermap.append(path, {"lever": "after", "verdict": "GO"})  # the next writer clears what the killed ones left
    assert not list(tmp_path.glob(".lever_map.yaml.*.tmp")) and levermap.load(path)[-1]["lever"] == "after"
    print(f"{torn} of 25 kills left a temporary behind (killed between its write and its rename)")


def test_sigkill_during_ledger_writes_leaves_whole_files(tmp_path):
    from parity.report import ledger

    out = tmp_path / "reports"
    out.mkdir()

    def md_titles():
        return [ln.split(" | ")[2] for ln in (out / "BENCHMARK.md").read_text().splitlines() if ln.startswith("| 2026")] if (out / "BENCHMARK.md").exists() else []

    def titles():
        rows = [r["title"] for r in csv.DictReader(io.StringIO((out / "BENCHMARK.csv").read_text()))] if (out / "BENCHMARK.csv").exists() else []
        md = md_titles()
        # a writer killed between the two files leaves the markdown behind; one killed there
        # again before any write completes leaves it further behind (seen beside two CPU hogs)
        assert md == rows[: len(md)] and len(rows) - len(md) <= 25, "the markdown is the CSV, or behind it"
        return rows

    torn = _kill_loop(tmp_path, "forever-ledger", out, titles, kills=25, seed=43)
    ledger.append(out, {"title": "after", "date": "2026-11-28"})  # the next whole write brings the markdown level
    rows = titles()
    assert rows[-1] == "after" and md_titles() == rows
    print(f"{torn} of 25 kills left a temporary behind (killed between its write and its rename)")


def test_bandwidth_measured_once_by_two_runs_starting_together(tmp_path):
    """Two runs on one machine at once: one measures, the other waits and takes its figure
    (side by side, each copy would run at about half the bandwidth, and keep that half)."""
    code = ("import json, sys, time; from pathlib import Path\n"
            "while not Path(sys.argv[1]).exists(): time.sleep(0.005)\n"
            "from parity.gpu.bandwidth import bandwidth\n"
            "print(json.dumps(bandwidth({'gpus': [], 'hardware_class': 'cpu_only'})['measured']))")  # fmt: skip
    env = {**os.environ, "PARITY_CACHE": str(tmp_path / "cache")}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "go")], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    time.sleep(1.0)
    (tmp_path / "go").write_text("")
    docs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
        docs.append(json.loads(out))
    assert sorted(d["cached"] for d in docs) == [False, True] and docs[0]["gbps"] == docs[1]["gbps"] > 0


@pytest.mark.parametrize("mode", [0o600, 0o644, 0o664])
def test_an_append_keeps_the_file_mode(tmp_path, mode):
    from parity.levers import map as levermap
    from parity.report import ledger

    path = tmp_path / "lever_map.yaml"
    levermap.append(path, {"lever": "A=1", "verdict": "GO"})
    path.chmod(mode)
    levermap.append(path, {"lever": "B=1", "verdict": "GO"})
    assert path.stat().st_mode & 0o777 == mode
    ledger.append(tmp_path, {"phase": 1, "title": "t"})
    for f in ("BENCHMARK.csv", "BENCHMARK.md"):
        (tmp_path / f).chmod(mode)
    ledger.append(tmp_path, {"phase": 2, "title": "u"})
    assert all((tmp_path / f).stat().st_mode & 0o777 == mode for f in ("BENCHMARK.csv", "BENCHMARK.md"))


def test_a_new_shared_file_gets_the_umask_mode(tmp_path):
    from parity.levers import map as levermap

    old = os.umask(0o027)
    try:
        levermap.append(tmp_path / "m.yaml", {"lever": "A=1", "verdict": "GO"})
    finally:
        os.umask(old)
    assert (tmp_path / "m.yaml").stat().st_mode & 0o777 == 0o640


def test_a_symlinked_map_is_updated_where_it_lives(tmp_path):
    from parity.levers import map as levermap

    real = tmp_path / "repo" / "levers.yaml"
    real.parent.mkdir()
    real.write_text(USER_MAP)
    link = tmp_path / "lever_map.yaml"
    link.symlink_to(real)
    levermap.append(link, {"lever": "C=1", "verdict": "GO"})
    assert link.is_symlink() and [r["lever"] for r in levermap.load(real)][-1] == "C=1"


def test_series_registry_recordings_at_once_all_land_and_comments_stay(tmp_path):
    """parity build --check-series --record from several processes (one per series digest)."""
    reg = tmp_path / "series-trees.yaml"
    reg.write_text("# trees we checked by hand: keep\nseries:\n  0000000000000000:   # the first (YAML reads it as the number 0)\n  - {pin_tree: " + "a" * 40 + ", tree: " + "b" * 40 + ", patches: 1}\n")
    code = ("import sys, os, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.002)\n"
            "from parity.llamacpp.mirror import record\n"
            "for i in range(5): record(f'd{sys.argv[2]}-{i}', 'c' * 40, format(i, 'x') * 40, 3, 'test')")  # fmt: skip
    env = {**os.environ, "PARITY_SERIES_TREES": str(reg)}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "go"), str(w)], cwd=REPO, env=env, stderr=subprocess.PIPE, text=True) for w in range(6)]
    time.sleep(1.0)
    (tmp_path / "go").write_text("")
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read()[-2000:]
    series = yaml.safe_load(reg.read_text())["series"]
    assert sorted(map(str, series)) == sorted(["0", *(f"d{w}-{i}" for w in range(6) for i in range(5))])
    assert reg.read_text().startswith("# trees we checked by hand: keep\nseries:\n  0000000000000000:   # the first (YAML reads it as the number 0)\n")


_FORCED_BUILD = """
import sys
from parity.config import load_profile
from parity.llamacpp.build import ensure_built
from parity.engines.bound import bind
from parity.runners.local import LocalRunner
from parity.ui import Output
ensure_built(bind(load_profile(sys.argv[1]), "stock"), LocalRunner(), Output(json_mode=True), force=True)
"""


KILLS = 10


def test_a_forced_rebuild_killed_anywhere_never_leaves_a_good_looking_broken_build(mini_build, tmp_path):
    """BUILD_OK means the build is whole: a rebuild SIGKILLed at random points (removing the old
    tree, configuring, compiling, hashing) leaves either no BUILD_OK or every binary build.json names."""
    import hashlib

    from parity.config import load_profile
    from parity.llamacpp import build
    from parity.engines.bound import bind
    from parity.runners.local import LocalRunner
    from parity.ui import Output

    path = mini_build()
    p = build.plan(bind(load_profile(str(path)), "stock"))
    t0 = time.monotonic()
    build.ensure_built(bind(load_profile(str(path)), "stock"), LocalRunner(), Output(json_mode=True))
    whole = time.monotonic() - t0  # how long one build takes here: the kills land anywhere in it
    rng = random.Random(7)
    states = {"good": 0, "not marked": 0}
    for k in range(KILLS):
        child = subprocess.Popen([sys.executable, "-c", _FORCED_BUILD, str(path)], cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.3 + rng.random() * whole)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        if (p.dir / build.OK_MARKER).exists():
            prov = json.loads((p.dir / "build.json").read_text())
            for tool, sha in prov["binaries"].items():
                assert hashlib.sha256((p.dir / "build" / "bin" / tool).read_bytes()).hexdigest() == sha, f"kill {k}: {tool} differs from build.json"
            states["good"] += 1
            last = "good"
        else:
            states["not marked"] += 1
            last = "not marked"
    # the next builder builds what the last kill left unmarked, and reuses a build the kill came too late for
    r = build.ensure_built(bind(load_profile(str(path)), "stock"), LocalRunner(), Output(json_mode=True))
    assert r.cached == (last == "good") and (p.dir / build.OK_MARKER).exists() and r.bin_dir.is_dir()
    print(f"after {KILLS} kills: {states}")


def test_ledger_hand_edits_survive_an_append(tmp_path):
    """A CSV whose last line lost its newline, and a markdown whose table a person removed."""
    from parity.report import ledger

    ledger.append(tmp_path, {"date": "2026-11-01", "phase": 1, "title": "one"})
    csv_p, md_p = tmp_path / "BENCHMARK.csv", tmp_path / "BENCHMARK.md"
    csv_p.write_text(csv_p.read_text().rstrip("\n"))
    md_p.write_text("# Our ledger\n\nWe keep notes here; the table went to the wiki.\n")
    ledger.append(tmp_path, {"date": "2026-11-02", "phase": 2, "title": "two"})
    assert [r["title"] for r in ledger.read_rows(tmp_path)] == ["one", "two"]
    md = md_p.read_text()
    assert md.startswith("# Our ledger\n\nWe keep notes here; the table went to the wiki.\n\n| date | phase |") and "| two |" in md
