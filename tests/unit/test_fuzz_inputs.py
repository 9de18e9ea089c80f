"""Property-based fuzzing of every run-directory file parity reads and of the options of the
commands that read them, through the real CLI (in this process: parity.cli.main).

Each example starts from real files (the report fixtures, the H100 lever runs, the users'
artifact dir, the H100 lever map), breaks one of them (a value of another JSON type, NaN/inf, a
deleted key, a truncation, an empty or huge file, a document replaced whole) under a run
directory whose name may hold spaces and any unicode, and runs compare, report, gap, levers,
ab --dry-run or bisect --series on it.  The property: exit 0 with a valid result (--json: one
JSON document, no NaN), or a failure (2, or 5 for --fail-on-regression) said in exactly one
line, never an internal error or a traceback, and never a changed lever map or ledger after a
failed command.

Profiles: CI runs a derandomized, bounded profile (the same examples every run); for a longer
local search: HYPOTHESIS_PROFILE=long (25x the examples, random, its failures kept in
tests/.hypothesis-long/).  A failure found once is kept as an @example below."""

from __future__ import annotations

import copy
import functools
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

import yaml
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase

from inproc import cli

DATA = Path(__file__).resolve().parents[1] / "data"
REPORT, H100 = DATA / "report", DATA / "h100-noise"
LEVER_MAP = Path(__file__).resolve().parents[2] / "docs" / "evidence" / "device-h100-levers" / "runs" / "lever_map.yaml"
LONG = os.environ.get("HYPOTHESIS_PROFILE") == "long"


def budget(n: int):
    """settings for a test worth n examples in CI (25 n, random, with a database, in the long profile)."""
    return settings(max_examples=n * 25 if LONG else n, derandomize=not LONG, deadline=None, print_blob=True,
                    database=DirectoryBasedExampleDatabase(str(Path(__file__).resolve().parents[1] / ".hypothesis-long")) if LONG else None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])  # fmt: skip


# ------------------------------------------------------------------ what a corruption is

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
# a directory name a user may give a run: spaces, accents, CJK, emoji; never / or NUL
NAMES = st.text(st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="/\\"), min_size=1, max_size=16).filter(lambda s: s.strip() not in ("", ".", ".."))


def paths(doc, at=()):
    yield at
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from paths(v, (*at, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:6]):  # the first rows stand for the rest
            yield from paths(v, (*at, i))


def put(doc, at, value, delete=False):
    parent = doc
    for k in at[:-1]:
        parent = parent[k]
    if delete and isinstance(parent, dict):
        del parent[at[-1]]
    elif delete:
        parent.pop(at[-1])
    else:
        parent[at[-1]] = value


@st.composite
def mutated(draw, doc):
    """doc with one value replaced by another JSON type or a non-finite number, one key deleted, or
    replaced whole."""
    how = draw(st.sampled_from(["value", "value", "value", "non-finite", "delete", "whole"]))
    if how == "whole":
        return draw(JSON)
    doc = copy.deepcopy(doc)
    at = draw(st.sampled_from([p for p in paths(doc) if p] or [()]))
    if not at:
        return draw(JSON)
    if how == "delete":
        put(doc, at, None, delete=True)
    else:
        put(doc, at, draw(st.sampled_from([float("nan"), float("inf"), float("-inf"), 1e999])) if how == "non-finite" else draw(JSON))
    return doc


@st.composite
def broken_json(draw, doc) -> bytes:
    """One way a JSON file is found broken: the bytes to write."""
    how = draw(st.sampled_from(["mutated", "mutated", "mutated", "mutated", "truncate", "empty", "huge", "garbage"]))
    text = json.dumps(doc)
    if how == "truncate":
        return text[: draw(st.integers(0, len(text) - 1))].encode()
    if how == "empty":
        return draw(st.sampled_from([b"", b"\n", b"   ", b"null", b"{}", b"[]"]))
    if how == "garbage":
        cut = draw(st.integers(0, len(text)))
        return text[:cut].encode() + draw(st.binary(min_size=1, max_size=8)) + text[cut:].encode()
    if how == "huge":
        rows = doc.get("rows") if isinstance(doc, dict) else None
        big = {**doc, "rows": rows * 200} if isinstance(rows, list) and rows else {**doc, "padding": "x" * 2_000_000} if isinstance(doc, dict) else doc
        return json.dumps(big).encode()
    return json.dumps(draw(mutated(doc))).encode()


