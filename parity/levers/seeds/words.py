"""What every source format shares: the entry a parser returns, the users' verdict words mapped
to the map's, and the pieces read out of a sentence (env levers as typed, patch numbers, the key
number, the artifact and its date).  Pure functions over text."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

ANY_VALUE = "<any>"  # an env lever recorded without one value: it closes every value


@dataclass
class Entry:
    """One verdict of the users' history: lever (env levers as `parity ab --env` takes them,
    `NAME=VALUE[ NAME=VALUE]`; patch levers by number; else the source's name), the canonical
    verdict and the source's own words for it."""

    lever: str
    kind: str  # env | patch | named
    verdict: str
    said: str
    what: str = ""
    key_number: str | None = None
    phase: str | None = None
    artifact: str | None = None
    date: str | None = None
    source: str = ""
    env: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """The identity an import recognises again (kept in the map row's `import`)."""
        return f"Phase{self.phase} {self.lever}" if self.phase else self.lever


def entries(levers: list[tuple[str, str, dict]], **fields) -> list[Entry]:
    """One entry per lever a row or record names (lever_of's (lever, kind, env)), the other fields shared."""
    return [Entry(lever=lever, kind=kind, env=env, **fields) for lever, kind, env in levers]


# the users' words -> the map's verdicts; in a sentence the earliest match decides
_FREE = [
    (
        "REJECTED",
        r"\bkeep\b[^.]{0,40}\brejected\b|\breject(?:s|ed|ing)?\b|\bno-go\b|\bdo not promote\b"
        r"|\brefuted\b|\binfeasible\b|\bnot recommended\b",
    ),
    ("DROPPED", r"\bdrop(?:s|ped)?\b"),
    (
        "FLAT",
        r"\bflat\b(?!\s+(?:aggregate|decode|prefill|throughput|wall|serving))",
    ),  # "flat aggregate": a metric, not the verdict
    (
        "CLOSED",
        r"(?<!not )\bclos(?:e|es|ed)\b(?![^.]{0,24}\bgap\b)|\bexhausted\b",
    ),  # "does not close parity" is no verdict on a lever
    ("SUPERSEDED", r"\bsupersed(?:e|es|ed)\b"),
    ("SHIPPED", r"\bship(?:s|ped)?\b|\blanded\b|\bland now\b"),
    ("KEPT", r"\bkeep\b|\bkept\b|\bcarr(?:y|ies|ied)\b"),
]
FREE = [(v, re.compile(p, re.I)) for v, p in _FREE] + [("GO", re.compile(r"\bGO\b"))]
# a verdict cell or a list item's verdict: the users' upper-case words
UPPER = re.compile(
    r"\b(REJECTED|REJECT|REFUTED|SHIPPED|DROPPED|DROP|SUPERSEDED|superseded|CLOSED|EXHAUSTED|FLAT|NEUTRAL|KEEP"
    r"|LAND NOW|NOT recommended|GO)\b"
)
_UPPER_MAP = {
    "REJECT": "REJECTED",
    "REFUTED": "REJECTED",
    "NOT RECOMMENDED": "REJECTED",
    "DROP": "DROPPED",
    "EXHAUSTED": "CLOSED",
    "NEUTRAL": "FLAT",
    "KEEP": "KEPT",
    "LAND NOW": "SHIPPED",
}


def upper_verdict(word: str) -> str:
    w = word.upper()
    return _UPPER_MAP.get(w, w)


def classify(sentence: str) -> str | None:
    """The verdict a sentence states (its earliest verdict word), or None."""
    hits = [(m.start(), i, v) for i, (v, rx) in enumerate(FREE) if (m := rx.search(sentence))]
    return min(hits)[2] if hits else None


_SENTENCE_END = re.compile(r"(?<=[A-Za-z0-9)%`'\"\]][.!?])\s+(?=[A-Z`(])")


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(" ".join(text.split())) if s.strip()]


def clip(text: str, n: int = 240) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3].rstrip() + "..."


