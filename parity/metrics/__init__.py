"""The metric registry: serving and workload metrics, validity, output parity, the servers' /metrics."""
