"""A synthetic upstream llama.cpp history for the canary and the pin bisection: the pin
archive (../shared/llama.cpp-pin) committed in a temp git repo, then commits on top, one of
which edits a line that a middle patch of the real series has in a hunk's context."""

from __future__ import annotations

import re
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false"]
# fixed dates: the same history gets the same commit ids run to run (builds of them stay cached)
DATES = {"GIT_AUTHOR_DATE": "2026-11-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-11-01T00:00:00Z"}
_DIFF = re.compile(r"^diff --git a/(\S+) b/(\S+)$")
_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@")


def git(repo: Path, *args: str) -> str:
    import os

    return subprocess.run([*GIT, *args], cwd=repo, check=True, capture_output=True, text=True, env={**os.environ, **DATES}).stdout.strip()


def pin_repo(archive: Path, dest: Path) -> Path:
    """The pin's tree as the first commit of a new repository at dest."""
    with tarfile.open(archive) as t:
        t.extractall(dest.parent / (dest.name + ".x"), filter="tar")
    (top,) = (dest.parent / (dest.name + ".x")).iterdir()
    top.rename(dest)
    git(dest, "init", "-q", "-b", "master")
    # a clone by file:// URL packs the 157 MB tree: without a delta search and with light
    # compression that is 4.7 CPU-s, not 18.4 (measured); the clone is the same commits
    git(dest, "config", "pack.window", "0")
    git(dest, "config", "pack.compression", "1")
    git(dest, "add", "-A", "-f")
    git(dest, "commit", "-qm", "pin")
    return dest


@dataclass
class Breaker:
    patch: str  # the patch whose hunk the edit breaks
    file: str
    hunk: str  # its `@@ -a,b +c,d @@` header
    line: str  # the context line edited


def hunks(text: str):
    """(file, hunk header, [context lines]) of every hunk of a patch."""
    cur, out = None, []
    for ln in text.splitlines():
        if m := _DIFF.match(ln):
            cur = m.group(1)
        elif cur and _HUNK.match(ln):
            out.append((cur, ln.split(" @@", 1)[0] + " @@", []))
        elif out and ln.startswith(" ") and out[-1][0] == cur:
            out[-1][2].append(ln[1:])
    return out


def find_breaker(series: list[Path], tree: Path) -> Breaker:
    """A middle patch (nearest the middle first) with a hunk context line that occurs exactly once
    in the pin's file and in no earlier patch: editing it there breaks that patch and no earlier one."""
    mid = len(series) // 2
    order = sorted(range(len(series)), key=lambda i: (abs(i - mid), i))
    for i in order:
        if i == 0:
            continue
        earlier = "\n".join(p.read_text(errors="replace") for p in series[:i])
        for file, header, ctx in hunks(series[i].read_text(errors="replace")):
            f = tree / file
            if not f.is_file():
                continue
            text = f.read_text(errors="replace")
            for line in ctx:
                if len(line.strip()) > 12 and text.count(line) == 1 and line not in earlier:
                    return Breaker(series[i].name, file, header, line)
    raise AssertionError("no patch has a context line that only it touches")


def break_commit(repo: Path, b: Breaker, message: str = "upstream: edit a line a middle patch needs") -> str:
    f = repo / b.file
    f.write_text(f.read_text(errors="surrogateescape").replace(b.line, b.line + " // upstream edit", 1), errors="surrogateescape")
    git(repo, "commit", "-qam", message)
    return git(repo, "rev-parse", "HEAD")


def edit_commit(repo: Path, rel: str, old: str, new: str, message: str) -> str:
    f = repo / rel
    text = f.read_text()
    assert text.count(old) == 1, f"{rel}: {old!r} is not unique"
    f.write_text(text.replace(old, new))
    git(repo, "commit", "-qam", message)
    return git(repo, "rev-parse", "HEAD")


def harmless_commit(repo: Path, i: int) -> str:
    (repo / "docs" / f"upstream-{i}.md").write_text(f"an upstream change the series does not touch ({i})\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", f"upstream: docs {i}")
    return git(repo, "rev-parse", "HEAD")
