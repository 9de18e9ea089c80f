"""Change a YAML file a person also edits (the lever map, the series registry) and keep what
they wrote: comments, keys parity does not know, order, indentation, quoting.

An item for a block list is added as text after the list's last item, so every other byte
stays; any other change (or a list in flow style) goes through ruamel.yaml's round-trip mode
(comments and layout kept, the file's own indentation read from it).  Either way the result is
parsed back and must hold exactly the old data plus the change, or nothing is written
(YamlEditError)."""

from __future__ import annotations

import io
import json
from typing import Any, Callable

import yaml

from parity.yamlload import compose, safe_load


class YamlEditError(ValueError):
    """The change could not be made without altering what the file already holds."""


def _canon(x: Any) -> Any:
    """x for comparing: mappings order-free (keys of mixed types: 0 and "abc"), NaN equal to
    NaN, dates and other scalars by their text."""
    if isinstance(x, dict):
        return sorted((repr(k), _canon(v)) for k, v in x.items())
    if isinstance(x, list):
        return [_canon(v) for v in x]
    return repr(x) if isinstance(x, float) else json.dumps(x, default=str)


def _same(a: Any, b: Any) -> bool:
    return _canon(a) == _canon(b)


def item_text(item: dict, dash_col: int = 0, offset: int = 2) -> str:
    """One block-list item `- key: value ...` with its dash at dash_col and its keys offset
    columns after the dash (the layout of the list it joins)."""
    lines = yaml.safe_dump([item], sort_keys=False, allow_unicode=True, width=1000).splitlines()
    pad, inner = " " * dash_col, " " * (dash_col + offset)
    out = [pad + "-" + " " * (offset - 1) + lines[0][2:]]
    out += [inner + ln[2:] if ln.startswith("  ") else ln for ln in lines[1:]]
    return "\n".join(out) + "\n"


def _last_scalar(node):
    while isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and node.value:
        node = node.value[-1][1] if isinstance(node, yaml.MappingNode) else node.value[-1]
    return node


def _insertion(text: str, key: str) -> tuple[int, int, int] | None:
    """(line index to insert before, dash column, key offset) for one more item of the
    top-level block list `key` (or for its first item when `key:` has no value); None when
    the list cannot simply be added to as text (flow style, an odd first line)."""
    try:
        root = compose(text)
    except yaml.YAMLError:
        return None
    if not isinstance(root, yaml.MappingNode):
        return None
    pair = next(((k, v) for k, v in root.value if isinstance(k, yaml.ScalarNode) and k.value == key), None)
    if pair is None:
        return None
    k, v = pair
    lines = text.splitlines()
    if isinstance(v, yaml.ScalarNode) and v.tag.endswith(":null") and not v.value:
        return (k.start_mark.line + 1, k.start_mark.column, 2) if v.start_mark.line == k.start_mark.line else None
    if not isinstance(v, yaml.SequenceNode) or v.flow_style or not v.value:
        return None
    last = v.value[-1]
    if not isinstance(last, yaml.MappingNode) or last.flow_style:
        return None
    line = lines[last.start_mark.line]
    dash = line.rfind("-", 0, last.start_mark.column)
    if dash < 0 or line[:dash].strip():
        return None
    end = _last_scalar(last).end_mark
    return (end.line if end.column == 0 else end.line + 1), dash, last.start_mark.column - dash


def _inserted(text: str, at: int, item: str) -> str:
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\r\n" if "\r\n" in text else "\n"
    return "".join(lines[:at]) + item + "".join(lines[at:])


def _layout(text: str) -> tuple[int, int, int]:
    """(mapping indent, sequence indent, sequence offset) as ruamel.yaml's indent() takes them,
    read from the file's first nested block mapping and first block list under a key (ruamel's
    own guess misreads a key with a comment after it, and its wrong guess grows each rewrite)."""
    try:
        root = compose(text)
    except yaml.YAMLError:
        root = None
    mapping = seq = None
    todo = [root] if root is not None else []
    while todo and (mapping is None or seq is None):
        node = todo.pop(0)
        if isinstance(node, yaml.MappingNode) and not node.flow_style:
            for k, v in node.value:
                if isinstance(v, yaml.MappingNode) and not v.flow_style and v.value and mapping is None and v.start_mark.line > k.start_mark.line:
                    mapping = v.value[0][0].start_mark.column - k.start_mark.column
                if isinstance(v, yaml.SequenceNode) and not v.flow_style and v.value and seq is None:
                    item = v.value[0]
                    line = text.splitlines()[item.start_mark.line]
                    dash = line.rfind("-", 0, item.start_mark.column)
                    if dash >= k.start_mark.column:
                        seq = (item.start_mark.column - k.start_mark.column, dash - k.start_mark.column)
                todo.append(v)
        elif isinstance(node, yaml.SequenceNode):
            todo.extend(node.value)
    mapping = mapping if mapping and mapping > 0 else 2
    sequence, offset = seq if seq and seq[0] > seq[1] else (mapping, 0)
    return mapping, sequence, offset


