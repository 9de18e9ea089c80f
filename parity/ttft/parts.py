"""The parts a time to first token is split into, each declared once with where it comes from.
Every part is a span of one request; together with the remainder they add up to its TTFT."""

from __future__ import annotations

PARTS: dict[str, str] = {
    "connect": "client: the TCP connect this request waited for (0 on a kept-alive connection)",
    "host": "server host work before prompt compute: llama-server's log from the task's slot search to the last "
            "line of its launch (prompt cache save/restore, idle slots saved to it); vLLM: its TTFT histogram "
            "less queue and prefill (frontend, scheduling)",
    "queue": "admission wait: llama-server's log from the launch's last line to its 'new prompt' line (the main "
             "loop busy with other tasks or a decode step); vLLM: vllm:request_queue_time_seconds",
    "prompt": "prompt compute up to the first sampled token: llama-server timings.prompt_ms; vLLM: "
              "vllm:request_prefill_time_seconds",
    "remainder": "TTFT less every part above, on no server clock: request upload, HTTP parsing, tokenization before "
                 "the task exists, the wait before the server picks the task, first-token emit and delivery",
}
DETAIL: dict[str, str] = {
    "cache_update": "of host: llama-server's own 'prompt cache update took X ms' (the selected slot's state saved, "
                    "a better one restored)",
    "idle_save": "of host: llama-server saving its idle slots to the prompt cache after the launch (first to last "
                 "such log line)",
    "sampler_init": "of host: llama-server's own 'init sampler, took X ms' when it is logged before the launch",
}
CLIENT: dict[str, str] = {
    "first_byte": "client: send -> the response's first bytes (its head)",
}
OUTSIDE = [p for p in PARTS if p != "prompt"]  # what a TTFT flag can be held by
FLAG_SHARE = 0.5  # a point whose TTFT is more than this share outside prompt compute is flagged


def definitions() -> list[dict]:
    return [{"name": k, "unit": "ms", "formula": v} for k, v in {**PARTS, **DETAIL, **CLIENT}.items()]
