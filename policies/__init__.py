"""Tenant policies: who may call, which models and tools, and the limits and fair queues that govern them."""
