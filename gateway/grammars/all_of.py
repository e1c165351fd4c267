"""`allOf` folded into one schema before xgrammar sees it.

xgrammar 0.2.9 converts an `allOf` of more than one branch into any JSON value (`{"allOf": [{"type": "integer",
"minimum": 5}, {"maximum": 10}]}` took `"x"` and `12`): a grammar that admits what the schema refuses. Here the
branches (and the schema's own keywords beside `allOf`) become one schema where that is exact: a branch that is
only a local `$ref` is its target; keywords that only one part has are all kept (each is its own assertion);
keywords several parts have are merged where the intersection is one keyword (`type`, `required`, `properties`,
`enum`, `const`, the bounds); any other overlap, or a keyword whose meaning depends on its siblings
(`additionalProperties`, `items`, `$ref`, …) beside another part, is a SchemaGrammarError (a 400 when enforced).
An `allOf` of one part (annotations were taken out before: safe_json.unannotated) is that part, its `$ref` left for
xgrammar: pydantic v1 wraps every described reference so (`{"allOf": [{"$ref": ...}], "description": ...}`),
recursive models included. Only a `$ref` merged with another part is inlined: one that
refers back to itself, or more than _MAX_INLINED of them (each may double the schema), is a SchemaGrammarError.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.grammars.json import SchemaGrammarError

_LEAST = frozenset({"minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties"})
_MOST = frozenset({"maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties"})
_SIBLING_BOUND = frozenset(
    {"additionalProperties", "patternProperties", "items", "prefixItems", "additionalItems", "unevaluatedProperties",
     "unevaluatedItems", "if", "then", "else", "contains", "minContains", "maxContains", "$ref", "$dynamicRef"}
)  # fmt: skip
"""Keywords whose meaning depends on other keywords of the same schema object: never merged with another part."""
_KEEP_ON_ROOT = frozenset({"$defs", "definitions", "$schema", "$id"})
_MAX_REF_HOPS = 16
_MAX_INLINED = 256
"""`$ref` targets inlined into merged allOf parts, per schema."""


def folded_all_of(schema: Any, param: str) -> Any:
    """`schema` with every `allOf` folded into its schema object (raises SchemaGrammarError naming `param` where
    that is not exact)."""
    return _Folder(schema, param).fold(schema)


class _Folder:
    """One schema's fold: its root (for local `$ref`s), the references being inlined, how many were."""

    def __init__(self, root: Any, param: str) -> None:
        self.root, self.param = root, param
        self.inlining: list[str] = []
        self.inlined = 0

    def fold(self, schema: Any) -> Any:
        if isinstance(schema, list):
            return [self.fold(s) for s in schema]
        if not isinstance(schema, dict):
            return schema
        out = {k: self._folded_value(k, v) for k, v in schema.items()}
        branches = out.pop("allOf", None)
        if not isinstance(branches, list):
            return out if branches is None else {**out, "allOf": branches}
        own = {k: v for k, v in out.items() if k not in _KEEP_ON_ROOT}
        parts = _parts(own, branches)
        if len(parts) > 1:
            parts = _parts({}, [self._target(p) for p in parts])
        if not all(isinstance(p, dict) for p in parts):
            raise SchemaGrammarError(
                "the JSON schema cannot be enforced: an allOf branch that is no object", self.param
            )
        bound = sorted({k for p in parts for k in p.keys() & _SIBLING_BOUND})
        if bound and len(parts) > 1:
            raise SchemaGrammarError(
                f"the JSON schema cannot be enforced: an allOf whose parts use {', '.join(bound)}", self.param
            )
        merged: dict[str, Any] = {}
        for part in parts:
            for key, value in part.items():
                merged[key] = self._merged(key, merged[key], value) if key in merged else value
        return {**{k: v for k, v in out.items() if k in _KEEP_ON_ROOT}, **merged}

    def _folded_value(self, key: str, value: Any) -> Any:
        if key in ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas") and isinstance(
            value, dict
        ):
            return {k: self.fold(v) for k, v in value.items()}
        if key in ("const", "enum", "required", "examples", "default"):
            return value
        return self.fold(value) if isinstance(value, (dict, list)) else value

    def _target(self, branch: Any) -> Any:
        """`branch`, or the schema its lone local `$ref` points to (followed up to _MAX_REF_HOPS), folded."""
        refs: list[str] = []
        for _ in range(_MAX_REF_HOPS):
            if not (isinstance(branch, dict) and set(branch) == {"$ref"} and isinstance(branch["$ref"], str)):
                break
            ref = branch["$ref"]
            node = self._local(ref)
            if node is None:
                break  # xgrammar's own refusal names it
            if ref in self.inlining or ref in refs:
                raise SchemaGrammarError(
                    f"the JSON schema cannot be enforced: {ref} merged in an allOf within itself", self.param
                )
            refs.append(ref)
            branch = node
        else:
            raise SchemaGrammarError(
                "the JSON schema cannot be enforced: an allOf of $refs too many hops deep", self.param
            )
        if not refs:
            return branch
        self.inlined += 1
        if self.inlined > _MAX_INLINED:
            raise SchemaGrammarError(
                f"the JSON schema cannot be enforced: more than {_MAX_INLINED} $refs merged in allOf parts", self.param
            )
        self.inlining += refs
        try:
            return self.fold(branch)
        finally:
            del self.inlining[-len(refs) :]

    def _merged(self, key: str, first: Any, second: Any) -> Any:
        """The one keyword that asserts both `first` and `second`."""
        if json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True):
            return first
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (first, second))
        if key in _LEAST and numbers:
            return max(first, second)
        if key in _MOST and numbers:
            return min(first, second)
        if key == "required" and isinstance(first, list) and isinstance(second, list):
            return [*first, *(r for r in second if r not in first)]
        if key == "type" and all(isinstance(v, (str, list)) for v in (first, second)):
            a, b = ([v] if isinstance(v, str) else v for v in (first, second))
            both = [t for t in a if t in b or (t == "integer" and "number" in b)]
            both += [t for t in b if t == "integer" and "number" in a and t not in both]
            if not both:
                raise SchemaGrammarError("the JSON schema cannot be enforced: an allOf of disjoint types", self.param)
            return both[0] if len(both) == 1 else both
        if key == "enum" and isinstance(first, list) and isinstance(second, list):
            seconds = {json.dumps(v, sort_keys=True) for v in second}
            both = [v for v in first if json.dumps(v, sort_keys=True) in seconds]
            if not both:
                raise SchemaGrammarError("the JSON schema cannot be enforced: an allOf of disjoint enums", self.param)
            return both
        if key == "properties" and isinstance(first, dict) and isinstance(second, dict):
            out = dict(first)
            for name, sub in second.items():
                out[name] = self.fold({"allOf": [first[name], sub]}) if name in first else sub
            return out
        raise SchemaGrammarError(
            f"the JSON schema cannot be enforced: an allOf whose branches both say {key}", self.param
        )

    def _local(self, ref: str) -> Any:
        """The schema a local `$ref` points to, None when it points nowhere (or elsewhere)."""
        if not ref.startswith("#"):
            return None
        node = self.root
        for step in filter(None, ref[1:].split("/")):
            step = step.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or step not in node:
                return None
            node = node[step]
        return node


def _parts(own: dict[str, Any], branches: list[Any]) -> list[Any]:
    """The schemas an allOf asserts, those that assert nothing (true, {}) left out."""
    return [p for p in (own, *branches) if p is not True and p != {}]
