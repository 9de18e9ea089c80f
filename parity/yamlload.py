"""YAML text -> Python objects through libyaml when PyYAML was built with it: about 10x the
pure-Python loader (a profile: 20 ms -> 2 ms), and every parity start reads one or more.

Every YAML parity reads goes through safe_load, bounded: a text over MAX_BYTES, or one whose
aliases would expand it past MAX_NODES nodes (a "billion laughs" of a few hundred bytes grows
past any memory once something walks it), or a recursive alias, is refused with a TooBig
(a yaml.YAMLError: the callers' one-line error) before a node is built."""

from __future__ import annotations

import re

import yaml

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

MAX_BYTES = 8 * 1024 * 1024  # profiles, campaigns and lever maps are kilobytes
MAX_NODES = 1_000_000  # nodes once every alias is expanded (a lever map of 10,000 rows: some 400,000)
_PLAIN = 64 * 1024  # below this size and without an alias the text cannot hold MAX_NODES nodes
_ALIAS = re.compile(r"(?:^|[\s\[{,:])\*", re.M)  # where an alias can start (a '*' in `.*` or a quoted string cannot)


class TooBig(yaml.YAMLError):
    """A YAML text parity refuses to build (too large, aliases past the budget, a recursive alias)."""

    def __init__(self, problem: str):
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = None


def safe_load(text: str):
    if len(text) > MAX_BYTES:
        raise TooBig(f"{len(text):,} characters: over parity's limit of {MAX_BYTES:,} for a YAML file")
    if len(text) > _PLAIN or ("*" in text and _ALIAS.search(text)):
        _check_expansion(text)
    return yaml.load(text, Loader=_LOADER)  # noqa: S506 (a safe loader)


def compose(text: str):
    """The node tree of text (aliases stay shared nodes: nothing is expanded), size-bounded as safe_load."""
    if len(text) > MAX_BYTES:
        raise TooBig(f"{len(text):,} characters: over parity's limit of {MAX_BYTES:,} for a YAML file")
    return yaml.compose(text, Loader=_LOADER)


def _check_expansion(text: str) -> None:
    """Count the nodes the document holds with every alias expanded, from libyaml's events (nothing
    is kept but one count per open collection and per anchor): TooBig past MAX_NODES."""
    loader = _LOADER(text)
    sizes: dict[str, int] = {}  # anchor -> its node's expanded size
    open_: list[list] = []  # per open collection: [anchor, size so far]
    total, aliases = 0, False
    try:
        while loader.check_event():
            ev = loader.get_event()
            if isinstance(ev, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                open_.append([ev.anchor, 1])
                continue
            if isinstance(ev, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                anchor, size = open_.pop()
            elif isinstance(ev, yaml.ScalarEvent):
                anchor, size = ev.anchor, 1
            elif isinstance(ev, yaml.AliasEvent):
                if any(a == ev.anchor for a, _ in open_):  # built as a cycle: whatever walks it never ends
                    raise TooBig(f"a recursive alias *{ev.anchor} (line {ev.start_mark.line + 1}): "
                                 "an alias inside its own anchor")  # fmt: skip
                if ev.anchor not in sizes:
                    return  # an undefined alias: the loader says so itself
                anchor, size, aliases = None, sizes[ev.anchor], True
            else:
                continue
            if anchor is not None:
                sizes[anchor] = size
            if open_:
                open_[-1][1] += size
            else:
                total += size
            if (open_[-1][1] if open_ else total) > MAX_NODES:
                what = "its aliases expand it past" if aliases else "it holds more than"
                raise TooBig(f"{what} {MAX_NODES:,} nodes (near line {ev.start_mark.line + 1}): "
                             f"parity refuses a YAML file that large{' (an alias bomb?)' if aliases else ''}")
    finally:
        loader.dispose()
