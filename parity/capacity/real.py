"""The real engines' Probe: one probe is one engine's server held at one load (closed loop: C
clients, each sending its next request when its last one ends; open loop: requests at seeded
Poisson times) by parity.loadgen, its request records read by parity.capacity.probe.from_records.

A server starts once per block and engine: the search runs each engine's levels back to back
(Plan.arms "engine"), so a probe for another engine or block stops the server that is up (its
memory back, as the serving sweep waits) and starts the next (parity.engines.server.serving),
warmed up as the sweep warms it (parity.serving.sweep.warmup).  The bracket's probes share one
server per engine.

Prompts: the search draws each block's lengths (lengths(): prompt and output tokens uniform from
half to 1.5 times --ptok / --gen, seeded by the block); the k-th probe of a server run turns them
into token ids, a seeded nonce then filler (parity.workloads.prefill_curve.seeded_nonces,
drawn from the block's seed and k), so every engine of a block gets the same ids where the
engines share a tokenizer (each probe's prompt_digest says whether they did).  Closed loop: one
warm-up request per client first and one cool-down request per client last (not measured: they
hold the load while the measured ones run), warm-ups with 1 to 1.5 x --gen tokens so the clients
do not run in step.  Open loop: the warm-ups, the measured ones, the cool-downs at one seeded
schedule of the block."""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
import zlib
from contextlib import ExitStack

from parity.capacity.plan import CapacityPlan, longest
from parity.capacity.probe import CLOSED, PromptSet, Requests, from_records
from parity.context import Run
from parity.engines.server import died, serving
from parity.errors import UsageError
from parity.gpu.memory import used_mib, wait_back
from parity.loadgen import client as loadgen
from parity.loadgen.arrivals import achieved, open_loop_times
from parity.loadgen.prompts import filler_ids
from parity.metrics import validity
from parity.serving.point import check_fits, records_json, slot_context
from parity.serving.sweep import cpu_plan, warmup
from parity.telemetry import affinity, watch
from parity.workloads.prefill_curve import NONCE_WIDTH, seeded_nonces


