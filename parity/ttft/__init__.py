"""TTFT anatomy: where each request's time to first token went (parts.py names the parts, llama_log.py
reads llama-server's timestamped log, split.py splits one request or a point, summary.py pairs the
parts across engines and names what keeps a TTFT interval wide)."""
