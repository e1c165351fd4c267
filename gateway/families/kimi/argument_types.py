"""XTML argument types from a JSON schema: which `type=` attributes an argument may carry, and each value's schema.

K3 writes `type="string"` with a raw body and every other type as JSON, with
integers as `type="number"`. Local `$ref`s (`#`, `#/$defs/…`,
`#/definitions/…`, JSON-pointer escapes) are followed with a visited set, so
recursive definitions end; `anyOf` / `oneOf` / `type: [...]` give one
alternative per XTML type, `allOf` merges its branches, `enum` / `const` give
literals. A schema that names no type, holds a pointer that does not
resolve inside the argument's own document, or whose references fan out past
MAX_STEPS, is ambiguous: None.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gateway.families.json_pointer import resolve_pointer
from gateway.grammars.all_of import SIBLING_ASSERTIONS, UNIONS, admitted_values, folded_branch

XTML_TYPE = {
    "string": "string",
    "integer": "number",
    "number": "number",
    "boolean": "boolean",
    "null": "null",
    "array": "array",
    "object": "object",
}
MAX_STEPS = 20_000
"""Schemas one tool's arguments may look into (each `$ref` followed, `allOf` / `anyOf` branch): references used
twice a level fan out (20 levels: 2^20 paths); past it the arguments are ambiguous (free)."""
_REF_KEYS = ("$ref", "$dynamicRef", "$recursiveRef")
_DEF_BLOCKS = ("$defs", "definitions")


@dataclass(frozen=True)
class Alternative:
    """One way an argument can be written: its `type=` attribute and the value's JSON schema (or literals)."""

    xtml_type: str
    schema: dict[str, Any] | None = None
    literals: tuple[Any, ...] | None = None


class _FansOut(Exception):
    """Looking into the schema took more than MAX_STEPS steps."""


