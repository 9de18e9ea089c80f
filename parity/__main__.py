"""`python -m parity` and the `parity` console script (pyproject: parity.__main__:main)."""

import gc

# The CLI's import makes ~10k objects that live as long as the process: the collector would scan them
# ~25 times while they load and again in each later full collection (the one at exit too), several ms
# of every start for nothing.  Import without it, then keep those objects out of its scans.
gc.disable()
from parity.cli import entry  # noqa: E402

gc.freeze()
gc.enable()
main = entry

if __name__ == "__main__":
    entry()