def _yaml_for(text: str):
    from ruamel.yaml import YAML

    y = YAML()  # round-trip
    y.preserve_quotes = True
    y.width = 4096
    mapping, sequence, offset = _layout(text)
    y.indent(mapping=mapping, sequence=sequence, offset=offset)
    return y


def round_trip(text: str, change: Callable[[Any], None]) -> str:
    """text with change(data) applied to its round-trip data (a ruamel CommentedMap: use it as
    a dict); the rest as written."""
    y = _yaml_for(text)
    data = y.load(text)
    change(data)
    buf = io.StringIO()
    y.dump(data, buf)
    return buf.getvalue()


def append_to_list(text: str, key: str, item: dict, header: str = "", before: Any = ...) -> str:
    """text with item appended to its top-level list `key` (made when missing; an empty file
    becomes header + the list).  before: text already parsed, when the caller has it.  Raises
    YamlEditError when text is not a mapping or the result would not read back as the old data
    plus item.  A file with CRLF line ends gets CRLF lines."""
    if not text.strip():
        text, before = header, ...
    if before is ...:
        before = safe_load(text) if text.strip() else None
    if before is None:  # empty, or comments only: they stay, the list starts below them
        text = (text if not text or text.endswith("\n") else text + "\n") + f"{key}:\n"
        before = {key: None}
    if not isinstance(before, dict) or not isinstance(before.get(key) or [], list):
        raise YamlEditError(f"not a mapping with a `{key}:` list")
    want = {**before, key: [*(before.get(key) or []), item]}
    candidates = []
    if (where := _insertion(text, key)) is not None:
        at, dash, offset = where
        eol = "\r\n" if "\r\n" in text else "\n"
        candidates.append(lambda: _inserted(text, at, item_text(item, dash, offset).replace("\n", eol)))
    candidates.append(lambda: round_trip(text, lambda d: _append_rt(d, key, item)))
    for make in candidates:
        try:
            out = make()
            if _same(safe_load(out), want):
                return out
        except Exception:  # noqa: BLE001 - a candidate that does not parse or reads wrong is not written
            continue
    raise YamlEditError(f"could not add an item to `{key}:` without changing what the file holds")


def _append_rt(data, key: str, item: dict) -> None:
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    seq = data.get(key)
    if seq is None:
        seq = CommentedSeq()
        data[key] = seq
    if not seq:
        seq.fa.set_block_style()
    seq.append(CommentedMap(item))


def edit(text: str, change: Callable[[Any], None], header: str = "") -> str:
    """text with change applied: a function that edits a dict in place, called on the plain
    data (what the result must read back as) and on the round-trip data (what is written).
    An empty text becomes header + the changed data.  Raises YamlEditError when text is not a
    mapping or the result would not read back as the plain data changed."""
    if not text.strip():
        text = header
    want = safe_load(text) if text.strip() else None
    fresh = want is None  # empty, or comments only: they stay, the data goes below them
    want = {} if fresh else want
    if not isinstance(want, dict):
        raise YamlEditError("the file is not a mapping")
    change(want)
    try:
        if fresh:
            out = (text if not text or text.endswith("\n") else text + "\n") + yaml.safe_dump(want, sort_keys=False, allow_unicode=True)
        else:
            out = round_trip(text, change)
        ok = _same(safe_load(out), want)
    except Exception as e:  # noqa: BLE001 - whatever ruamel or the read-back raise: nothing is written
        raise YamlEditError(f"round-trip failed: {type(e).__name__}: {e}") from None
    if not ok:
        raise YamlEditError("the edited file would not read back as intended")
    return out
