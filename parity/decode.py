"""Typed decoding of YAML into dataclasses and msgspec Structs: every problem is one ConfigError naming the
file, the key and what is wrong (profiles, campaigns, matrices, registries, the lever map)."""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from pathlib import Path
from typing import Any, Literal

import msgspec

from parity.errors import ConfigError
from parity.yamlload import MAX_BYTES, TooBig, safe_load


def read_utf8(path: Path, label: str, missing: str = "file not found") -> str:
    """A config/campaign/registry file's text; every way it cannot be read is a ConfigError."""
    try:
        with open(path, "rb") as f:  # no more than the YAML loader takes: /dev/zero is refused, not read
            raw = f.read(MAX_BYTES + 1)
        if len(raw) > MAX_BYTES:
            raise ConfigError(label, "", f"over parity's limit of {MAX_BYTES:,} bytes for a YAML file")
        return raw.decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(label, "", missing) from None
    except IsADirectoryError:
        raise ConfigError(label, "", "is a directory, not a YAML file") from None
    except OSError as e:
        raise ConfigError(label, "", f"cannot read: {e.strerror}") from None
    except UnicodeDecodeError as e:
        line = e.object[: e.start].count(b"\n") + 1
        raise ConfigError(label, f"line {line}", f"not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start})") from None


def read_yaml(path: Path, label: str, missing: str = "file not found", not_mapping: str | None = None) -> dict:
    """A YAML file whose top level is a mapping (empty -> {}); every way it is not is one
    ConfigError naming the line (profiles, campaigns, matrices, the lever map)."""
    import yaml

    text = read_utf8(path, label, missing)
    try:
        data = safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(label, where, problem if isinstance(e, TooBig) else f"YAML syntax error: {problem}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(label, "", not_mapping or f"top level must be a mapping, got {type(data).__name__}")
    return data


# --------------------------------------------------------------------------- dataclass decoding


def is_record(tp) -> bool:
    """A dataclass or a msgspec Struct (class or instance): the profile's sections are Structs
    (cheap to create at every start), the other declarations dataclasses."""
    return dataclasses.is_dataclass(tp) or isinstance(tp, msgspec.Struct) or (isinstance(tp, type) and issubclass(tp, msgspec.Struct))


def replace(record, **changes):
    """A copy of a record (a dataclass or a Struct) with changes."""
    return msgspec.structs.replace(record, **changes) if isinstance(record, msgspec.Struct) else dataclasses.replace(record, **changes)


def record_fields(tp) -> types.MappingProxyType[str, bool]:
    """A record's field names, each with whether it is required (no default)."""
    return _fields_of(tp if isinstance(tp, type) else type(tp))


# Per class, once: msgspec.structs.fields and get_type_hints evaluate every string annotation
# again at each call (about 0.2 ms a class), and a profile load decodes some 30 sections.
@functools.cache
def _fields_of(cls: type) -> types.MappingProxyType[str, bool]:
    if dataclasses.is_dataclass(cls):
        return types.MappingProxyType({f.name: f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING for f in dataclasses.fields(cls)})
    return types.MappingProxyType({f.name: f.required for f in msgspec.structs.fields(cls)})


@functools.cache
def type_hints(cls: type) -> types.MappingProxyType[str, Any]:
    """A record class's resolved field types (a read-only view, computed once per class)."""
    return types.MappingProxyType(typing.get_type_hints(cls))


def _type_name(tp) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is list:
        return f"list of {_type_name(typing.get_args(tp)[0])}"
    if origin is dict:
        return f"mapping of {_type_name(typing.get_args(tp)[1])}"
    if tp is type(None):
        return "null"
    if is_record(tp):
        return "mapping"
    return getattr(tp, "__name__", str(tp))


# a section type decoded by its own function (config registers engines.NAME: its kind picks the class)
SECTIONS: dict[type, typing.Callable] = {}


def decode_value(tp, value, label: str, key: str):
    if tp in SECTIONS:
        return SECTIONS[tp](value, label, key)
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return decode_value(a, value, label, key)
            except ConfigError as e:
                errors.append(e)
        raise errors[0] if len(errors) == 1 else ConfigError(label, key, f"expected {_type_name(tp)}, got {_describe(value)}")
    if origin is Literal:
        if value not in typing.get_args(tp):
            raise ConfigError(label, key, f"must be one of {_type_name(tp)}, got {value!r}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(label, key, f"expected {_type_name(tp)}, got {_describe(value)}")
        (item,) = typing.get_args(tp)
        return [decode_value(item, v, label, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(label, key, f"expected {_type_name(tp)}, got {_describe(value)}")
        _, vt = typing.get_args(tp)
        return {str(k): decode_value(vt, v, label, f"{key}.{k}") for k, v in value.items()}
    if is_record(tp):
        return from_dict(tp, value, label, key)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(label, key, f"expected a number, got {_describe(value)}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(label, key, f"expected an integer, got {_describe(value)}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(label, key, f"expected true or false, got {_describe(value)}")
        return value
    if tp is str:
        if isinstance(value, bool) or value is None or isinstance(value, (list, dict)):
            raise ConfigError(label, key, f"expected a string, got {_describe(value)}")
        return str(value)  # numbers like 121 are fine as strings
    if tp is Any:
        return value
    raise ConfigError(label, key, f"unsupported type {tp}")


def _describe(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {value}"
    if isinstance(value, (int, float)):
        return f"number {value}"
    if isinstance(value, str):
        return f"string {value!r}" if len(value) < 40 else "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def from_dict(cls, data, label: str, prefix: str = ""):
    if not isinstance(data, dict):
        raise ConfigError(label, prefix, f"expected a mapping, got {_describe(data)}")
    hints = type_hints(cls)
    fields = record_fields(cls)
    kwargs = {}
    for k, v in data.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        renamed = getattr(cls, "RENAMED", {})  # keys that changed name or meaning: the reason, not "unknown key"
        if k in renamed:
            raise ConfigError(label, key, renamed[k])
        if k not in fields or k == "source_file":
            import difflib

            close = difflib.get_close_matches(str(k), [n for n in fields if n != "source_file"], n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigError(label, key, f"unknown key{hint}")
        kwargs[k] = decode_value(hints[k], v, label, key)
    for name, required in fields.items():
        if name not in kwargs and required:
            raise ConfigError(label, f"{prefix}.{name}" if prefix else name, "required key is missing")
    return cls(**kwargs)
