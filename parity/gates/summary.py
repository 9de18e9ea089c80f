"""gate_summary.tsv in the users' layout, and the audit of an artifact dir (their --summarize-gates).

The users' tools read `gate_summary.tsv` with the columns `phase check status actual expected
details` (paged-current-serving-snapshot.sh, write_gate_summary): rows such as
`pre moe_md5 ok <md5> <md5> <md5 file>` and `pre op_MUL_MAT ok 1146/1146 all <op file>`;
status ok | mismatch | missing (md5), ok | fail | missing (op), `skipped` for a phase whose
gate dir is absent.  A run is bad when any md5 or op row is not ok (their script then exits
6; parity exits 3, its gate-red code).  parity keeps its own per-check table in
gate_checks.tsv (`phase check expected got status`) and everything in gates.json.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from parity import tables
from parity.errors import UsageError
from parity.files import atomic_write_text
from parity.results import check, load_json, model
from parity.gates import known_md5, test_backend_ops as tbo
from parity.gates.checks import PASS
from parity.gates.kinds import of_check

COLUMNS = ["phase", "check", "status", "actual", "expected", "details"]
FILE = "gate_summary.tsv"  # the users' name and layout
OWN_FILE = "gate_checks.tsv"  # parity's per-check table
OWN_COLUMNS = ["phase", "check", "expected", "got", "status"]
GOOD = ("ok", "skipped")


def render(rows: list[list[str]]) -> str:
    return tables.tsv(COLUMNS, rows)


def bad(rows: list[list[str]]) -> list[str]:
    """The rows that make the summary bad, as `phase check status`."""
    return [f"{r[0]} {r[1]} {r[2]}" for r in rows if r[2] not in GOOD]


# --------------------------------------------------------------------------- parity's checks, their layout


def _details(c: dict, run_path: Path | None) -> str:
    rel = of_check(c.get("kind")).users_output(c)
    if rel and run_path is not None:
        return str(run_path / rel)
    return rel or c.get("detail") or ""


def default_paths(engines: dict) -> dict[str, str | None]:
    """{engine: its default path} of the profile's engines section (the users' rows omit it)."""
    return {n: getattr(e, "default_path", None) for n, e in engines.items()}


def rows_from_sets(sets: dict[str, dict], gate_engine: str | None, defaults: dict[str, str | None],
                   run_path: Path | None = None) -> list[list[str]]:  # fmt: skip
    """parity's gate sets (gates.json phases) as the users' rows; gate_engine: gates.engine,
    defaults: each engine's default path (default_paths)."""
    rows = []
    for phase, s in sets.items():
        for c in s.get("checks", []):
            kind = of_check(c.get("kind"))  # each kind names its rows, their status and output file
            actual = "" if (c.get("got") or "-") == "-" else c["got"]
            rows.append([phase, kind.users_name(c, gate_engine, defaults), kind.users_status(c), actual, kind.users_expected(c), _details(c, run_path)])
    if "pre" in sets and "post" not in sets:
        rows.append(["post", "all", "skipped", "", "", "post-gate not run (yet)"])
    return rows


def write(run, sets: dict[str, dict], gate_engine: str | None, defaults: dict[str, str | None]) -> None:
    """gate_summary.tsv (the users' layout) and gate_checks.tsv (parity's) into the run dir."""
    run.write_text(FILE, render(rows_from_sets(sets, gate_engine, defaults, run.path)))
    own = [(phase, c["check"], c["expected"], c["got"], c["status"]) for phase, s in sets.items() for c in s["checks"]]
    run.write_text(OWN_FILE, tables.tsv(OWN_COLUMNS, own))


# --------------------------------------------------------------------------- an artifact dir of theirs


def _md5_rows(phase: str, d: Path, expected: dict[str, str]) -> list[list[str]]:
    rows = []
    for name, want in expected.items():
        f = d / f"{name}.md5"
        got = f.read_text(errors="replace").split()[:1] if f.is_file() else []
        if not got:
            rows.append([phase, f"{name}_md5", "missing", "", want, f"{f} missing" if not f.is_file() else f"{f} empty"])
        else:
            rows.append([phase, f"{name}_md5", "ok" if got[0] == want else "mismatch", got[0], want, str(f)])
    return rows


def _op_rows(phase: str, d: Path, backend: str) -> list[list[str]]:
    files = sorted(d.glob("op_*.txt"))
    if not files:
        return [[phase, "op", "missing", "", "", "no op_*.txt files"]]
    rows = []
    for f in files:
        status, got, _ = tbo.verdict(tbo.parse(f.read_text(errors="replace")), backend, None)
        users = "ok" if status == PASS else ("missing" if got == "-" else "fail")
        rows.append([phase, f"op_{f.stem[3:]}", users, "" if got == "-" else got, "all", str(f)])
    return rows


def summarize_dir(art: Path, expected: dict[str, str], backend: str = "CUDA0") -> list[list[str]]:
    """The users' write_gate_summary over ART/gate_pre and ART/gate_post (md5 files, op_*.txt)."""
    rows = []
    for phase in ("pre", "post"):
        d = art / f"gate_{phase}"
        if not d.is_dir():
            rows.append([phase, "all", "skipped", "", "", f"{d} missing"])
            continue
        rows += _md5_rows(phase, d, expected)
        rows += _op_rows(phase, d, backend)
    return rows


@dataclass
class SummarizeRequest:
    """What `parity gate summarize ART` asks for."""

    art: str
    expect: dict[str, str] | None = None  # name -> md5 (default: the profile's canonical md5s of gates.models)
    backend: str | None = None  # default: gates.op_backend


def expected_md5s(profile, registry_file: str | None = None) -> dict[str, str]:
    """{model: canonical md5} for the profile's gate models on the gate engine's default path."""

    g = profile.gates
    path = profile.engines[g.engine].default_path if g.engine in profile.engines else None
    out = {}
    for m in g.models:
        c = known_md5.lookup(profile.models, m, path, g.form, g.n_predict, registry_file)
        if c:
            out[m] = c.md5
    return out


def summarize(ctx, req: SummarizeRequest) -> dict:
    """`parity gate summarize ART`: ART/gate_summary.tsv from an artifact dir of the users' harness
    (gate_pre/, gate_post/) or from a parity run (gates.json); {"rows", "bad", "file"}."""
    art = Path(req.art).expanduser()
    if not art.is_dir():
        raise UsageError(f"{req.art}: no such artifact directory")
    gates_json = art / "gates.json"
    if gates_json.is_file():  # a parity run: the same rows its gates wrote
        sets = {k: v for k, v in check(load_json(gates_json), model.Gates, gates_json, "gates file").data.items() if k != "status"}
        rows = rows_from_sets(sets, ctx.profile.gates.engine, default_paths(ctx.profile.engines), art)
    else:
        expected = req.expect if req.expect is not None else expected_md5s(ctx.profile)
        rows = summarize_dir(art, expected, req.backend or ctx.profile.gates.op_backend)

    out = art / FILE
    atomic_write_text(out, render(rows))
    return {"art": str(art), "file": str(out), "columns": COLUMNS, "rows": rows, "bad": bad(rows)}
