"""Command runners (local, ssh) behind one protocol; see base.Runner."""

from __future__ import annotations
