"""Grammars the families share: compact JSON and response_format schemas, and what each backend's xgrammar knows."""
