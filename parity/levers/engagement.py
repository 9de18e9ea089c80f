"""Whether a lever engaged, from what its arms leave behind (the users' Phases 121/129/132/135:
trace markers counted, the env string looked up in libggml-cuda.so).

- An env lever's name must be in a file of arm B's build (its executables, their shared
  libraries, the system libraries they load): a program cannot getenv() a name it does not hold,
  so a name in none of them (a typo, a CUDA-only lever on a CPU build, a reverted patch) did not
  engage.  Checked after the builds, before the lock: nothing is measured.
- A build lever must change what was built: arm B's executables and libraries byte-identical
  to arm A's did not engage.
- After the measurement, the arms' logs (bench blocks, servers): the lines only arm B printed
  (digits, addresses and build paths masked), and each --marker REGEX counted per arm; a marker
  asked for and absent from arm B's logs did not engage.
- The series' patches that getenv() the name are named beside it (where the lever lives).

A lever that did not engage reads NOT ENGAGED (parity.errors.NotEngaged, its own exit code),
never FLAT or GO.  No kernel trace is taken by an A/B, so kernels are not evidence here."""

from __future__ import annotations

import json
import mmap
import os
import re
from collections import Counter
from pathlib import Path

from parity.errors import UsageError

NOT_ENGAGED = "NOT ENGAGED"
_LDD = re.compile(r"=>\s*(/\S+)\s+\(0x|^\s*(/\S+)\s+\(0x", re.M)


def build_files(bin_dir: str | Path) -> list[Path]:
    """The regular files of a bin dir (executables and its lib*.so*; links left out)."""
    d = Path(bin_dir)
    return sorted(p for p in d.iterdir() if p.is_file() and not p.is_symlink()) if d.is_dir() else []


def parse_ldd(text: str) -> list[str]:
    """The library paths of `ldd` output (`libx.so => /path (0x...)`, `/lib64/ld-linux... (0x...)`)."""
    return [a or b for a, b in _LDD.findall(text)]


def is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def linked_libraries(runner, exes: list[Path], own: list[Path]) -> list[str]:
    """The system libraries the executables load (ldd through the runner), each once; the build's
    own (a link to a file of the bin dir) left out."""
    seen = {os.path.realpath(p) for p in own}
    found: list[str] = []
    for exe in exes:
        res = runner.run(["ldd", str(exe)], timeout=60)
        if res.ok:
            for lib in parse_ldd(res.stdout):
                real = os.path.realpath(lib)
                if real not in seen:
                    seen.add(real)
                    found.append(lib)
    return found


def count_in(path: str | Path, names: list[str]) -> dict[str, int]:
    """How often each name occurs in a file, ending there (LLAMA_KV_PAGE is not LLAMA_KV_PAGED);
    what comes before it is not looked at: the linker stores a string that ends another once."""
    out = dict.fromkeys(names, 0)
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            for n in names:
                out[n] = len(re.findall(re.escape(n.encode()) + rb"(?![A-Za-z0-9_])", mm))
    except (OSError, ValueError):  # empty or unreadable: holds nothing
        pass
    return out


def env_strings(names: list[str], files: list[str | Path]) -> dict:
    """{found: {name: {file: count}}, missing: [names in no file], searched: n}."""
    found: dict[str, dict[str, int]] = {n: {} for n in names}
    for f in files:
        for n, c in count_in(f, names).items():
            if c:
                found[n][str(f)] = c
    return {"found": found, "missing": [n for n in names if not found[n]], "searched": len(files)}


def series_readers(series_dir: str | None, names: list[str]) -> dict[str, list[str]]:
    """{name: the series' patches whose added lines getenv() it}."""
    out: dict[str, list[str]] = {n: [] for n in names}
    d = Path(series_dir) if series_dir else None
    if not d or not d.is_dir():
        return out
    for p in sorted(d.glob("*.patch")):
        text = p.read_text(encoding="utf-8", errors="replace")
        for n in names:
            if re.search(r"^\+.*getenv\(\s*\"" + re.escape(n) + r"\"", text, re.M):
                out[n].append(p.name)
    return out


def static_env(names: list[str], bin_dir: str | Path, runner, series_dir: str | None = None) -> dict:
    """An env lever's evidence from the build: its names in the build's files and the libraries
    they load; NOT ENGAGED when a name is in none."""
    files = build_files(bin_dir)
    libs = linked_libraries(runner, [p for p in files if not p.name.startswith("lib") and is_elf(p)], files)
    strings = env_strings(names, [*files, *libs])
    readers = series_readers(series_dir, names)
    if strings["missing"]:
        why = (
            f"{', '.join(strings['missing'])} is in no file of the build ({bin_dir}: {len(files)} files, "
            f"and the {len(libs)} libraries they load): no program of it reads that env, so the lever "
            "cannot have engaged (a typo, or a lever this build does not compile)"
        )
        return {"engaged": False, "how": "strings", "why": why, "strings": strings, "series": readers}
    where = "; ".join(
        f"{n} in {', '.join(f'{Path(f).name} x{c}' for f, c in sorted(fs.items())[:4])}"
        for n, fs in strings["found"].items()
    )
    return {
        "engaged": True,
        "how": "strings",
        "why": f"read by the build: {where}",
        "strings": strings,
        "series": readers,
    }


