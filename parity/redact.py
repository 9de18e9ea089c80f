"""Secrets out of what parity prints or writes: a URL's credentials (http://user:pass@host ->
http://<redacted>@host) and the values of secret-named query parameters (?token=... ->
?token=<redacted>).  Every line parity prints and every argv and profile it writes into a
manifest goes through text() or tree()."""

from __future__ import annotations

import re

REDACTED = "<redacted>"
SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.I)  # an env variable's name

_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)[^/?#@\s'\"]*@")
_SECRET_PARAM = r"[^=&#\s'\"]*(?:token|key|secret|passw|pwd|sig|auth|credential)[^=&#\s'\"]*"
_QUERY = re.compile(rf"(?P<key>[?&;]{_SECRET_PARAM}=)[^&#\s'\"]*", re.I)
_AUTHORITY = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)?[^/?#]*@")
_BARE = re.compile(r"(?<![\w.%+-])[\w.%+-]+:[^\s/?#@'\"]+@(?=\w)")  # user:password@host without a scheme


def text(s: str) -> str:
    """s with every URL's user:password@ and secret-named query value replaced by <redacted>."""
    if "@" not in s and "=" not in s:
        return s
    s = _BARE.sub(f"{REDACTED}@", _USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED}@", s))
    return _QUERY.sub(lambda m: f"{m['key']}{REDACTED}", s) if "=" in s else s


def url(value: str) -> str:
    """A value given as a URL (with a scheme or not: the user may have left it out), shown with
    whatever stands before its host's '@' replaced, then as text()."""
    return text(_AUTHORITY.sub(lambda m: f"{m['scheme'] or ''}{REDACTED}@", value, count=1))


def tree(value):
    """A copy of plain data (dicts, lists, strings) with text() applied to every string, and the
    values under an `env` mapping whose names look secret (HF_TOKEN) replaced."""
    if isinstance(value, str):
        return text(value)
    if isinstance(value, dict):
        return {k: _env(v) if k == "env" else tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [tree(v) for v in value]
    return value


def _env(env):
    if not isinstance(env, dict):
        return tree(env)
    return {k: (REDACTED if isinstance(k, str) and SECRET_NAME.search(k) else tree(v)) for k, v in env.items()}
