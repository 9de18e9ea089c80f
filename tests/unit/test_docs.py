"""README.md stays a manual (at most 250 lines), and what README.md and docs/*.md point at
exists: every relative link and in-page anchor, every repository path written in backticks,
every `parity.module.name` they name."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 250

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
REPO_PATH = re.compile(r"(?:parity|tests|scripts|campaigns|benchmarks|docs|\.github|\.ci)/[\w./-]*")
PLACEHOLDER = re.compile(r"NAME|NNNN|KIND|<|>|\*|\{")
DOTTED = re.compile(r"\bparity(?:\.(?!ya?ml\b)[A-Za-z_]\w*)+")  # not parity.yaml, the file that names the default profile


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, code marks and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    out, fenced = set(), False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := HEADING.match(line)):
            out.add(slug(m.group(1)))
    return out


def prose(text: str) -> str:
    """The text outside fenced code blocks (a YAML or shell example is not a claim about this repo)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def broken_links(page: Path) -> list[str]:
    text = page.read_text()
    bad = []
    for target in LINK.findall(prose(text)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest.read_text()):
            bad.append(f"{target}: no heading with that anchor")
    return bad


def missing_names(page: Path) -> list[str]:
    text = prose(page.read_text())
    bad = []
    for span in CODE_SPAN.findall(text):
        span = span.strip()
        if REPO_PATH.fullmatch(span) and not PLACEHOLDER.search(span) and not (ROOT / span).exists():
            bad.append(f"{span}: no such path")
    for name in sorted(set(DOTTED.findall(text))):
        if not resolves(name):
            bad.append(f"{name}: no such module or attribute")
    return bad


def resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_readme_is_a_manual_of_at_most_250_lines():
    n = len((ROOT / "README.md").read_text().splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines (at most {README_MAX_LINES}: move detail to docs/)"


def test_readme_cli_table_has_every_command():
    from parity.cli import app
    from tests.unit.test_layout import _commands

    cells = [re.split(r"(?<!\\)\|", line)[1] for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| `parity ")]
    missing = []
    for command in _commands(app):
        group, *sub = command.split()
        if not any(re.match(rf"\s*`parity {group}\b", c) and all(re.search(rf"\b{s}\b", c) for s in sub) for c in cells):
            missing.append(command)
    assert missing == [], "commands without a row in README's CLI table"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    assert broken_links(page) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_named_path_and_module_exists(page):
    assert missing_names(page) == []


def test_the_checks_find_what_is_broken(tmp_path):
    (tmp_path / "there.md").write_text("# A heading, with `code`\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md) [ok](there.md#a-heading-with-code) [web](https://example.org/x) [self](#top)\n"
        "# Top\n[gone](missing.md) [bad anchor](there.md#nope)\n"
        "```yaml\n[in code](not-checked.md)\n```\n"
        "`parity/cli/__init__.py` `parity/no_such_module.py` `docs/NAME.md` parity.cli.app parity.cli.no_such_name\n"
    )
    assert broken_links(page) == ["missing.md: no such file", "there.md#nope: no heading with that anchor"]
    bad = missing_names(page)
    assert bad == ["parity/no_such_module.py: no such path", "parity.cli.no_such_name: no such module or attribute"]
