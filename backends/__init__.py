"""Inference backends: the bundled torch worker and clients for external servers."""
