"""Local JSON pointers (`#`, `#/$defs/Name`, `#/properties/a~1b/items/0`) into a tool's parameter schema."""

from __future__ import annotations

from typing import Any


def resolve_pointer(root: Any, pointer: str) -> Any:
    """The node a local pointer names inside `root`, or None (a remote pointer, or one that names nothing)."""
    if pointer in ("#", "#/"):
        return root
    if not pointer.startswith("#/"):
        return None
    node = root
    for segment in pointer[2:].split("/"):
        key = segment.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return None
    return node
