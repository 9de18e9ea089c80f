"""How pin-*.log and pin-*.json beside it were captured (README.md): parity's own load generator
against the users' pin llama-server started with parity's trace log flags; N=1 x 8 rounds, then
N=4 x 2 rounds, as a snapshot point runs them.  Not part of parity; run as
`python capture_pin.py PORT LOG_PATH OUT_PREFIX` against a server on PORT that logs to LOG_PATH."""

import asyncio
import json
import shutil
import sys

from parity.loadgen import client as loadgen
from parity.loadgen.prompts import prompts
from parity.metrics import validity
from parity.serving.point import records_json

port, log, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
t = loadgen.Target("127.0.0.1", port, "tiny", "content", count="timings", extra={"timings_per_token": True})
for n, rounds in ((1, 8), (4, 2)):
    specs = asyncio.run(prompts(t, "tokens", n * rounds, 32, 16))
    recs = [r for k in range(rounds) for r in loadgen.drive(t, specs[k * n:(k + 1) * n], 60)]
    for r in recs:
        validity.check_request(r)
    with open(f"{out}-n{n}.json", "w") as f:
        json.dump(records_json(recs), f, indent=1)
shutil.copy(log, f"{out}.log")
