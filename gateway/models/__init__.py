"""Served models: the registry by id, and the plan a request needs before it reaches a backend."""
