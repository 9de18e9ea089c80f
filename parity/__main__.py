from parity.cli import _entry

_entry()