# llama.cpp's and the series' env levers; not the harness's knobs (N_PREDICT=...)
ENV_NAME = r"(?:LLAMA|GGML|GDN|CUDA)(?:_[A-Z0-9]+)+"
_ASSIGN = re.compile(rf"(?<![A-Za-z0-9_])({ENV_NAME})=(<[^>\s]+>|[^\s,;)`'\"]+)")
_JOIN = re.compile(r"^\s*(?:plus\s+|and\s+|\+\s+)?$")
_BARE = re.compile(r"(?<![A-Za-z0-9_<])((?:LLAMA|GGML|GDN)_[A-Z0-9_]*[A-Z0-9])(?![A-Za-z0-9_=])")


def _value(v: str) -> str:
    v = v.rstrip(".:")
    return ANY_VALUE if v.startswith("<") else v


def env_levers(text: str, bare: bool = False) -> list[dict[str, str]]:
    """The first env lever a text names, as the env dicts `parity ab --env` would take: NAME=VALUE,
    joined with the assignments right after it (`A=1 B=2`, `A=1 plus B=2`); a value list `=16/32/64`
    is one lever per value, `=<n>` any value.  bare: a LLAMA_/GGML_/GDN_ name without a value is
    the lever at any value.  [] when it names none."""
    ms = list(_ASSIGN.finditer(text))
    if ms:
        group = [ms[0]]
        for m in ms[1:]:
            if not _JOIN.match(text[group[-1].end() : m.start()]) or m.group(1) in {g.group(1) for g in group}:
                break
            group.append(m)
        env = {m.group(1): _value(m.group(2)) for m in group}
        if len(env) == 1:
            ((name, value),) = env.items()
            parts = value.split("/")
            if len(parts) > 1 and all(p.isdigit() for p in parts):
                return [{name: p} for p in parts]
        return [env]
    if bare and (m := _BARE.search(text)):
        return [{m.group(1): ANY_VALUE}]
    return []


def env_label(env: dict[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in env.items())


_PATCH_LEAD = re.compile(r"^\s*(\d{4}(?:\s*/\s*\d{4})?)\b")
_PATCH_ANY = re.compile(r"\bpatch(?:es)?\s+`?(\d{4})\b|\((\d{4})\)|\(was patch (\d{4})\b")


def patch_of(text: str, leading_only: bool = False) -> str | None:
    """A patch lever's number: the text's leading NNNN (`0045/0046` kept whole), else `patch NNNN`
    or `(NNNN)` in it."""
    if m := _PATCH_LEAD.match(text):
        return re.sub(r"\s+", "", m.group(1))
    if leading_only:
        return None
    m = _PATCH_ANY.search(text)
    return next(g for g in m.groups() if g) if m else None


_ARTIFACT = re.compile(r"(/home/[^\s,;`'\"]+/bench/[^\s,;`'\"]+)")
_STAMP = re.compile(r"/(20\d{2})(\d{2})(\d{2})_\d{6}")


def artifact_of(text: str) -> str | None:
    m = _ARTIFACT.search(text)
    return m.group(1).rstrip(".):") if m else None


def date_of_artifact(artifact: str | None) -> str | None:
    m = _STAMP.search(artifact or "")
    return f"{m.group(1)}-{m.group(2)}-{m.group(3)}" if m else None


_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?\s*%|\d\s*->\s*[-+]?\d|\d\.\d+x\b|\b\d+(?:\.\d+)?x\b| vs\.? \d")


def key_number(texts: list[str]) -> str | None:
    """The sentence that carries the numbers (a %, an `a -> b`, a ratio): the first such one of
    texts, those not only about the gates (md5, op counts) first."""
    hits = [s for s in texts if _NUMBER.search(s)]
    best = [s for s in hits if "md5" not in s and "/1146" not in s] or hits
    return clip(best[0]) if best else None


def lever_of(text: str, kind_hint: str | None = None, bare: bool = False) -> list[tuple[str, str, dict]]:
    """(lever, kind, env) for each lever a text names: a leading patch number, else env levers,
    else a patch it names; [] when none (the caller names it)."""
    if p := patch_of(text, leading_only=True):
        return [(p, "patch", {})]
    if envs := env_levers(text, bare=bare):
        return [(env_label(e), "env", e) for e in envs]
    if p := patch_of(text):
        return [(p, "patch", {})]
    return []
