"""The TTFT anatomy against a real llama-server (the smoke `stock` build, tiny model, CPU):
a snapshot's rows carry each point's parts and they add up to the measured TTFT; a delay planted
in front of the server is named as the part that holds it in 10 of 10 points; `parity ab
--server-arg` measures a server setting as a gated lever and keys the map by the argument."""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import run_parity
from parity.engines.llama import TRACE_LOG
from parity.loadgen import client as loadgen
from parity.loadgen.prompts import prompts
from parity.metrics import validity
from parity.ttft import llama_log, split
from ports import free_port

DELAY_S = 0.2  # well past the tiny model's prompt compute even on a loaded 2-core box


@pytest.fixture(scope="module")
def stock_bin(smoke_profile) -> Path:
    from parity.llamacpp.build import ensure_built
    from parity.engines.bound import bind
    from parity.runners.local import LocalRunner
    from parity.ui import Output

    return Path(ensure_built(bind(smoke_profile, "stock"), LocalRunner(), Output(json_mode=True)).bin_dir)


@pytest.fixture(scope="module")
def server(stock_bin, tiny_model, tmp_path_factory):
    """A real llama-server with parity's trace log flags; (port, log path)."""
    port, log = free_port(), tmp_path_factory.mktemp("srv") / "server.log"
    argv = [str(stock_bin / "llama-server"), "-m", str(tiny_model), "-c", "1024", "--parallel", "4", *TRACE_LOG, "-t", "1",
            "--host", "127.0.0.1", "--port", str(port), "--no-webui", "--metrics"]  # fmt: skip
    with open(log, "wb") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while "listening on" not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")[-2000:]
            time.sleep(0.1)
        yield port, str(log)
    finally:
        proc.terminate()
        proc.wait(10)


class DelayProxy:
    """A TCP proxy that holds each HTTP request DELAY_S before passing it on: a delay before the
    server's clock starts, which no server timing covers."""

    def __init__(self, target: int, delay_s: float):
        self.target, self.delay_s, self.port = target, delay_s, None
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        ready.wait(10)

    def _run(self, ready):
        asyncio.set_event_loop(self.loop)
        srv = self.loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", 0))
        self.port = srv.sockets[0].getsockname()[1]
        ready.set()
        self.loop.run_forever()

    async def _client(self, reader, writer):
        up_r, up_w = await asyncio.open_connection("127.0.0.1", self.target)

        async def pipe(src, dst, delay):
            try:
                while data := await src.read(65536):
                    if delay and data.startswith(b"POST "):
                        await asyncio.sleep(delay)
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_w, self.delay_s), pipe(up_r, writer, 0))

    def close(self):
        # end the connections' pipes while the loop still runs: a pipe left pending is finalized after the loop
        # closes and warns (PytestUnraisableExceptionWarning: Event loop is closed) in whichever test runs next
        async def cancel_pipes():
            pipes = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in pipes:
                t.cancel()
            await asyncio.gather(*pipes, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(cancel_pipes(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


def point(port: int, log: str, rounds: int = 8):
    """One N=1 point as the sweep runs it: rounds of one request, then its anatomy from the records and the log."""
    t = loadgen.Target("127.0.0.1", port, "tiny", "content", count="timings", extra={"timings_per_token": True})
    specs = asyncio.run(prompts(t, "tokens", rounds, 32, 8))
    offset = llama_log.size(log)
    recs = [r for s in specs for r in loadgen.drive(t, [s], 60)]
    for r in recs:
        validity.check_request(r)
    assert all(r.valid for r in recs), [validity.reason(r) for r in recs]
    return split.of_point(recs, log, offset, None, None, None), recs


def test_parts_add_up_to_the_ttft_and_fit_inside_it(server):
    port, log = server
    point(port, log, 2)  # the fresh server's first requests are its slowest
    a, recs = point(port, log)
    assert a["source"] == "llama-server timings of 8 requests, its log for 8"
    parts = a["parts"]
    named = sum(parts[p]["mean"] for p in ("connect", "host", "queue", "prompt"))
    assert named + parts["remainder"]["mean"] == pytest.approx(a["ttft"]["mean"], abs=0.01)
    assert parts["remainder"]["mean"] >= 0 and min(parts[p]["mean"] for p in parts) >= 0
    assert a["detail"]["cache_update"]["mean"] > 0  # the prompt cache is on (--cache-ram 8192): its own "took" lines


def test_a_delay_before_the_server_is_named_in_10_of_10_points(server):
    port, log = server
    direct, _ = point(port, log)
    assert direct["parts"]["remainder"]["mean"] < DELAY_S * 1000 / 2
    proxy = DelayProxy(port, DELAY_S)
    try:
        named = []
        for _ in range(10):
            a, _ = point(proxy.port, log)
            named.append((a["held_by"], a["parts"]["remainder"]["mean"]))
        print(f"\nplanted {DELAY_S * 1000:g} ms before the server: held by, remainder mean ms: {named}; direct: {direct['parts']['remainder']['mean']} ms")
        assert [h for h, _ in named] == ["remainder"] * 10, named
        assert all(ms >= DELAY_S * 1000 for _, ms in named), named
    finally:
        proxy.close()


def test_snapshot_rows_carry_the_anatomy_and_rounds(parity_cli, tmp_path):
    port = free_port()
    prof = tmp_path / "profile.yaml"
    prof.write_text("extends: smoke\n"
                    f"lock: {{dir: {tmp_path}/lock, poll_s: 0.5, timeout_s: 60}}\n"
                    f"serving: {{port: {port}, npl: [1, 4], ptok: 32, gen: 16, parallel: 4, ctx: 1024, model: tiny, min_window_s: 0,"
                    " warmup: {requests: 2, gen: 4}, settle_s: 0, repeat: 1, output_parity: {enabled: false}}\n")  # fmt: skip
    r = parity_cli("--artifacts", str(tmp_path / "runs"), "snapshot", "--profile", str(prof), "--engines", "stock", "--no-gates", "--json", timeout=600)
    assert r.returncode in (0, 6), r.stderr[-3000:]
    doc = json.loads(r.stdout)
    rows = {x["n"]: x for x in doc["rows"]}
    assert (rows[1]["rounds"], rows[1]["requests"], rows[4]["rounds"], rows[4]["requests"]) == (8, 8, 2, 8)
    for x in rows.values():
        assert x["point_warmup"] == {"requests": 1, "gen": 4}  # paid before the point's counters and log offset are read
        a = x["ttft_anatomy"]
        assert a["source"] == "llama-server timings of 8 requests, its log for 8"
        assert sum(a["parts"][p]["mean"] for p in a["parts"]) == pytest.approx(x["ttft_mean_ms"], abs=0.01)
    summary = json.loads((Path(doc["run_dir"]) / "summary.json").read_text())
    assert [(p["engine"], p["n"]) for p in summary["ttft"]["points"]] == [("stock", 1), ("stock", 4)]
    assert summary["shape"]["min_requests"] == 8
    rep = parity_cli("--artifacts", str(tmp_path / "runs"), "report", doc["run_dir"], "--profile", str(prof), "--out-dir", str(tmp_path / "reports"), "--no-plots", "--json")
    assert rep.returncode == 0, rep.stderr[-2000:]
    text = Path(json.loads(rep.stdout)["report"]).read_text()
    assert "## TTFT anatomy" in text and "| stock | 1 |" in text