def static_build(files_a: dict[str, str], files_b: dict[str, str]) -> dict:
    """A build lever's evidence: {file: sha256} of both arms' executables and libraries."""
    if not files_a or not files_b:  # a build.json without hashes: nothing to compare, nothing to refuse on
        return {
            "engaged": True,
            "how": "build",
            "why": "arm B is a build of its own (its files' hashes were not recorded)",
            "differ": [],
        }
    differ = sorted(f for f in set(files_a) | set(files_b) if files_a.get(f) != files_b.get(f))
    if not differ:
        return {
            "engaged": False,
            "how": "build",
            "why": f"arm B's {len(files_b)} executables and libraries are byte-identical to arm A's: "
            "the lever changes nothing this build compiles",
            "differ": [],
        }
    return {
        "engaged": True,
        "how": "build",
        "why": f"arm B's build differs from arm A's in {len(differ)} file(s): {', '.join(differ[:6])}",
        "differ": differ,
    }


_HEX = re.compile(r"0x[0-9a-fA-F]+|\b[0-9a-f]{12,}\b")
_DIGITS = re.compile(r"\d+")


def normalize(line: str, masks: tuple[str, ...] = ()) -> str:
    for m in masks:
        if m:
            line = line.replace(m, "<build>")
    return " ".join(_DIGITS.sub("#", _HEX.sub("<hex>", line)).split())


def arm_logs(run_dir: str | Path, arm: str) -> list[Path]:
    """The logs one arm's measurement left: batched-bench blocks, serving servers."""
    d = Path(run_dir)
    return sorted([*d.glob(f"bench-{glob_escape(arm)}-b*.log"), *(d / "servers").glob(f"{glob_escape(arm)}-r*.log")])


