"""Operability: per-request records, Prometheus metrics, the JSON access log."""
