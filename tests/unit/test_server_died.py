"""A server that dies is named by its log's last line with text (parity.engines.server.died),
read on a real llama-server log that ended in a CUDA abort (tests/data/servers/README.md)."""

from __future__ import annotations

from pathlib import Path

from parity.engines.server import died, last_words, log_tail

LOG = Path(__file__).parents[1] / "data" / "servers" / "llama-server-cuda-abort-h200.log"


def test_the_abort_line_is_the_last_with_text():
    assert log_tail(str(LOG), 1).strip() == "0.17.578.263 E"  # what the message used to quote
    assert last_words(log_tail(str(LOG), 20)).endswith("ggml-cuda/ggml-cuda.cu:104: CUDA error")


def test_the_error_names_engine_exit_probe_and_the_abort():
    e = died("stock", -6, str(LOG), "the wait before the probe at 64 (bracket, probe 4 on this server)")
    msg = str(e)
    assert msg.startswith("stock server exited on signal 6 (SIGABRT) during the wait before the probe at 64")
    assert msg.endswith("(last line: /tmp/p/cache/builds/afbba68ebea06533c881/src/ggml/src/ggml-cuda/ggml-cuda.cu:104: CUDA error)")


def test_a_log_of_prefixes_only_or_none_is_empty():
    assert last_words("0.00.000.001 I \n0.00.000.002 E ") == ""
    assert "(last line: empty)" in str(died("stock", 1, None, "x"))


def test_an_endpoint_parity_did_not_start_is_not_waited_on_to_exit():
    from parity.capacity.real import DYING_S, exit_code
    from parity.engines.server import External

    class Counted(External):
        polls = 0

        def poll(self):
            self.polls += 1
            return super().poll()

    ep = Counted()
    assert exit_code(ep, DYING_S) is None and ep.polls == 1  # its process is not ours: it never 'exits', asked once
