"""A schema's `$defs` / `definitions` entries that no value can meet, left out before its grammar is built and its
strict keywords are checked.

xgrammar converts only the definitions a `$ref` reaches (an unused one is no rule of the grammar), yet the fold
(all_of.py), the required names (required.py), the pattern narrowing (safe_json.py) and the strict check
(unenforced.py) walked every entry: `{"$defs": {"Unused": {"minimum": 3}}}` was a 400 under strict for a keyword no
value ever meets. An entry is used where a local JSON-pointer `$ref` (`#/$defs/A`, `#/$defs/A/properties/b`) in
the schema outside the definitions, or in a used entry, passes through it; anything else is kept: nothing is left
out of a schema with a reference that is no such pointer (`#anchor`, a remote one, a percent-encoded name,
`$dynamicRef`, `$recursiveRef`) or an `$id` below its root.
"""

from __future__ import annotations

from typing import Any

from gateway.families.json_pointer import value_at
from gateway.grammars.json import SUBSCHEMA_KEYS, SUBSCHEMA_MAPS

_DEFINITIONS = ("$defs", "definitions")
_OTHER_REFERENCES = frozenset({"$dynamicRef", "$recursiveRef", "$id"})
_Path = tuple[str, ...]


class _Unsure(Exception):
    """A reference (or base URI) this module does not follow: every entry is kept."""


def used_definitions(schema: Any) -> Any:
    """`schema` without the definition entries no local `$ref` reaches; the very same object where every entry is
    used (or some reference is not followed)."""
    if not isinstance(schema, dict):
        return schema
    entries: set[_Path] = set()
    try:
        used = _used(schema, entries)
    except _Unsure:
        return schema
    return schema if entries <= used else _pruned(schema, (), used)


def _used(root: dict[str, Any], entries: set[_Path]) -> set[_Path]:
    """The paths of the definition entries reached from `root` (its own `$id` aside) through references; `entries`
    gets those of every entry met on the way (the reached ones' own definitions too)."""
    used: set[_Path] = set()
    refs: list[str] = []
    _references(root, (), refs, entries, top=True)
    while refs:
        tokens = _pointer(refs.pop())
        for j in range(len(tokens)):
            if tokens[j] not in _DEFINITIONS:
                continue
            if j + 1 == len(tokens):
                raise _Unsure  # a reference to a whole definitions map
            entry = tokens[: j + 2]
            if entry not in used:
                used.add(entry)
                _references(_at(root, entry), entry, refs, entries)
    return used


def _references(node: Any, path: _Path, refs: list[str], entries: set[_Path], top: bool = False) -> None:
    """Each `$ref` in the schema `node` (at `path`) added to `refs`, but those inside the definitions maps of its
    schema objects, whose entries go to `entries` (a value at no schema position is read whole, any `$ref` in it
    taken as one)."""
    stack: list[tuple[Any, _Path | None, bool]] = [(node, path, top)]  # path None: no schema position
    while stack:
        item, at, at_top = stack.pop()
        if isinstance(item, list):
            stack.extend(
                (v, None if at is None else (*at, str(i)), False)
                for i, v in enumerate(item)
                if isinstance(v, (dict, list))
            )
            continue
        if not isinstance(item, dict):
            continue
        for key, value in item.items():
            if key == "$ref":
                if not isinstance(value, str):
                    raise _Unsure
                refs.append(value)
            elif key in _OTHER_REFERENCES and not (at_top and key == "$id"):
                raise _Unsure
            elif not isinstance(value, (dict, list)):
                continue
            elif at is not None and key in _DEFINITIONS and isinstance(value, dict):
                entries.update((*at, key, name) for name in value)  # reached only through a reference
            elif at is not None and key in SUBSCHEMA_MAPS and isinstance(value, dict):
                stack.extend((v, (*at, key, name), False) for name, v in value.items())
            else:
                stack.append((value, (*at, key) if at is not None and key in SUBSCHEMA_KEYS else None, False))


def _pointer(ref: str) -> _Path:
    """A local JSON-pointer reference's tokens (`#` none); _Unsure for any other reference."""
    if ref == "#":
        return ()
    if not ref.startswith("#/") or "%" in ref:
        raise _Unsure
    return tuple(t.replace("~1", "/").replace("~0", "~") for t in ref[2:].split("/"))


def _at(root: Any, path: _Path) -> Any:
    """The value at `path` in `root`; _Unsure where there is none (a reference xgrammar does not resolve)."""
    try:
        return value_at(root, path)
    except LookupError:
        raise _Unsure from None


def _pruned(node: Any, path: _Path, used: set[_Path]) -> Any:
    """`node` (at a schema position, at `path`) with its unused definition entries left out, at any depth; the
    very same objects where nothing is."""
    if isinstance(node, list):
        items = [_pruned(v, (*path, str(i)), used) for i, v in enumerate(node)]
        return node if all(a is b for a, b in zip(items, node, strict=True)) else items
    if not isinstance(node, dict):
        return node
    out = node
    for key, value in node.items():
        if key in _DEFINITIONS and isinstance(value, dict):
            kept = {k: _pruned(v, (*path, key, k), used) for k, v in value.items() if (*path, key, k) in used}
            new = value if len(kept) == len(value) and all(kept[k] is value[k] for k in kept) else kept
        elif key in SUBSCHEMA_KEYS and isinstance(value, (dict, list)):
            new = _pruned(value, (*path, key), used)
        elif key in SUBSCHEMA_MAPS and isinstance(value, dict):
            mapped = {k: _pruned(v, (*path, key, k), used) for k, v in value.items()}
            new = value if all(mapped[k] is value[k] for k in value) else mapped
        else:
            continue
        if new is not value:
            out = {**out, key: new}
    return out