def glob_escape(s: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", s)


def read_lines(paths: list[Path]) -> list[str]:
    out: list[str] = []
    for p in paths:
        out += p.read_text(encoding="utf-8", errors="replace").splitlines()
    return out


def from_logs(
    lines_a: list[str], lines_b: list[str], markers: list[str], masks: tuple[str, ...] = (), limit: int = 8
) -> dict:
    """The logs' evidence: lines only arm B printed (masked) and each marker's count per arm."""
    a = Counter(normalize(ln, masks) for ln in lines_a if ln.strip())
    b = Counter(normalize(ln, masks) for ln in lines_b if ln.strip())
    only_b = sorted(((ln, n) for ln, n in b.items() if ln not in a), key=lambda x: (-x[1], x[0]))
    counts = {
        m: {"A": sum(1 for ln in lines_a if re.search(m, ln)), "B": sum(1 for ln in lines_b if re.search(m, ln))}
        for m in markers
    }
    return {
        "lines": {"A": len(lines_a), "B": len(lines_b)},
        "only_in_B": [{"line": ln, "count": n} for ln, n in only_b[:limit]],
        "only_in_B_total": len(only_b),
        "markers": counts,
    }


def check_markers(markers: list[str] | None) -> list[str]:
    """--marker REGEX values, each compiled once (a bad one is a one-line UsageError)."""
    out = []
    for m in markers or []:
        if not str(m).strip():
            raise UsageError(
                "--marker: empty pattern (give the line the lever prints, e.g. 'paged-demo: series active')"
            )
        try:
            re.compile(m)
        except re.error as e:
            raise UsageError(f"--marker {m!r}: not a regular expression ({e})") from None
        out.append(str(m))
    return out


def build_hashes(bin_dir: str | None) -> dict[str, str]:
    """{file: sha256} of a parity build's executables and libraries (its build.json)."""
    if not bin_dir:
        return {}
    try:
        prov = json.loads((Path(bin_dir).parent.parent / "build.json").read_text())
    except (OSError, ValueError):
        return {}
    return {**(prov.get("binaries") or {}), **(prov.get("libraries") or {})}


def static_evidence(
    env: dict[str, str],
    server_args: list[str],
    builds_lever: bool,
    built: dict,
    series_dir: str | None,
    arm_a: str,
    arm_b: str,
    runner,
) -> dict:
    """What the builds say before anything runs: an env lever's names in arm B's build, a build
    lever's files against arm A's; server arguments are checked by llama-server itself (it
    refuses one it does not know).  The first part that says no decides."""
    bin_b = built[arm_b].get("bin_dir") or built[arm_b].get("prebuilt")
    parts = []
    if env:
        parts.append(static_env(list(env), bin_b, runner, series_dir))
    if builds_lever:
        parts.append(static_build(build_hashes(built[arm_a].get("bin_dir")), build_hashes(built[arm_b].get("bin_dir"))))
    if server_args:
        parts.append(
            {
                "engaged": True,
                "how": "server-args",
                "why": f"llama-server takes {' '.join(server_args)} (it refuses an argument it does not know)",
            }
        )
    if not parts:
        return {"engaged": False, "how": None, "why": "the lever changes nothing parity can look for"}
    bad = [x for x in parts if not x["engaged"]]
    first = bad[0] if bad else parts[0]
    return {**first, "parts": parts}


def planned(env: dict[str, str], markers: list[str], builds_lever: bool) -> dict:
    """A dry run's word on engagement: what the real run will look at (nothing is read now)."""
    what = [
        f"{', '.join(env)} in arm B's build" if env else "",
        "arm B's files against arm A's" if builds_lever else "",
        (
            f"--marker {', '.join(repr(m) for m in markers)} in arm B's logs"
            if markers
            else "lines only arm B's logs hold"
        ),
    ]
    return {
        "engaged": None,
        "how": None,
        "why": "checked once the builds exist, before the lock: " + "; ".join(w for w in what if w),
    }


def from_run(run_dir: str | Path, arm_a: str, arm_b: str, markers: list[str], masks: tuple[str, ...] = ()) -> dict:
    """The logs' evidence of one A/B run directory (bench blocks, serving servers)."""
    logs_a, logs_b = arm_logs(run_dir, arm_a), arm_logs(run_dir, arm_b)
    out = from_logs(read_lines(logs_a), read_lines(logs_b), markers, masks)
    return {**out, "files": {"A": [p.name for p in logs_a], "B": [p.name for p in logs_b]}}


def not_gated(kind: str) -> dict:
    """The gates of an A/B stopped before them (the lever did not engage)."""
    return {"ok": None, "kind": kind, "summary": "not run (the lever did not engage)", "problem": None}


def overrule(dec: dict, eng: dict, gate: dict) -> dict:
    """The verdict once engagement is known: a lever that did not engage is NOT ENGAGED (a red
    gate still says NO-GO: the arms' outputs differ, so something in arm B did change)."""
    if eng["engaged"] or gate.get("ok") is False:
        return dec
    key = (
        dec["key"]
        if dec["key"].get("ratio") is not None
        else {**dec["key"], "text": f"no B/A (not measured; evidence: {eng.get('how') or 'none'})"}
    )
    return {
        **dec,
        "verdict": NOT_ENGAGED,
        "why": f"the lever did not engage: {eng['why']}",
        "key": key,
        "missing": [],
        "measured_verdict": dec["verdict"],
    }


def line(eng: dict) -> str:
    """The map's `engaged` cell: yes/no and how."""
    return f"{'yes' if eng['engaged'] else 'no'} ({eng.get('how') or 'no evidence'}): {eng['why']}"[:300]


def judge(static: dict | None, logs: dict | None) -> dict:
    """The arm's verdict on engagement: {engaged, how, why, evidence}.  Static evidence that says
    no is final; an asked marker absent from arm B says no; else it engaged, shown by the
    markers, by lines only arm B printed, or (weakest) by the build alone."""
    evidence = {"build": static, "logs": logs}
    if static is not None and not static["engaged"]:
        return {"engaged": False, "how": static["how"], "why": static["why"], "evidence": evidence}
    if logs:
        absent = [m for m, c in logs["markers"].items() if not c["B"]]
        if absent:
            return {
                "engaged": False,
                "how": "markers",
                "why": f"marker {absent[0]!r} is in none of arm B's {logs['lines']['B']} log lines",
                "evidence": evidence,
            }
        if logs["markers"]:
            shown = "; ".join(f"{m!r} x{c['B']} in B (A x{c['A']})" for m, c in logs["markers"].items())
            return {"engaged": True, "how": "markers", "why": f"markers in arm B's logs: {shown}", "evidence": evidence}
        if logs["only_in_B"]:
            first = logs["only_in_B"][0]
            return {
                "engaged": True,
                "how": "log",
                "why": f"{logs['only_in_B_total']} line(s) only arm B printed, "
                f"e.g. {first['line'][:120]!r} x{first['count']}",
                "evidence": evidence,
            }
    why = static["why"] if static else "no evidence taken"
    note = "; no log line shows it (--marker REGEX names the line the lever prints)" if logs is not None else ""
    return {
        "engaged": static is not None,
        "how": static["how"] if static else None,
        "why": why + note,
        "evidence": evidence,
    }