def lengths(ptok: int, gen: int, seed: int = 0):
    """prompts(block, measured, warmup) -> PromptSet for the search: prompt and output lengths
    uniform from half to 1.5 times the means, seeded by (seed, block); the measured ones do not
    depend on how many warm-ups follow; warm-ups get 1 to 1.5 x gen tokens (the clients start out
    of step)."""

    def prompts(block: int, measured: int, warm: int) -> PromptSet:
        import numpy as np

        def draw(part: str, n: int, lo_gen: int):
            rng = np.random.default_rng([zlib.crc32(str(x).encode()) for x in (seed, "capacity", block, part)])
            return (rng.integers(-(-ptok // 2), longest(ptok) + 1, n), rng.integers(lo_gen, longest(gen) + 1, n))

        (pm, gm), (pw, gw) = draw("measured", measured, -(-gen // 2)), draw("warmup", warm, 1)
        return PromptSet(np.concatenate([pm, pw]), np.concatenate([gm, gw]), measured,
                         seed=zlib.crc32(f"{seed}/{block}".encode()))  # fmt: skip

    return prompts


class Server:
    """One engine's server up for one block (or the bracket)."""

    def __init__(self, engine: str, label: str):
        self.engine, self.label = engine, label
        self.stack = ExitStack()
        self.probes = 0  # probes run on it so far
        self.record: dict = {"engine": engine, "run": label}
        self.mem: tuple = (None, "none")  # used memory before it started (parity.gpu.memory.used_mib)
        self.la = self.pin = self.log = self.proc = self.target = self.limit = None
        self.filler: list[int] = []


class RealProbe:
    """probe(engine, load, block, prompts) -> Requests, on the plan's bound engines; close() stops
    the server that is up.  probes: every probe's summary; servers: every server run's."""

    def __init__(self, run: Run, plan: CapacityPlan):
        self.run, self.plan = run, plan
        self.up: Server | None = None
        self.probes: list[dict] = []
        self.servers: list[dict] = []

    # ------------------------------------------------------------------ servers
    def start(self, engine: str, label: str) -> Server:
        run, sp = self.run, self.plan.serving
        s, eng = sp.shape, sp.bound[engine]
        e = eng.section
        srv = Server(engine, label)
        la = eng.launch(sp.model_files[engine], s.port, s, model=sp.model, out=run.out)
        pin = cpu_plan(run.runner, s)
        la = affinity.wrap(la, pin)
        log = str(run.dir.file(f"servers/{engine}-{label}.log"))
        argv = {"argv": la.argv, "env": la.env, "unset": la.unset, "served_name": la.served_name, "affinity": pin}
        run.dir.write_json(f"servers/{engine}-{label}.json", argv)
        srv.mem = used_mib()
        srv.la, srv.pin, srv.log = la, pin, log
        try:
            up = serving(run, la, s.port, log, e.ready_timeout_s, e.ready_probe_timeout_s, e.stop_grace_s)
            srv.proc, ready = srv.stack.enter_context(up)
            srv.target = loadgen.Target(la.host, la.port, la.served_name, la.tokenize, count=la.count,
                                        extra=la.request_extra)  # fmt: skip
            srv.limit = slot_context(la) or sp.limits.get(engine)  # what a slot really gives a request
            warm = warmup(run, srv.target, s, engine, label, s.request_timeout_s, sp)
            srv.record.update(ready_s=round(ready, 2), log=log, warmup=warm)
            srv.filler = asyncio.run(filler_ids(srv.target, s.ptok))
        except BaseException:
            srv.stack.close()
            raise
        run.out.debug(f"{engine} {label}: server up in {ready:.1f} s")
        return srv

    def stop(self, settle: bool = True) -> None:
        srv, self.up = self.up, None
        if srv is None:
            return
        srv.stack.close()
        if settle:
            s = self.plan.serving.shape
            before, source = srv.mem
            srv.record["settle"] = wait_back(before, source, s.settle_s, s.settle_timeout_s, s.settle_tolerance_mib,
                                             f"{srv.engine} {srv.label}")  # fmt: skip
        srv.record["probes"] = srv.probes
        self.servers.append(srv.record)

    def close(self, settle: bool = True) -> None:
        self.stop(settle)

    # ------------------------------------------------------------------ one probe
    def __call__(self, engine: str, load: float, block: int, prompts: PromptSet) -> Requests:
        label = "bracket" if block < 0 else f"b{block}"
        if self.up is None or (self.up.engine, self.up.label) != (engine, label):
            self.stop()
            self.up = self.start(engine, label)
        srv, run, s = self.up, self.run, self.plan.serving.shape
        k = srv.probes
        srv.probes += 1
        closed = self.plan.search.kind == CLOSED
        warm = int(load) if closed else prompts.warmup
        name = f"{engine}-{label}-p{k}-{'c' if closed else 'r'}{load:g}"
        during = f"the probe at {load:g} ({label}, probe {k} on this server)"
        if (rc := srv.proc.poll()) is not None:  # it died after the last probe's requests ended
            raise died(engine, rc, srv.log, f"the wait before {during}")
        try:
            specs, digest = asyncio.run(self.specs(srv, prompts, block, k, warm, load, closed))
            what = self.plan.serving.limit_what.get(engine, "the engine")
            check_fits(specs, srv.limit, f"{engine} {label} at {load:g}", what)
            t0 = time.perf_counter()
            with watch.point(run.runner, s.telemetry, srv.proc.pid, srv.pin) as tel:  # energy per token where NVML has it
                recs = loadgen.drive(srv.target, specs, s.request_timeout_s, concurrency=int(load) if closed else None,
                                     open_loop=not closed)  # fmt: skip
        except UsageError:  # the probe's own shape (check_fits): nothing to wait for
            raise
        except Exception:  # a refused connection is the client's view of a server that is going away
            if (rc := exit_code(srv.proc, DYING_S)) is not None:
                raise died(engine, rc, srv.log, during) from None
            raise
        wall = time.perf_counter() - t0
        if (rc := srv.proc.poll()) is not None:
            raise died(engine, rc, srv.log, during)
        for r in recs:
            validity.check_request(r)
        row: dict = {}
        flags = tel.finish(run.dir, row, recs, srv.la.family, None, None, f"telemetry/{name}.json")
        run.dir.write_json(f"requests/{name}.json", records_json(recs))
        got = from_records(recs, warm, warm, sent=len(recs), seconds=wall)
        got.problems += flags
        self.probes.append(summary(engine, block, load, k, got, recs, warm, digest, row, f"requests/{name}.json"))
        if not closed:  # what the load generator really sent (a late one is its own limit, not the engine's)
            self.probes[-1]["sent_as"] = achieved(recs)
        return got

    async def specs(self, srv: Server, ps: PromptSet, block: int, k: int, warm: int, load: float, closed: bool):
        """The probe's requests in sending order (warm-ups, measured, cool-downs) and the digest of
        the measured ones' token ids."""
        n, t = ps.measured, srv.target
        seen: set = set()
        measured = await seeded_nonces(t, n, ps.seed, block, seen, f" capacity probe {k}")
        extra = await seeded_nonces(t, 2 * warm, ps.seed, block, seen, f" capacity probe {k} warm")
        p, g = ps.prompt_tokens.tolist(), ps.gen_tokens.tolist()

        def spec(nonce, i):
            ids = (nonce[:NONCE_WIDTH] + srv.filler)[: p[i]]
            return loadgen.RequestSpec(ids, int(g[i]), prompt_tokens=len(ids))

        body = [spec(measured[i], i) for i in range(n)]
        around = [spec(extra[j], n + j % ps.warmup) for j in range(2 * warm)]
        for x in around[warm:]:  # a cool-down outlasts the measured request its client would have sent next
            x.gen = max(g)
        out = around[:warm] + body + around[warm:]
        if not closed:
            seed = zlib.crc32(f"{ps.seed}/{block}/{k}".encode())
            for sp, at in zip(out, open_loop_times(len(out), load, 1.0, seed)):
                sp.at = at
        digest = hashlib.sha256(repr([(x.prompt, x.gen) for x in body]).encode()).hexdigest()[:16]
        return out, digest


DYING_S = 10.0  # how long a server whose connection failed may take to exit before it counts as alive


def exit_code(proc, wait_s: float) -> int | None:
    """The server's exit code if it exits within wait_s, else None (still running, or not ours)."""
    if proc.pid is None:  # an endpoint parity did not start (engines.server.External): never waited on
        return proc.poll()
    end = time.monotonic() + wait_s
    while (rc := proc.poll()) is None and time.monotonic() < end:
        time.sleep(0.1)
    return rc


def summary(engine: str, block: int, load: float, k: int, got: Requests, recs, warm: int, digest: str, row: dict,
            path: str) -> dict:
    """One probe as capacity.json keeps it: its requests, the percentiles the objectives read,
    throughput, energy per token (None with the reason where there is no counter), problems."""
    import numpy as np

    def pct(v, q):
        return round(float(np.percentile(v, q)), 3) if len(v) else None

    return {
        "engine": engine, "block": block, "load": load, "probe": k, "prompt_digest": digest,
        "sent": len(recs), "warmup": warm, "cooldown": warm, "measured": len(recs) - 2 * warm,
        "invalid": sum(not r.valid for r in recs),
        "window_s": round(got.window_s, 4), "seconds": round(got.seconds, 3),
        "output_tokens": got.output_tokens, "throughput_tps": round(got.throughput_tps, 3) if got.window_s else None,
        "user_tps": round(got.user_tps, 3) if math.isfinite(got.user_tps) else None,
        **{f"{q}_p{x}_ms": pct(getattr(got, f"{q}_ms"), x) for q in ("ttft", "itl", "tpot", "e2e")
           for x in (50, 90, 99)},
        "j_per_output_tok": row.get("j_per_output_tok"), "j_per_total_tok": row.get("j_per_total_tok"),
        "energy_why": (row.get("why") or {}).get("j_per_output_tok"),
        "requests_file": path, "problems": list(got.problems),
    }  # fmt: skip
