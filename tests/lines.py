"""An output (parity.ui's info / warn / table) that keeps the lines a renderer printed, for the
tests that read what a command says."""

from __future__ import annotations


class Lines:
    def __init__(self):
        self.lines = []

    def info(self, msg):
        self.lines.append(msg)

    warn = info

    def table(self, *a):
        pass