@st.composite
def broken_text(draw, text: str) -> bytes:
    """A text file (TSV, YAML, a patch) found broken."""
    how = draw(st.sampled_from(["truncate", "line", "cell", "empty", "garbage"]))
    lines = text.splitlines()
    if how == "truncate":
        return text[: draw(st.integers(0, len(text)))].encode()
    if how == "empty":
        return b""
    if how == "garbage":
        return draw(st.binary(max_size=64))
    i = draw(st.integers(0, len(lines) - 1))
    if how == "line":
        lines[i] = draw(st.text(max_size=40))
    else:
        cells = lines[i].split("\t")
        cells[draw(st.integers(0, len(cells) - 1))] = draw(st.sampled_from(["", "nan", "inf", "-1", "1e999", "x", "0", "9" * 400]))
        lines[i] = "\t".join(cells)
    return ("\n".join(lines) + "\n").encode()


# ------------------------------------------------------------------ the property


def no_nan(text: str):
    def refuse(c):
        raise ValueError(f"{c} in --json output")

    return json.loads(text, parse_constant=refuse)


def holds(r, *, codes=(0, 2), json_out=True) -> None:
    event(f"exit {r.rc}")  # --hypothesis-show-statistics: how the examples ended
    assert "internal error" not in r.err and "Traceback" not in r.err, r.err[-3000:]
    assert r.rc in codes, (r.rc, r.err[-3000:])
    if r.rc == 0:
        assert not r.error_lines(), r.err[-2000:]
        if json_out:
            no_nan(r.out)
    else:
        assert len(r.error_lines()) == 1, r.err[-3000:]


@contextmanager
def workdir():
    with tempfile.TemporaryDirectory(prefix="parity-fuzz-") as d:
        yield Path(d)


