"""Local JSON pointers (`#`, `#/$defs/Name`, `#/properties/a~1b/items/0`) into a tool's parameter schema."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def resolve_pointer(root: Any, pointer: str) -> Any:
    """The node a local pointer names inside `root`, or None (a remote pointer, or one that names nothing)."""
    if pointer in ("#", "#/"):
        return root
    if not pointer.startswith("#/"):
        return None
    try:
        return value_at(root, [segment.replace("~1", "/").replace("~0", "~") for segment in pointer[2:].split("/")])
    except LookupError:
        return None


def value_at(root: Any, tokens: Iterable[str]) -> Any:
    """The value a pointer's unescaped `tokens` name inside `root`; LookupError where one names nothing."""
    node = root
    for token in tokens:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            raise LookupError(token)
    return node
