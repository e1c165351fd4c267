"""Which structural-tag features each backend's xgrammar knows.

Backends pin xgrammar (SGLang 0.5.23: 0.2.7; vLLM 0.33: 0.2.8) and every version silently ignores
fields it does not know, so a grammar using a newer field loses that constraint without an error.
The families build only what the oldest pinned version accepts; `newer_features` finds anything
that would not survive there (measured from xgrammar's own format models: 0.2.7 and 0.2.8 share
one set, 0.2.9 added the fields below).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from backends.base import Grammar

OLDEST_PINNED = "0.2.7"
_ADDED_IN_029: dict[tuple[str, str], str] = {
    ("grammar", "syntax"): "lark grammars",
    ("json_schema", "excludes"): "json_schema excludes",
}
_STYLES_ADDED_IN_029 = frozenset({"gemma"})


def newer_features(grammar: Grammar | None, version: str = OLDEST_PINNED) -> list[str]:
    """Features of `grammar` that xgrammar `version` (0.2.7 or 0.2.8) would silently ignore."""
    if grammar is None or grammar.kind != "structural_tag" or _parts(version) >= (0, 2, 9):
        return []
    found: list[str] = []
    for node in _formats(json.loads(grammar.text)):
        kind = node.get("type")
        found += [what for (t, key), what in _ADDED_IN_029.items() if t == kind and key in node]
        if kind == "json_schema" and node.get("style") in _STYLES_ADDED_IN_029:
            found.append(f"json_schema style {node['style']}")
    return found


def _parts(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def _formats(value: Any) -> Iterator[dict[str, Any]]:
    """Every format object in a structural tag (schemas inside json_schema formats are not formats)."""
    if isinstance(value, dict):
        if "type" in value:
            yield value
        for key, child in value.items():
            if key != "json_schema":
                yield from _formats(child)
    elif isinstance(value, list):
        for child in value:
            yield from _formats(child)
