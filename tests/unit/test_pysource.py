"""tests/pysource.parse: CPython 3.11's spurious AST SystemError is parsed again, nothing else is."""

from __future__ import annotations

import ast

import pytest

import pysource


def flaky(times: int, error: Exception):
    calls = []

    def parse(source, filename="<unknown>"):
        calls.append(source)
        if len(calls) <= times:
            raise error
        return ast.Module(body=[], type_ignores=[])

    return parse, calls


def test_the_recursion_depth_mismatch_is_parsed_again(monkeypatch):
    fake, calls = flaky(2, SystemError("AST constructor recursion depth mismatch (before=12, after=9)"))
    monkeypatch.setattr(pysource.ast, "parse", fake)
    assert isinstance(pysource.parse("x = 1"), ast.Module) and len(calls) == 3


@pytest.mark.parametrize("times, error", [(3, SystemError("AST constructor recursion depth mismatch")),
                                          (1, SystemError("something else")), (1, SyntaxError("bad"))])
def test_anything_else_or_a_third_mismatch_is_raised(monkeypatch, times, error):
    fake, calls = flaky(times, error)
    monkeypatch.setattr(pysource.ast, "parse", fake)
    with pytest.raises(type(error)):
        pysource.parse("x = 1")
    assert len(calls) == min(times, pysource.TRIES)
