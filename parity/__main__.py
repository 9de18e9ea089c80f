from parity.cli import entry

entry()
