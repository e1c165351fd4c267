"""The HTTP endpoints: one module per route group, and what their answers share (SSE, JSON, usage, logprobs)."""
