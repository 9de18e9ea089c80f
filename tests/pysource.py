"""ast.parse for the tests that read parity's own source.

CPython 3.11 keeps the AST constructor's recursion depth in state its threads share: a switch
to another thread inside the constructor can make ast.parse of a file that parses raise
SystemError "AST constructor recursion depth mismatch" (python/cpython#106905; seen once in CI,
2026-11-29, on the unchanged parity/profile/nsys.py while another test's threads ran in that
worker).  Such a SystemError is parsed again; a real syntax error is a SyntaxError, never this."""

from __future__ import annotations

import ast

TRIES = 3


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    for attempt in range(TRIES):
        try:
            return ast.parse(source, filename)
        except SystemError as e:
            if "recursion depth mismatch" not in str(e) or attempt == TRIES - 1:
                raise
    raise AssertionError("unreachable")
