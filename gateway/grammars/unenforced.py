"""JSON Schema keywords no grammar here enforces, and the refusal of a strict schema that uses one.

xgrammar 0.2.9 (and the families' own argument grammars, which read `oneOf` as `anyOf` too) silently drops `not`,
`if`/`then`/`else`, `dependentRequired`, `dependentSchemas`, `dependencies`, `contains` and `uniqueItems`, and
reads `oneOf` as `anyOf` (a value matching two branches passes): measured, bench/RESULTS.md. A schema the client
marked strict (a tool's `strict: true`; a json_schema response format's `strict: true`, which /v1/messages'
`output_config.format` always is) promises that every answer matches it, so one using such a keyword is a 400
naming the keyword's place, as OpenAI's strict mode refuses them. A `oneOf` whose branches are provably mutually
exclusive is enforced exactly (where no value can match two branches, anyOf is oneOf) and passes. The string
keywords xgrammar drops are refused the same way: a `format` no grammar enforces (string_formats.py), a `pattern`
beside a `format` (the format wins) or with a lookahead or an inner anchor (ignored), `minLength`/`maxLength` beside either (but
where the family's grammar holds the pair itself: Family.raw_lengths_held, DeepSeek's raw strings), and any of them in a schema that does
not say `"type": "string"` (xgrammar then takes any value), and a keyword beside an `anyOf` / `oneOf` that cannot be
folded exactly into each branch (all_of.py: xgrammar drops it), `enum` / `const` values not checkable against the
keywords beside them (all_of.py), and a type's keyword in a schema with no type said nor read (`untyped_keyword`:
xgrammar writes any value). Without strict the rest of the schema is enforced
and these keywords are not (docs/schemas.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from gateway.families.json_pointer import resolve_pointer
from gateway.grammars.all_of import SIBLING_ASSERTIONS, UNIONS, SiblingGap, folded_all_of, listed_of_type
from gateway.grammars.claimed_names import claimed_names
from gateway.grammars.ecma_patterns import PatternSearch
from gateway.grammars.json import (
    ARRAY_SIGNS,
    OBJECT_SIGNS,
    RESPONSE_SCHEMA_PARAM,
    SchemaGrammarError,
    response_schema,
    response_strict,
)
from gateway.grammars.json_free_names import marked_free_names
from gateway.grammars.required import declared_required
from gateway.grammars.safe_json import SUBSCHEMA_KEYS, SUBSCHEMA_MAPS, unannotated
from gateway.grammars.string_formats import ENFORCED_FORMATS
from gateway.grammars.used_defs import used_definitions
from gateway.types import ChatRequest

UNENFORCED = ("not", "if", "dependentRequired", "dependentSchemas", "dependencies", "contains", "uniqueItems")
"""Keywords the grammars drop (`then`/`else` mean nothing without `if`; `minContains`/`maxContains` without
`contains`), and `oneOf` unless its branches are exclusive."""
_REF_HOPS = 16


def check_strict_schemas(
    chat: ChatRequest, lengths_held: Callable[[Any], frozenset[str]] = lambda p: frozenset()
) -> None:
    """SchemaGrammarError naming the first keyword no grammar enforces in a schema `chat` marks strict: an active
    tool's with `strict: true`, a strict json_schema response format's (their listed values' pattern searches
    bounded together: ecma_patterns.SECONDS). `lengths_held` gives the places in a tool's parameters
    (`.properties.x`) where the family's grammar holds a length beside a pattern itself (Family.raw_lengths_held):
    no length there is refused here."""
    search = PatternSearch()
    for tool in chat.active_tools:
        parameters = tool["function"].get("parameters")
        if tool["function"].get("strict") is True and isinstance(parameters, dict):
            param = f"tools[{chat.tools.index(tool)}].function.parameters"
            _check(parameters, param, search, frozenset(param + place for place in lengths_held(parameters)))
    if response_strict(chat.response_format):
        _check(response_schema(chat.response_format), RESPONSE_SCHEMA_PARAM, search)


def strict_where_possible(
    chat: ChatRequest, keeps: Callable[[Any], bool] = lambda parameters: True
) -> tuple[ChatRequest, set[int]]:
    """`chat` with each active tool that omits `strict` made strict where its schema uses no keyword left
    unenforced (and `keeps` its parameters: the family's grammar can hold them, Family.keeps_strict), and the
    indexes (in `chat.tools`) of the tools so made strict. OpenAI's Responses API: "If you omit
    strict ... Responses requests will attempt to normalize your schema into strict mode when possible, and will
    fall back to non-strict, best-effort function calling if the schema cannot be made compatible" (its
    function-calling guide; the SDK's FunctionToolParam: "Default `true`")."""
    active = {id(tool) for tool in chat.active_tools}
    search = PatternSearch()
    promoted = {
        i
        for i, tool in enumerate(chat.tools)
        if "strict" not in tool["function"]
        and id(tool) in active
        and strict_able(tool, search)
        and keeps(tool["function"].get("parameters"))
    }
    if not promoted:
        return chat, promoted
    tools = [
        {**t, "function": {**t["function"], "strict": True}} if i in promoted else t for i, t in enumerate(chat.tools)
    ]
    return replace(chat, tools=tools), promoted


def strict_able(tool: dict[str, Any], search: PatternSearch | None = None) -> bool:
    """Whether a tool's schema uses no keyword the grammars leave unenforced (so strict can keep its promise);
    `search`: the listed values' pattern searches, shared by the tools of one request."""
    parameters = tool["function"].get("parameters")
    return not isinstance(parameters, dict) or next(_found(parameters, "", search), None) is None


def unenforced_keywords(schema: Any, param: str) -> list[tuple[str, str]]:
    """Each place in `schema` (named under `param`) whose keyword no grammar enforces, with the keyword."""
    return list(_found(schema, param))


def _found(schema: Any, param: str, search: PatternSearch | None = None) -> Iterator[tuple[str, str]]:
    return ((where, keyword) for where, keyword, _ in _found_why(schema, param, search))


def _found_why(
    schema: Any, param: str, search: PatternSearch | None = None, lengths_held: frozenset[str] = frozenset()
) -> Iterator[tuple[str, str, str | None]]:
    """Each place, its keyword, and why it is not enforced where that is more than the keyword itself (in the
    definitions a reference reaches: used_defs.py); a length beside a pattern at one of the `lengths_held` places
    (the family's grammar holds it) is not."""
    schema = used_definitions(schema)
    folds = False
    for node, where in _schemas(schema, param):
        folds = folds or _beside_union(node) or _unlisted_required(node) or _listed_beside(node)
        folds = folds or "patternProperties" in node
        for keyword in _unenforced(node, schema):
            yield where, keyword, None
        if "format" in node or "pattern" in node or "minLength" in node or "maxLength" in node:
            for keyword, why in _string_gaps(node, where in lengths_held):
                yield where, keyword, why
    untyped = any(untyped_keyword(node) is not None for node, _ in _schemas(schema, param, _NOT_WRITTEN))
    folded, gaps = _folded(schema, param, search) if folds or untyped else (None, [])
    for gap in gaps:
        yield gap.where, gap.keyword, gap.why
    for node, where in _schemas(folded, param, _NOT_WRITTEN) if untyped else ():
        keyword = untyped_keyword(node)
        if keyword is not None:
            why = f"'{keyword}' is enforced only in a schema that says its \"type\" (without it any value passes)"
            yield where, keyword, why


def _folded(schema: Any, param: str, search: PatternSearch | None) -> tuple[Any, list[SiblingGap]]:
    """`schema` as the grammars read it (all_of.py's folds; None where an allOf does not fold: the build refuses it,
    a 400 naming it), and the keywords they leave unenforced there: those beside an `anyOf` / `oneOf` that cannot be
    folded into its branches, `const` / `enum` values not checked against their siblings (all_of.py), the pattern
    schemas not folded into a declared name they match (claimed_names.py), the required
    names the folded schema cannot declare (required.py), the free names that cannot be kept from its pattern keys
    (json_free_names.py)."""
    gaps: list[SiblingGap] = []
    try:
        folded = folded_all_of(unannotated(schema), param, gaps, search=search)
        claimed = claimed_names(folded, param, gaps=gaps)
        marked_free_names(declared_required(claimed, param, gaps=gaps), param, False, gaps)
    except SchemaGrammarError:
        return None, gaps
    return folded, gaps


TYPED_KEYWORDS = ("required", "minProperties", "maxProperties", "propertyNames", "patternProperties", "minItems",
                  "maxItems", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")  # fmt: skip
"""Keywords that assert something of one type's values, but the string ones (`_string_gaps` names those): none is
enforced in a schema written as any value (no `type` said nor read), as gemma4/arguments.py reads it too."""
_NOT_WRITTEN = frozenset({"not", "if", "then", "else", "contains", "dependentSchemas", "propertyNames"})
"""Keywords whose schemas no grammar writes a value by: refused themselves (`_unenforced`), asserting nothing
(`if` alone) or only of names (strings)."""
_SAYS_VALUES = frozenset({"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "$dynamicRef"})


def untyped_keyword(node: dict[str, Any]) -> str | None:
    """The first TYPED_KEYWORDS keyword of a schema that xgrammar writes as any value: no `type` said nor read from
    OBJECT_SIGNS / ARRAY_SIGNS, no literal, union or reference (JSON Schema would take any value of another type and
    one of that type only where the keyword holds; the grammars take any, so a strict schema is refused)."""
    if _SAYS_VALUES & node.keys() or (OBJECT_SIGNS | ARRAY_SIGNS) & node.keys():
        return None
    return next((k for k in TYPED_KEYWORDS if k in node), None)


def _listed_beside(node: dict[str, Any]) -> bool:
    """Whether `node` lists its values (`const`, `enum`) beside another assertion (all_of.py filters them), but a
    `type` that every value has."""
    listed = ("const" in node or "enum" in node) and any(
        k in SIBLING_ASSERTIONS and k not in ("const", "enum") for k in node
    )
    return listed and listed_of_type(node) is not True


def _unlisted_required(node: dict[str, Any]) -> bool:
    """Whether `node` requires a name its own `properties` does not list (the fold may still list it: a union's
    branch saying only `required`), or says a `required` beside a `$ref` (required.py folds the two where that is
    exact, whatever `properties` lists: the same test then says whether it is)."""
    required, properties = node.get("required"), node.get("properties")
    listed = properties if isinstance(properties, dict) else {}
    if isinstance(required, list) and isinstance(node.get("$ref"), str):
        return True
    return isinstance(required, list) and any(isinstance(r, str) and r not in listed for r in required)


def _beside_union(node: dict[str, Any]) -> bool:
    """Whether `node` says an `anyOf` / `oneOf` and an assertion beside it."""
    if "anyOf" not in node and "oneOf" not in node:
        return False
    union = next(k for k in UNIONS if k in node)
    return any(k in SIBLING_ASSERTIONS for k in node if k != union)


_STRING_KEYWORDS = ("format", "pattern", "minLength", "maxLength")
_ESCAPES = re.compile(r"\\.")
_CLASSES = re.compile(r"\[\^?\]?[^\]]*\]")
_LOOKAHEAD = re.compile(r"\(\?[=!]")
"""A lookahead group, found once escapes and classes are taken out: xgrammar 0.2.9 matches a pattern as if it had
none (`^(?=.*\\d)[a-z\\d]+$` takes "abc"); lookbehinds and other groups it refuses (a 400 under strict already)."""
_STRICT_FORMATS = ", ".join(sorted(ENFORCED_FORMATS))
_GROUP_OPENING = re.compile(r"\((?:\?:)?")
_MIRRORED = str.maketrans("()", ")(")


def _inner_anchor(pattern: str) -> bool:
    """Whether a `^` may follow, or a `$` precede, a consumed character on its branch: xgrammar 0.2.9 ignores an
    anchor not at the pattern's start or end (`a^b` takes "ab", which the pattern never matches)."""
    flat = _GROUP_OPENING.sub("(", _CLASSES.sub("x", _ESCAPES.sub("x", pattern)))
    return _consumed_before(flat, "^") or _consumed_before(flat[::-1].translate(_MIRRORED), "$")


def _consumed_before(flat: str, anchor: str) -> bool:
    """Whether `anchor` occurs in `flat` (escapes and classes one character, groups plain) where its branch may
    have consumed a character before it (a group, or any character but an anchor, counts as one)."""
    consumed, starts = [False], [False]  # per open group: its branch so far, and what it began with
    for c in flat:
        if c == "(":
            starts.append(consumed[-1])
            consumed.append(consumed[-1])
        elif c == "|":
            consumed[-1] = starts[-1]
        elif c == ")" and len(consumed) > 1:
            starts.pop()
            consumed.pop()
            consumed[-1] = True
        elif c == anchor and consumed[-1]:
            return True
        elif c not in "^$":
            consumed[-1] = True
    return False


def _string_gaps(node: dict[str, Any], lengths_held: bool = False) -> list[tuple[str, str]]:
    """The string keywords of `node` xgrammar 0.2.9's schema converter drops (measured: bench/RESULTS.md), each
    with why; a length beside a pattern not where the family's grammar holds it (`lengths_held`)."""
    present = [k for k in _STRING_KEYWORDS if k in node]
    kinds = _types(node)
    if kinds is not None and "string" not in kinds:
        return []  # a string keyword asserts nothing of a value of another type
    if "type" not in node:
        if "const" in node or "enum" in node:
            return []
        why = 'is enforced only in a schema that says "type": "string" (without it any value passes)'
        return [(present[0], f"'{present[0]}' {why}")]
    gaps = []
    fmt = node.get("format")
    if "format" in node and fmt not in ENFORCED_FORMATS:
        gaps.append(
            ("format", f"the format {json.dumps(fmt)} is not enforced; the formats enforced: {_STRICT_FORMATS}")
        )
    if isinstance(node.get("pattern"), str) and _LOOKAHEAD.search(_CLASSES.sub("", _ESCAPES.sub("", node["pattern"]))):
        gaps.append(("pattern", "'pattern' lookahead ((?=…), (?!…)) is ignored (the rest of the pattern is enforced)"))
    if isinstance(node.get("pattern"), str) and _inner_anchor(node["pattern"]):
        gaps.append(("pattern", "'pattern' anchor (^, $) not at its start or end is ignored"))
    if "format" in node and "pattern" in node:
        gaps.append(("pattern", "a 'pattern' beside a 'format' is not enforced (the format is); keep one"))
    if ("format" in node or "pattern" in node) and not lengths_held:
        for length in ("minLength", "maxLength"):
            if length in node:
                why = f"'{length}' beside a 'pattern' or 'format' is not enforced; write the length into the pattern"
                gaps.append((length, why))
    return gaps


def _check(schema: Any, param: str, search: PatternSearch, lengths_held: frozenset[str] = frozenset()) -> None:
    for where, keyword, why in _found_why(schema, param, search, lengths_held):
        if why is not None:
            raise SchemaGrammarError(
                f"a strict schema's {why}; or set strict false for best effort", f"{where}.{keyword}"
            )
        if keyword == "oneOf":
            raise SchemaGrammarError(
                "a strict schema's 'oneOf' must have branches that exclude each other (distinct types, distinct "
                "const or enum values, or such a property every branch requires): this gateway's grammars enforce "
                "'oneOf' as 'anyOf'; use anyOf, or strict false for best effort",
                f"{where}.oneOf",
            )
        raise SchemaGrammarError(
            f"a strict schema cannot use '{keyword}': this gateway's grammars do not enforce it (it would be "
            "silently ignored); remove it, or set strict false for best effort",
            f"{where}.{keyword}",
        )


def _schemas(node: Any, at: str, skip: frozenset[str] = frozenset()) -> Iterator[tuple[dict[str, Any], str]]:
    """Every schema object in `node`, in document order, at schema positions only (a property named `not` is no
    keyword), but those under a `skip` keyword; nesting is bounded by the doors' schema check
    (validation/schema_bounds.py)."""
    if not isinstance(node, dict):
        return
    yield node, at
    for key, value in node.items():
        if key in skip:
            continue
        if key in SUBSCHEMA_KEYS and isinstance(value, dict):
            yield from _schemas(value, f"{at}.{key}", skip)
        elif key in SUBSCHEMA_KEYS and isinstance(value, list):
            for i, item in enumerate(value):
                yield from _schemas(item, f"{at}.{key}[{i}]", skip)
        elif key in SUBSCHEMA_MAPS and isinstance(value, dict):
            for name, item in value.items():
                yield from _schemas(item, f"{at}.{key}.{name}", skip)


def _unenforced(node: dict[str, Any], root: Any) -> list[str]:
    found = []
    for keyword in UNENFORCED:
        value = node.get(keyword)
        if keyword not in node or value is False or (value == {} and keyword.startswith("depend")):
            continue  # uniqueItems false, no dependencies: nothing asserted
        if keyword == "if" and "then" not in node and "else" not in node:
            continue
        found.append(keyword)
    branches = node.get("oneOf")
    if isinstance(branches, list) and not _exclusive(branches, root, node):
        found.append("oneOf")
    return found


@dataclass(frozen=True)
class _Branch:
    """What a oneOf branch says of the values it admits, read once."""

    values: frozenset[tuple[str, Any]] | None
    types: frozenset[str] | None
    discriminators: dict[str, frozenset[tuple[str, Any]]]
    """Its required properties whose values it lists (`const`, `enum`)."""


_PAIRWISE = 64
"""Branches compared pair by pair at most; a longer oneOf must be split whole by one discriminator (its values,
or one property's)."""


def _exclusive(branches: list[Any], root: Any, parent: dict[str, Any]) -> bool:
    """Whether no value can match two of `branches` (provably: by types, by values, or by a discriminating
    property every branch requires)."""
    objects_only = _types(parent) == {"object"}
    required = _required(parent)  # beside the oneOf, so every branch's too (all_of.py folds it in)
    facts = [_branch(b, root, required) for b in branches if b is not False]  # `false` admits nothing
    if any(f is None for f in facts):
        return False
    if len(facts) > _PAIRWISE:
        return (
            _split_by(facts, lambda f: f.values)
            or (all(f.types == {"object"} for f in facts) or objects_only)
            and any(_split_by(facts, lambda f, n=name: f.discriminators.get(n)) for name in facts[0].discriminators)
        )
    return all(_disjoint(a, b, objects_only) for i, a in enumerate(facts) for b in facts[i + 1 :])


def _branch(schema: Any, root: Any, required: set[str]) -> _Branch | None:
    """A branch's facts (`required`: the names the union's parent requires too); None for one that admits any
    value (`true`, or no schema object)."""
    schema = _resolved(schema, root)
    if not isinstance(schema, dict):
        return None
    discriminators = {}
    for name in _required(schema) | required:
        values = _values(_resolved(_property(schema, name), root))
        if values is not None:
            discriminators[name] = values
    return _Branch(_values(schema), _types(schema), discriminators)


def _split_by(facts: list[_Branch], key: Callable[[_Branch], frozenset[Any] | None]) -> bool:
    """Whether every branch lists values under `key` and no value is listed twice."""
    sets = [key(f) for f in facts]
    return all(s is not None for s in sets) and sum(map(len, sets)) == len(frozenset().union(*sets))


def _disjoint(a: _Branch, b: _Branch, objects_only: bool) -> bool:
    if a.values is not None and b.values is not None and not a.values & b.values:
        return True
    if a.types is not None and b.types is not None and not _types_overlap(a.types, b.types):
        return True
    if not (objects_only or a.types == {"object"} or b.types == {"object"}):
        return False  # `required` and `properties` say nothing of a value that is not an object
    return any(not a.discriminators[n] & b.discriminators[n] for n in a.discriminators.keys() & b.discriminators)


def _resolved(schema: Any, root: Any) -> Any:
    """`schema` with its local `$ref` followed (its sibling keywords kept beside the target's)."""
    for _ in range(_REF_HOPS):
        if not (isinstance(schema, dict) and isinstance(schema.get("$ref"), str)):
            break
        target = resolve_pointer(root, schema["$ref"])
        if not isinstance(target, dict):
            break
        schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


def _property(schema: dict[str, Any], name: str) -> Any:
    properties = schema.get("properties")
    return properties.get(name) if isinstance(properties, dict) else None


def _required(schema: dict[str, Any]) -> set[str]:
    required = schema.get("required")
    return {r for r in required if isinstance(r, str)} if isinstance(required, list) else set()


def _values(schema: Any) -> frozenset[tuple[str, Any]] | None:
    """The values a schema admits when it lists them (`const`, `enum`), as comparable keys; None when it does not."""
    if not isinstance(schema, dict):
        return None
    if "const" in schema:
        return frozenset([_value_key(schema["const"])])
    enum = schema.get("enum")
    return frozenset(_value_key(v) for v in enum) if isinstance(enum, list) else None


def _value_key(value: Any) -> tuple[str, Any]:
    """JSON equality: 1 and 1.0 are one value, true and 1 are not."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return ("number", value)
    return ("json", json.dumps(value, sort_keys=True))


_JSON_TYPES = {bool: "boolean", str: "string", type(None): "null", list: "array", dict: "object", float: "number"}


def _types(schema: Any) -> frozenset[str] | None:
    """The JSON types a schema allows when it says (`type`, or its `const`/`enum` values'); None for any."""
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if isinstance(kind, str):
        return frozenset([kind])
    if isinstance(kind, list):
        return frozenset(k for k in kind if isinstance(k, str))
    if "const" in schema:
        return frozenset([_type_of(schema["const"])])
    enum = schema.get("enum")
    return frozenset(_type_of(v) for v in enum) if isinstance(enum, list) else None


def _type_of(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return "integer"
    if isinstance(value, float) and value.is_integer():
        return "integer"
    return _JSON_TYPES.get(type(value), "object")


def _types_overlap(a: frozenset[str], b: frozenset[str]) -> bool:
    """Whether a value can have a type of each (every integer is a number)."""
    return bool(a & b) or ("number" in a and "integer" in b) or ("integer" in a and "number" in b)