def copy_run(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    return dest


def snapshot(*files: Path) -> dict:
    return {f: f.read_bytes() if f.is_file() else None for f in files}


# ------------------------------------------------------------------ compare

RUN_FILES = ["summary.json", "manifest.json", "gates.json", "hardware.json"]
METRICS = st.sampled_from(["decode_agg_tps", "agg_tps", "ttft_p50_ms", "wall_s"]) | st.text(max_size=12)


@budget(120)
@given(data=st.data(), name=NAMES, side=st.sampled_from(["A", "B"]), which=st.sampled_from(RUN_FILES),
       metric=st.none() | METRICS, force=st.booleans(), fail=st.booleans(), floor=st.sampled_from([None, "control", "broken"]))  # fmt: skip
@example(data=None, name="ü b", side="B", which="summary.json", metric=None, force=False, fail=True, floor=None).via("a null headline in B")
def test_compare_on_broken_runs(data, name, side, which, metric, force, fail, floor):
    with workdir() as d:
        a, b = copy_run(REPORT / "control", d / f"A {name}"), copy_run(REPORT / "candidate", d / f"B {name}")
        target = (a if side == "A" else b) / which
        doc = json.loads(target.read_text())
        if data is None:  # the @example: B's paged decode_agg_tps null in every row
            for r in doc["rows"]:
                r["decode_agg_tps"] = None if r["engine"] == "paged" else r["decode_agg_tps"]
            target.write_text(json.dumps(doc))
        else:
            target.write_bytes(data.draw(broken_json(doc), label=f"{side}/{which}"))
        floor_dir = {None: None, "control": REPORT / "control", "broken": target.parent}[floor]
        args = ["compare", a, b, "--json", *(["--metric", metric] if metric is not None else []), *(["--force"] if force else []), *(["--fail-on-regression"] if fail else []),
                *(["--noise-floor", floor_dir] if floor_dir else [])]  # fmt: skip
        holds(cli(*args), codes=(0, 2, 5) if fail else (0, 2))


@budget(40)
@given(data=st.data(), which=st.sampled_from(["summary.tsv", "paged/n8.json", "vllm/n32.json", "gate_summary.tsv", "hardware.txt"]), name=NAMES)
def test_compare_and_report_on_a_broken_users_artifact(data, which, name):
    with workdir() as d:
        art = copy_run(DATA / "users-art" / "phase72", d / name)
        f = art / which
        f.write_bytes(data.draw(broken_json(json.loads(f.read_text())) if f.suffix == ".json" else broken_text(f.read_text()), label=which))
        holds(cli("compare", art, DATA / "users-art" / "phase72", "--json", "--force"))
        holds(cli("report", art, "--out-dir", d / "reports", "--no-plots", "--json"))


# ------------------------------------------------------------------ report (and its ledger)

REPORT_FILES = [*RUN_FILES, "bench.json", "builds.json", "profile/analysis.json"]
# summaries of other real runs, put in the candidate's place: the H100 lever sweep (efficiency,
# telemetry, calibration, paired), a prefill-under-decode workload, a calibration that outran
SEEDS = [None, H100 / "lever-summary.json", DATA / "workloads" / "smoke-pud-calibrated-summary.json", DATA / "calibration" / "outran-summary.json"]


@functools.lru_cache(maxsize=1)
def primed_ledger() -> Path:
    """A reports dir whose ledger holds one row (made once per session, copied into each example)."""
    out = Path(tempfile.mkdtemp(prefix="parity-fuzz-ledger-")) / "reports"
    holds(cli("report", REPORT / "candidate", "--out-dir", out, "--no-plots", "--title", "first", "--json"))
    return out


@budget(80)
@given(data=st.data(), name=NAMES, which=st.sampled_from([*REPORT_FILES, "ledger"]), control=st.booleans(), phase=st.none() | st.integers(-3, 10**6),
       title=st.none() | st.text(max_size=30), verdict=st.none() | st.sampled_from(["keep", "reject", "default-off"]) | st.text(max_size=8))  # fmt: skip
def test_report_on_broken_runs_leaves_the_ledger_alone_when_it_fails(data, name, which, control, phase, title, verdict):
    with workdir() as d:
        run = copy_run(REPORT / "candidate", d / f"run {name}")
        seed = data.draw(st.sampled_from(SEEDS), label="summary.json of")
        if seed is not None:  # the run's summary from another real run: its sections (efficiency, telemetry, workload) get read
            shutil.copy(seed, run / "summary.json")
        out = shutil.copytree(primed_ledger(), d / "reports")
        f = out / "BENCHMARK.csv" if which == "ledger" else run / which
        f.write_bytes(data.draw(broken_text(f.read_text()) if which == "ledger" else broken_json(json.loads(f.read_text())), label=which))
        ledger = snapshot(out / "BENCHMARK.md", out / "BENCHMARK.csv")  # as found, broken or not
        args = ["report", run, "--out-dir", out, "--no-plots", "--json", *(["--compare", REPORT / "control"] if control else []), *(["--phase", phase] if phase is not None else []),
                *(["--title", title] if title is not None else []), *(["--verdict", verdict] if verdict is not None else [])]  # fmt: skip
        r = cli(*args)
        holds(r)
        if r.rc != 0:
            assert snapshot(out / "BENCHMARK.md", out / "BENCHMARK.csv") == ledger


@budget(30)
@given(data=st.data(), which=st.sampled_from(["sidecar", "report", "BENCHMARK.csv"]))
def test_rebuild_ledger_from_broken_reports(data, which):
    with workdir() as d:
        out = shutil.copytree(primed_ledger(), d / "reports")
        (md,) = out.glob("*-phase001-*.md")
        f = {"sidecar": md.with_suffix(".json"), "report": md, "BENCHMARK.csv": out / "BENCHMARK.csv"}[which]
        f.write_bytes(data.draw(broken_json(json.loads(f.read_text())) if which == "sidecar" else broken_text(f.read_text()), label=which))
        before = snapshot(out / "BENCHMARK.md", out / "BENCHMARK.csv")
        r = cli("report", "--rebuild-ledger", "--out-dir", out, "--json")
        holds(r)
        if r.rc != 0:
            assert snapshot(out / "BENCHMARK.md", out / "BENCHMARK.csv") == before


@budget(6)
@given(data=st.data(), which=st.sampled_from(["summary.json", "profile/analysis.json"]))
def test_report_plots_of_broken_runs(data, which):
    """The plots (matplotlib) read the same rows: a few examples with them drawn."""
    with workdir() as d:
        run = copy_run(REPORT / "candidate", d / "run")
        f = run / which
        f.write_bytes(data.draw(broken_json(json.loads(f.read_text())), label=which))
        holds(cli("report", run, "--out-dir", d / "reports", "--compare", REPORT / "control", "--json"))


# ------------------------------------------------------------------ gap


@budget(80)
@given(data=st.data(), name=NAMES, which=st.sampled_from(["summary.json", "bench.json"]))
def test_gap_on_broken_runs(data, name, which):
    with workdir() as d:
        s, b = d / f"serving {name}", d / f"bench {name}"
        s.mkdir(), b.mkdir()
        shutil.copy(H100 / "lever-summary.json", s / "summary.json")
        shutil.copy(H100 / "lever-bench.json", b / "bench.json")
        f = (s if which == "summary.json" else b) / which
        f.write_bytes(data.draw(broken_json(json.loads(f.read_text())), label=which))
        holds(cli("gap", s, b, "--json"))


@budget(30)
@given(serving=st.sampled_from(["dir", "file", "missing", "empty dir"]), bench=st.sampled_from(["dir", "file", "missing", "empty dir"]), name=NAMES)
def test_gap_on_what_is_not_a_run_directory(serving, bench, name):
    with workdir() as d:

        def place(kind: str, src: Path, fname: str) -> Path:
            p = d / f"{fname} {name}"
            if kind in ("dir", "empty dir"):
                p.mkdir()
                if kind == "dir":
                    shutil.copy(src, p / fname)
            elif kind == "file":
                shutil.copy(src, p)
            return p

        holds(cli("gap", place(serving, H100 / "lever-summary.json", "summary.json"), place(bench, H100 / "lever-bench.json", "bench.json"), "--json"))


# ------------------------------------------------------------------ levers, ab --dry-run


@st.composite
def broken_map(draw) -> bytes:
    """The H100 lever map as text broken, as YAML of a mutated document, or as JSON (YAML reads it)."""
    text = LEVER_MAP.read_text()
    how = draw(st.sampled_from(["text", "yaml", "yaml", "json"]))
    if how == "text":
        return draw(broken_text(text))
    doc = yaml.safe_load(text)
    return yaml.safe_dump(draw(mutated(doc)), allow_unicode=True).encode() if how == "yaml" else draw(broken_json(doc))


@budget(100)
@given(m=broken_map(), name=NAMES, verdict=st.none() | st.text(max_size=10), hardware=st.none() | st.text(max_size=10), lever=st.none() | st.text(max_size=10), markdown=st.booleans())
def test_levers_on_a_broken_map(m, name, verdict, hardware, lever, markdown):
    with workdir() as d:
        path = d / name / "lever_map.yaml"
        path.parent.mkdir()
        path.write_bytes(m)
        args = ["levers", "--map", path, *(["--verdict", verdict] if verdict is not None else []), *(["--hardware", hardware] if hardware is not None else []),
                *(["--lever", lever] if lever is not None else []), *(["--markdown"] if markdown else ["--json"])]  # fmt: skip
        before = snapshot(path)
        holds(cli(*args), json_out=not markdown)
        assert snapshot(path) == before


@budget(8)
@given(m=broken_map())
def test_ab_dry_run_on_a_broken_map_never_changes_it(m):
    with workdir() as d:
        path = d / "lever_map.yaml"
        path.write_bytes(m)
        r = cli("--artifacts", d / "runs", "ab", "--env", "LLAMA_FUZZ=1", "--map", path, "--dry-run", "--json")
        holds(r)
        assert path.read_bytes() == m and not (d / "lever_map.md").exists()


# ------------------------------------------------------------------ bisect --series

PATCH = "From 0000 Mon Sep 17 00:00:00 2001\nSubject: [PATCH] x\n\n--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-upstream\n+patched\n"
FILE_NAMES = st.sampled_from(["0001-x.patch", "0002-y.patch", "0001-dup.patch", "x.patch", "README", "0003-ü ñ.patch", ".0004-hidden.patch", "0005-.patch"]) | NAMES


def series_at(series: Path, shape: str, files) -> Path:
    """A series argument as drawn: a directory of `files` (name, text), a file, or nothing there."""
    if shape == "dir":
        series.mkdir()
        for fname, body in files:
            if fname.strip() not in ("", ".", ".."):
                (series / fname).write_bytes(body.encode("utf-8", "surrogateescape"))
    elif shape == "file":
        series.write_text(PATCH)
    return series


@budget(60)
@given(files=st.lists(st.tuples(FILE_NAMES, st.sampled_from([PATCH, "", "garbage\n", "\x00\xff"])), max_size=4), shape=st.sampled_from(["dir", "file", "missing"]),
       name=NAMES, over=st.sampled_from(["series", "series", "pin", "x"]), criterion=st.sampled_from(["md5", "oracle", "metric", "apply", "zz"]),
       first=st.none() | st.sampled_from(["9999", "0001", "1", "abc", "-1"]), blocks=st.none() | st.integers(-2, 20), delta=st.none() | st.floats(allow_nan=True, allow_infinity=True))  # fmt: skip
def test_bisect_series_on_broken_series_dirs(files, shape, name, over, criterion, first, blocks, delta):
    """No example may start a real bisection: the run root is a file, so one that passes every
    check still ends at the run directory (exit 2), before any build."""
    with workdir() as d:
        series = series_at(d / f"series {name}", shape, files)
        (d / "runs-file").write_text("not a directory\n")
        args = ["--artifacts", d / "runs-file" / "runs", "bisect", "--series", series, "--over", over, "--criterion", criterion, *(["--first", first] if first else []),
                *(["--blocks", blocks] if blocks is not None else []), *(["--min-delta-pct", repr(delta)] if delta is not None else []), *(["--repo", d / "no-repo", "--good", "a", "--bad", "b"] if over == "pin" else [])]  # fmt: skip
        holds(cli(*args), json_out=False)


@functools.lru_cache(maxsize=1)
def upstream_repo() -> Path:
    """A one-commit llama.cpp stand-in: README.md reads 'upstream' (the patch above changes it)."""
    import subprocess

    repo = Path(tempfile.mkdtemp(prefix="parity-fuzz-upstream-")) / "llama.cpp"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false"]
    (repo / "README.md").write_text("upstream\n")
    for args in (["init", "-q", "-b", "master"], ["add", "-A"], ["commit", "-qm", "upstream"]):
        subprocess.run([*git, *args], cwd=repo, check=True)
    return repo


@budget(20)
@given(files=st.lists(st.tuples(FILE_NAMES, st.sampled_from([PATCH, "", "garbage\n"])), max_size=3), shape=st.sampled_from(["dir", "dir", "file", "missing"]), name=NAMES)
def test_canary_on_broken_series_dirs_is_never_green_on_nothing(files, shape, name):
    with workdir() as d:
        series = series_at(d / f"series {name}", shape, files)
        r = cli("--artifacts", d / "runs", "canary", "--upstream", "master", "--repo", upstream_repo(), "--series", series, "--json")
        assert "internal error" not in r.err and "Traceback" not in r.err, r.err[-3000:]
        event(f"exit {r.rc}")
        if r.rc == 0:
            doc = no_nan(r.out)
            assert doc["green"] and doc["patches"] > 0 and doc["applied"] == doc["patches"]
        elif r.rc == 1:  # red: the first patch that does not apply, named
            assert not no_nan(r.out)["green"] and "canary red" in no_nan(r.out)["line"]
        else:
            assert r.rc == 2 and len(r.error_lines()) == 1, r.err[-2000:]


# ------------------------------------------------------------------ generated path options

PATH_VALUES = st.sampled_from(["", ".", "-", "~", "~nobody-here/x", "x" * 300, "a/" * 200 + "b", "none ü/ 空", "FILE", "DIR", "RUN/summary.json"]) | NAMES
COMMANDS = {
    "compare A": lambda p, run: ["compare", p, run],
    "compare B": lambda p, run: ["compare", run, p],
    "compare --noise-floor": lambda p, run: ["compare", run, run, "--noise-floor", p],
    "report": lambda p, run: ["report", p, "--no-plots"],
    "report --compare": lambda p, run: ["report", run, "--compare", p, "--no-plots"],
    "report --noise-floor": lambda p, run: ["report", run, "--compare", run, "--noise-floor", p, "--no-plots"],
    "report --out-dir": lambda p, run: ["report", run, "--out-dir", p, "--no-plots"],
    "report --rebuild-ledger": lambda p, run: ["report", "--rebuild-ledger", "--out-dir", p],
    "gap serving": lambda p, run: ["gap", p, run],
    "gap bench": lambda p, run: ["gap", run, p],
    "levers --map": lambda p, run: ["levers", "--map", p],
    "bisect --series": lambda p, run: ["bisect", "--series", p, "--first", "9999"],
    "ab --map": lambda p, run: ["ab", "--env", "LLAMA_FUZZ=1", "--map", p, "--dry-run"],
}


@budget(80)
@given(command=st.sampled_from(sorted(COMMANDS)), value=PATH_VALUES)
def test_path_options_with_generated_values(command, value):
    with workdir() as d:
        run = copy_run(REPORT / "candidate", d / "run")
        (d / "FILE").write_text("not a run\n")
        (d / "DIR").mkdir()
        p = {"FILE": str(d / "FILE"), "DIR": str(d / "DIR"), "RUN/summary.json": str(run / "summary.json")}.get(value, value)
        (d / "root-file").write_text("x")
        args = ["--artifacts", d / "root-file" / "runs", *COMMANDS[command](p, run)]
        if args[2] == "report" and "--out-dir" not in args:
            args += ["--out-dir", d / "reports"]
        old = os.getcwd()
        os.chdir(d)  # relative values land in the example's own directory
        try:
            holds(cli(*args, "--json") if args[2] not in ("bisect",) else cli(*args), json_out=args[2] != "bisect")
        finally:
            os.chdir(old)


# ------------------------------------------------------------------ endpoint configs through the profile loader

SECRET = "S3CRETpw"  # in every generated password and query token: it must never be printed
URL_SAFE = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~"), max_size=8)


@st.composite
def base_urls(draw):
    """A base_url as a user might write it (with credentials, a token in the query, a path, a bad
    port, another scheme), or any text, or not a string at all."""
    how = draw(st.sampled_from(["url", "url", "url", "text", "json"]))
    if how == "json":
        return draw(JSON)
    if how == "text":
        return draw(st.text(max_size=40))
    scheme = draw(st.sampled_from(["http://", "https://", "ftp://", "", "HTTP://"]))
    cred = draw(st.sampled_from(["", "user:{p}@", "{p}@", ":{p}@"])).format(p=SECRET + draw(URL_SAFE))
    host = draw(st.sampled_from(["127.0.0.1", "gpu-box", "[::1]", "", "a b", "ü.example"]) | URL_SAFE)
    port = draw(st.sampled_from(["", ":8000", ":0", ":65536", ":-1", ":x", ":99999999999999999999"]))
    tail = draw(st.sampled_from(["", "/", "/v1", f"/?token={SECRET}", f"?api_key={SECRET}x", "#frag"]))
    return f"{scheme}{cred}{host}{port}{tail}"


COMMAND_LINES = st.none() | st.text(max_size=30) | st.sampled_from(["vllm serve 'unclosed", "   ", "./serve.sh --port 8000", f"curl http://u:{SECRET}@h:1/start"]) | JSON


@budget(60)
@given(base_url=base_urls(), start=COMMAND_LINES, stop=COMMAND_LINES, extra=st.dictionaries(st.text(max_size=8), JSON, max_size=3) | JSON,
       headers=st.none() | st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=2), env=st.dictionaries(st.text(max_size=8), st.text(max_size=12) | JSON, max_size=2),
       fields=st.dictionaries(st.sampled_from(["max_model_len", "ready_path", "models_path", "metrics", "tokenize", "count", "gpu", "model"]), JSON, max_size=2))  # fmt: skip
def test_endpoint_configs_through_the_profile_loader(base_url, start, stop, extra, headers, env, fields):
    """Any endpoint section loads (config show) or is refused in one line naming the key; never an
    internal error, and a URL's password or token is never printed, whatever else is wrong."""
    section = {"kind": "endpoint", "base_url": base_url, "start": start, "stop": stop, "request_extra": extra, "env": env, **fields}
    if headers is not None:
        section["headers"] = headers
    with workdir() as d:
        prof = d / "ep.yaml"
        prof.write_text(json.dumps({"extends": "smoke", "engines": {"ep": section}, "serving": {"engines": ["ep"]}}, ensure_ascii=False))  # YAML reads no surrogate escapes
        r = cli("--artifacts", d / "runs", "config", "show", "-p", prof, "--json")
        holds(r)
        said = r.err if r.rc else r.out
        assert SECRET not in said, said[-2000:]