class SchemaDocument:
    """A tool's parameter schema, against which local pointers resolve."""

    def __init__(self, root: dict[str, Any]):
        self.root = root
        self._steps = 0

    def resolve(self, pointer: str) -> Any:
        """The node a local pointer names, or None."""
        return resolve_pointer(self.root, pointer)

    def refs_resolve(self, schema: Any, nested: bool = False) -> bool:
        """Whether every local pointer inside `schema` names something.

        A nested pointer to the root would name the argument's own schema once it is compiled alone, so it
        counts as unresolvable; at the top, the argument's value schema becomes the root itself.
        """
        if isinstance(schema, list):
            return all(self.refs_resolve(item, True) for item in schema)
        if not isinstance(schema, dict):
            return True
        for key in _REF_KEYS:
            pointer = schema.get(key)
            local = isinstance(pointer, str) and pointer.startswith("#")
            if local and ((nested and pointer in ("#", "#/")) or self.resolve(pointer) is None):
                return False
        return all(self.refs_resolve(value, True) for value in schema.values())

    def standalone(self, schema: dict[str, Any]) -> dict[str, Any]:
        """`schema` with the root's definition blocks merged in, so its pointers resolve when compiled alone."""
        if not _has_local_ref(schema):
            return schema
        out = dict(schema)
        for block in _DEF_BLOCKS:
            root_block = self.root.get(block)
            if isinstance(root_block, dict):
                own = out.get(block)
                out[block] = {**root_block, **own} if isinstance(own, dict) else root_block
        return out

    def alternatives(self, schema: Any) -> list[Alternative] | None:
        """The XTML alternatives of an argument schema, or None when it is ambiguous."""
        if schema is True or schema == {}:
            return None
        if not isinstance(schema, dict) or not self.refs_resolve(schema):
            return None
        try:
            found = self._alternatives(schema, frozenset())
        except _FansOut:
            return None
        if not found:
            return None
        return _grouped(found)

    def _alternatives(self, schema: dict[str, Any], seen: frozenset[str]) -> list[Alternative]:
        merged = self._merged(schema, seen)
        if merged is None:
            return []
        schema, seen = merged
        if "const" in schema or (isinstance(schema.get("enum"), list) and schema["enum"]):
            listed = [schema["const"]] if "const" in schema else schema["enum"]
            return [_literal(v) for v in admitted_values(schema) or listed]  # as the JSON grammars keep them
        for key in UNIONS:
            branches = schema.get(key)
            if isinstance(branches, list) and branches:
                beside = {k: v for k, v in schema.items() if k in SIBLING_ASSERTIONS and k != key}
                # each branch looked into once: twice made nested anyOf cost 2^depth
                each = [self._branch_alternatives(b, beside, seen) for b in branches]
                kept = [found for found in each if found is not None]
                return [alt for found in kept for alt in found] if kept and all(kept) else []
        kinds = schema.get("type")
        kinds = [kinds] if isinstance(kinds, str) else kinds
        if not isinstance(kinds, list) or not all(k in XTML_TYPE for k in kinds):
            return []
        base = {k: v for k, v in schema.items() if k not in ("type", "anyOf", "oneOf", "allOf", *_REF_KEYS)}
        return [Alternative(XTML_TYPE[k], {**base, "type": k}) for k in kinds]

    def _branch_alternatives(
        self, branch: Any, beside: dict[str, Any], seen: frozenset[str]
    ) -> list[Alternative] | None:
        """A union branch's alternatives, the assertions `beside` the union folded into it (`all_of.folded_branch`,
        as the JSON grammars fold them); None where it then admits no value (disjoint types, listed values its
        keywords all refuse). A branch that does not fold exactly is read alone: unenforced.py refuses that keyword
        under strict before any grammar."""
        if not isinstance(branch, dict):
            return []
        if not beside:
            return None if admitted_values(branch) == [] else self._alternatives(branch, seen)
        merged = self._merged(branch, seen)
        if merged is None:
            return []
        folded = folded_branch(beside, merged[0], "")
        one = merged[0] if folded is None else folded
        if folded is False or admitted_values(one) == []:
            return None
        return self._alternatives(one, merged[1])

    def _merged(self, schema: dict[str, Any], seen: frozenset[str]) -> tuple[dict[str, Any], frozenset[str]] | None:
        """`schema` with its `$ref` target and `allOf` branches folded in (its own keywords win)."""
        self._steps += 1
        if self._steps > MAX_STEPS:
            raise _FansOut
        pointer = next((schema[k] for k in _REF_KEYS if isinstance(schema.get(k), str)), None)
        if pointer is not None:
            if pointer in seen:
                return None
            target = self.resolve(pointer)
            if not isinstance(target, dict):
                return None
            inner = self._merged(target, seen | {pointer})
            if inner is None:
                return None
            own = {k: v for k, v in schema.items() if k not in _REF_KEYS}
            schema, seen = {**inner[0], **own}, inner[1]
        branches = schema.get("allOf")
        if isinstance(branches, list):
            folded: dict[str, Any] = {}
            for branch in branches:
                inner = self._merged(branch, seen) if isinstance(branch, dict) else None
                if inner is None:
                    return None
                folded.update(inner[0])
            schema = {**folded, **{k: v for k, v in schema.items() if k != "allOf"}}
        return schema, seen


def _literal(value: Any) -> Alternative:
    if isinstance(value, bool):
        kind = "boolean"
    elif value is None:
        kind = "null"
    elif isinstance(value, (int, float)):
        kind = "number"
    elif isinstance(value, str):
        kind = "string"
    else:
        kind = "object" if isinstance(value, dict) else "array"
    return Alternative(kind, literals=(value,))


def _grouped(found: list[Alternative]) -> list[Alternative]:
    """One alternative per XTML type: literals joined, schemas joined under one flat `anyOf` (one `anyOf` per
    alternative nested as deep as the alternatives are many)."""
    by_type: dict[str, list[Alternative]] = {}
    for alt in found:
        by_type.setdefault(alt.xtml_type, []).append(alt)
    return [alts[0] if len(alts) == 1 else _joined(kind, alts) for kind, alts in by_type.items()]


def _joined(xtml_type: str, alts: list[Alternative]) -> Alternative:
    literals = tuple(v for a in alts if a.literals is not None for v in a.literals)
    schemas = [a.schema for a in alts if a.schema is not None]
    if not schemas:
        return Alternative(xtml_type, literals=literals)
    return Alternative(xtml_type, {"anyOf": ([{"enum": list(literals)}] if literals else []) + schemas})


def _has_local_ref(schema: Any) -> bool:
    if isinstance(schema, dict):
        if any(isinstance(schema.get(k), str) and schema[k].startswith("#") for k in _REF_KEYS):
            return True
        return any(_has_local_ref(v) for v in schema.values())
    if isinstance(schema, list):
        return any(_has_local_ref(v) for v in schema)
    return False


def literal_text(value: Any) -> str:
    """How a literal is written as an argument body: strings raw, others JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
