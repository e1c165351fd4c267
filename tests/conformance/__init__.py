"""canitoolcall conformance: one adapter per fixture family, the per-family table and its test."""
