"""The package's layers, checked from the source: every import of a parity module (inside
functions too, and the "module:function" strings of the plain-dict registries) is an edge; no
cycle between modules, none between packages, and no edge up the layer order that
docs/ARCHITECTURE.md writes down (an import goes to its own layer or one below)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from pysource import parse

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "parity"
ARCH = ROOT / "docs" / "ARCHITECTURE.md"
REGISTRY_STRING = re.compile(r"^(parity(?:\.[a-z_][a-z0-9_]*)+):[A-Za-z_][A-Za-z0-9_]*$")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PKG.rglob("*.py")}


def resolve(name: str, known: dict) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(source: str, module: str, is_package: bool) -> set[str]:
    """Every parity module name this source imports.  `from pkg import sub` is an edge to pkg.sub
    alone when sub is a module (Python runs pkg/__init__ first, as for any submodule: not counted)."""
    known = modules_cache()
    here = module if is_package else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(parse(source)):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = here.split(".")
                base = ".".join(parts[: len(parts) - (node.level - 1)] + ([node.module] if node.module else []))
            for a in node.names:
                full = f"{base}.{a.name}"
                targets.append(full if full in known else base)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and REGISTRY_STRING.match(node.value):
            targets = [node.value.split(":")[0]]
        for t in targets:
            if t.split(".")[0] == "parity" and (r := resolve(t, known)) and r != module:
                out.add(r)
    return out


_CACHE: dict = {}


def modules_cache() -> dict[str, Path]:
    if not _CACHE:
        _CACHE.update(modules())
    return _CACHE


def graph() -> dict[str, set[str]]:
    mods = modules_cache()
    return {m: imports_of(p.read_text(), m, p.name == "__init__.py") for m, p in mods.items()}


def package_of(module: str) -> str:
    """parity/<package>/ or a top-level module: the unit of the layer order."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "parity"


def cycles(nodes, edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def package_graph(g: dict[str, set[str]]) -> dict[str, set[str]]:
    pg: dict[str, set[str]] = {}
    for a, bs in g.items():
        for b in bs:
            pa, pb = package_of(a), package_of(b)
            if pa != pb and pa != "parity" and pb != "parity":  # parity/__init__: the version only
                pg.setdefault(pa, set()).add(pb)
    return pg


def layers() -> list[list[str]]:
    """The ```layers block of docs/ARCHITECTURE.md, top first: one layer a line, its packages."""
    m = re.search(r"```layers\n(.*?)```", ARCH.read_text(), re.S)
    assert m, "docs/ARCHITECTURE.md has no ```layers block"
    return [line.split("#")[0].split() for line in m.group(1).splitlines() if line.split("#")[0].strip()]


def upward(pg: dict[str, set[str]], order: list[list[str]]) -> list[str]:
    rank = {p: i for i, layer in enumerate(order) for p in layer}  # 0 = top
    return sorted(f"{a} -> {b}" for a, bs in pg.items() for b in bs if rank[a] > rank[b])


def test_the_scanner_sees_every_kind_of_edge():
    src = "import parity.config\nfrom parity.engines import llama\ndef f():\n    from parity.stats import paired\nSTEPS = {'x': 'parity.campaign:shell_step'}\n"
    got = imports_of(src, "parity.doctor", False)
    assert {"parity.config", "parity.engines.llama", "parity.stats.paired", "parity.campaign"} <= got
    assert "parity.engines" not in got  # the package's __init__ is not an edge of a submodule import


def test_the_cycle_finder_finds_a_cycle():
    assert cycles(["a", "b", "c"], {"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c"]]
    assert cycles(["a", "b"], {"a": {"b"}}) == []


def test_no_cycle_between_modules():
    g = graph()
    assert cycles(sorted(g), g) == []


def test_no_cycle_between_packages():
    pg = package_graph(graph())
    assert cycles(sorted(pg), pg) == []


def test_every_package_has_a_layer_and_no_import_goes_up():
    order = layers()
    named = [p for layer in order for p in layer]
    assert len(named) == len(set(named)), "a package is named twice in the layers"
    packages = {package_of(m) for m in modules_cache()} - {"parity"}
    assert packages - set(named) == set(), "packages missing from docs/ARCHITECTURE.md's layers"
    assert set(named) - packages == set(), "layers name packages that do not exist"
    assert upward(package_graph(graph()), order) == []


def test_only_the_cli_and_the_heavy_imports_are_lazy():
    """Imports of parity modules sit at module level outside cli/ (cli/ imports the domain inside
    its commands, so `parity --help` stays fast)."""
    lazy = []
    for m, p in modules_cache().items():
        if m.startswith("parity.cli") or m == "parity.__main__":
            continue
        tree = parse(p.read_text())
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, (ast.Import, ast.ImportFrom)):
                        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                        if any(n.split(".")[0] == "parity" for n in names) or (isinstance(node, ast.ImportFrom) and node.level):
                            lazy.append(f"{m}:{fn.lineno}")
    assert lazy == []
