"""`allOf` folded into one schema before xgrammar sees it.

xgrammar 0.2.9 converts an `allOf` of more than one branch into any JSON value (`{"allOf": [{"type": "integer",
"minimum": 5}, {"maximum": 10}]}` took `"x"` and `12`): a grammar that admits what the schema refuses. Here the
branches (and the schema's own keywords beside `allOf`) become one schema where that is exact: a branch that is
only a local `$ref` is its target; keywords that only one part has are all kept (each is its own assertion);
keywords several parts have are merged where the intersection is one keyword (`type`, `required`, `properties`,
`enum`, `const`, the bounds); any other overlap, or a keyword whose meaning depends on its siblings
(`additionalProperties`, `items`, `$ref`, …) beside another part, is a SchemaGrammarError (a 400 when enforced).
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


def folded_all_of(schema: Any, param: str, root: Any = None) -> Any:
    """`schema` with every `allOf` folded into its schema object (raises SchemaGrammarError naming `param` where
    that is not exact)."""
    root = schema if root is None else root
    if isinstance(schema, list):
        return [folded_all_of(s, param, root) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _folded_value(k, v, param, root) for k, v in schema.items()}
    branches = out.pop("allOf", None)
    if not isinstance(branches, list):
        return out if branches is None else {**out, "allOf": branches}
    own = {k: v for k, v in out.items() if k not in _KEEP_ON_ROOT}
    parts = [p for p in (own, *(_target(b, root, param) for b in branches)) if p is not True and p != {}]
    if not all(isinstance(p, dict) for p in parts):
        raise SchemaGrammarError("the JSON schema cannot be enforced: an allOf branch that is no object", param)
    bound = sorted({k for p in parts for k in p.keys() & _SIBLING_BOUND})
    if bound and len(parts) > 1:
        raise SchemaGrammarError(
            f"the JSON schema cannot be enforced: an allOf whose parts use {', '.join(bound)}", param
        )
    merged: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            merged[key] = _merged(key, merged[key], value, param, root) if key in merged else value
    return {**{k: v for k, v in out.items() if k in _KEEP_ON_ROOT}, **merged}


def _folded_value(key: str, value: Any, param: str, root: Any) -> Any:
    if key in ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas") and isinstance(
        value, dict
    ):
        return {k: folded_all_of(v, param, root) for k, v in value.items()}
    if key in ("const", "enum", "required", "examples", "default"):
        return value
    return folded_all_of(value, param, root) if isinstance(value, (dict, list)) else value


def _target(branch: Any, root: Any, param: str) -> Any:
    """`branch`, or the schema its lone local `$ref` points to (followed up to _MAX_REF_HOPS)."""
    for _ in range(_MAX_REF_HOPS):
        if not (isinstance(branch, dict) and set(branch) == {"$ref"} and isinstance(branch["$ref"], str)):
            return branch
        ref = branch["$ref"]
        if not ref.startswith("#"):
            return branch
        node = root
        for step in filter(None, ref[1:].split("/")):
            step = step.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or step not in node:
                return branch  # xgrammar's own refusal names it
            node = node[step]
        branch = folded_all_of(node, param, root)
    raise SchemaGrammarError("the JSON schema cannot be enforced: an allOf of $refs too many hops deep", param)


def _merged(key: str, first: Any, second: Any, param: str, root: Any) -> Any:
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
            raise SchemaGrammarError("the JSON schema cannot be enforced: an allOf of disjoint types", param)
        return both[0] if len(both) == 1 else both
    if key == "enum" and isinstance(first, list) and isinstance(second, list):
        seconds = {json.dumps(v, sort_keys=True) for v in second}
        both = [v for v in first if json.dumps(v, sort_keys=True) in seconds]
        if not both:
            raise SchemaGrammarError("the JSON schema cannot be enforced: an allOf of disjoint enums", param)
        return both
    if key == "properties" and isinstance(first, dict) and isinstance(second, dict):
        out = dict(first)
        for name, sub in second.items():
            out[name] = folded_all_of({"allOf": [first[name], sub]}, param, root) if name in first else sub
        return out
    raise SchemaGrammarError(f"the JSON schema cannot be enforced: an allOf whose branches both say {key}", param)
