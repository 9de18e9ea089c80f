"""A GGUF file's header: its metadata and tensor infos, without the tensor data.

gguf's GGUFReader builds a numpy view per array element: a 32k-token vocabulary costs it
~3 CPU-s, a 151k one (Qwen3) ~15, on every read.  This walks the same bytes with struct:
milliseconds.  Values come out as GGUFReader's `contents()` gives them (arrays as lists,
strings decoded), tensors as (name, shape, type, n_elements, offset)."""

from __future__ import annotations

import math
import mmap
import struct

import msgspec

MAGIC = b"GGUF"
# value type -> struct code (8 string and 9 array are read apart)
_SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


class GGUFHeaderError(ValueError):
    pass


class TensorInfo(msgspec.Struct, frozen=True):
    name: str
    shape: tuple[int, ...]  # ne0 first, as GGUF stores it
    tensor_type: int  # a gguf.GGMLQuantizationType value
    offset: int  # from the start of the data section

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)


class Header(msgspec.Struct):
    version: int
    fields: dict = msgspec.field(default_factory=dict)
    tensors: list[TensorInfo] = msgspec.field(default_factory=list)


class _Cursor:
    def __init__(self, buf, order: str, pos: int):
        self.buf, self.order, self.pos = buf, order, pos

    def take(self, code: str):
        return self.many(code, 1)[0]

    def many(self, code: str, count: int) -> tuple:
        size = count * struct.calcsize(code)  # checked before a format is built from a corrupt count
        if self.pos + size > len(self.buf):
            raise GGUFHeaderError(f"truncated at byte {self.pos}")
        out = struct.unpack_from(f"{self.order}{count}{code}", self.buf, self.pos)
        self.pos += size
        return out

    def string(self) -> str:
        n = self.take("Q")
        if self.pos + n > len(self.buf):
            raise GGUFHeaderError(f"truncated string at byte {self.pos}")
        s = self.buf[self.pos : self.pos + n].decode("utf-8", errors="replace")  # an mmap slice is bytes already
        self.pos += n
        return s

    def strings(self, count: int) -> list[str]:
        # a vocabulary is most of a header (32k-151k strings, twice with merges): one tight
        # loop, not a method call per string (0.09 -> 0.02 CPU-s for 32k tokens)
        buf, pos, end = self.buf, self.pos, len(self.buf)
        length = struct.Struct(self.order + "Q").unpack_from
        out = []
        for _ in range(count):
            if pos + 8 > end:
                raise GGUFHeaderError(f"truncated at byte {pos}")
            (n,) = length(buf, pos)
            pos += 8
            if pos + n > end:
                raise GGUFHeaderError(f"truncated string at byte {pos}")
            out.append(buf[pos : pos + n].decode("utf-8", errors="replace"))
            pos += n
        self.pos = pos
        return out

    def value(self, vtype: int):
        if vtype in _SCALAR:
            return self.take(_SCALAR[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype, count = self.take("I"), self.take("Q")
            if etype in _SCALAR:
                return list(self.many(_SCALAR[etype], count))
            if etype == _STRING:
                return self.strings(count)
            return [self.value(etype) for _ in range(count)]
        raise GGUFHeaderError(f"unknown value type {vtype} at byte {self.pos}")


def read_header(path: str, enough=None) -> Header:
    """Metadata and tensor infos of a GGUF (v2 or v3, either byte order); GGUFHeaderError for
    anything that is not one, OSError when the file cannot be read.  enough(fields): stop
    reading once it says yes (the tensor infos are then left unread)."""
    with open(path, "rb") as f:
        try:
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # an empty file
            raise GGUFHeaderError("empty file") from None
    with buf:
        if buf[:4] != MAGIC:
            raise GGUFHeaderError("not a GGUF (magic)")
        if len(buf) < 24:
            raise GGUFHeaderError("truncated at byte 4")
        # a big-endian file's version reads as a huge number in little-endian order
        order = "<" if struct.unpack_from("<I", buf, 4)[0] & 0xFFFF else ">"
        c = _Cursor(buf, order, 4)
        version = c.take("I")
        if version not in (2, 3):
            raise GGUFHeaderError(f"GGUF version {version} (2 or 3 read here)")
        n_tensors, n_kv = c.take("Q"), c.take("Q")
        h = Header(version)
        for _ in range(n_kv):
            key = c.string()
            h.fields[key] = c.value(c.take("I"))
            if enough is not None and enough(h.fields):
                return h
        for _ in range(n_tensors):
            name = c.string()
            dims = c.take("I")
            shape = c.many("Q", dims)
            h.tensors.append(TensorInfo(name, shape, c.take("I"), c.take("Q")))
        return h


def context_length(path: str) -> int | None:
    """<arch>.context_length from a GGUF's header (None when it is not a readable GGUF)."""
    def key(fields: dict) -> str:
        return f"{fields.get('general.architecture')}.context_length"

    try:  # the key comes before the vocabulary in every writer seen: its arrays stay unread
        fields = read_header(path, lambda f: key(f) in f).fields
    except (OSError, GGUFHeaderError):  # a missing or foreign file: the run-time /props check still holds
        return None
    n = fields.get(key(fields))
    return int(n) if isinstance(n, int) and not isinstance(n, bool) else None
