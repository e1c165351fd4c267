"""`allOf` folded into one schema, and the keywords beside an `anyOf` / `oneOf` into each branch, before xgrammar
sees them.

xgrammar 0.2.9 converts an `allOf` of more than one branch into any JSON value (`{"allOf": [{"type": "integer",
"minimum": 5}, {"maximum": 10}]}` took `"x"` and `12`): a grammar that admits what the schema refuses. Here the
branches (and the schema's own keywords beside `allOf`) become one schema where that is exact: a branch that is
only a local `$ref` is its target; keywords that only one part has are all kept (each is its own assertion);
keywords several parts have are merged where the intersection is one keyword (`type`, `required`, `properties`
with `additionalProperties`, `items`, `enum`, `const`, the bounds); a `const` / `enum` beside other assertions keeps
only the values they admit (xgrammar writes the values alone); any other overlap, or a keyword whose meaning depends
on its siblings (`patternProperties`, `prefixItems`, `$ref`, …) beside another part saying one of them, is a
SchemaGrammarError (a 400 when enforced).
An `allOf` of one part (annotations were taken out before: safe_json.unannotated) is that part, its `$ref` left for
xgrammar: pydantic v1 wraps every described reference so (`{"allOf": [{"$ref": ...}], "description": ...}`),
recursive models included. Only a `$ref` merged with another part is inlined: one that
refers back to itself, or more than _MAX_INLINED of them (each may double the schema), is a SchemaGrammarError.

xgrammar also reads an `anyOf` / `oneOf` alone, the keywords beside it dropped (`{"anyOf": [{"type": "integer"},
{"type": "string"}], "minimum": 5}` took 3). JSON Schema asserts them as well: `{anyOf: [A, B], K}` is
`{anyOf: [A∧K, B∧K]}` (oneOf alike). Each branch is folded with them as an allOf is; a branch that admits no value
then (disjoint types), or alone (listed values its keywords all refuse, an allOf of disjoint parts), is left out:
the union takes what the others take (none left: each branch as it was, its gap recorded). Where a branch cannot be
folded exactly, or the copies would pass _MAX_COPIED values, the keyword is a `SiblingGap`: refused under the
client's strict (unenforced.py names it), else that branch is kept alone (the keywords not enforced there, as
xgrammar did).

Any schema's `const` / `enum` beside other assertions keeps only the values they admit, merged or not
(`_Folder._listed`): xgrammar writes the values alone (`{"enum": ["a", "bb"], "maxLength": 1}` took `"bb"`). Its own
`pattern` is searched as ECMA-262 reads it, within a time budget (ecma_patterns.py). Where they cannot be checked (a
pattern not translated or past the budget, one nested deeper, a `format`, a `$ref`) or admit none, a SiblingGap
naming the `enum` / `const` (a SchemaGrammarError when exact). The families that write listed values themselves
(Gemma 4, Kimi K3, DeepSeek's raw strings) keep the same ones (`admitted_values`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, NamedTuple

from gateway.grammars.ecma_patterns import PatternSearch, Unchecked
from gateway.grammars.json import SchemaGrammarError

_LEAST = frozenset({"minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties"})
_MOST = frozenset({"maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties"})
_BOUND_GROUPS = (
    frozenset({"properties", "patternProperties", "additionalProperties", "unevaluatedProperties"}),
    frozenset({"items", "prefixItems", "additionalItems", "unevaluatedItems", "contains", "minContains",
               "maxContains"}),
    frozenset({"if", "then", "else"}),
    frozenset({"$ref", "$dynamicRef"}),
)  # fmt: skip
"""Keywords whose meaning depends on other keywords of their group in the same schema object: merged with another
part saying one of them only where `_MERGEABLE` (`properties` with `additionalProperties`, schema `items`)."""
_MERGEABLE = (frozenset({"properties", "additionalProperties"}), frozenset({"items"}), frozenset(), frozenset())
_KEEP_ON_ROOT = frozenset({"$defs", "definitions", "$schema", "$id"})
_MAX_REF_HOPS = 16
_MAX_INLINED = 256
"""`$ref` targets inlined into merged allOf parts, per schema."""
UNIONS = ("anyOf", "oneOf")
SIBLING_ASSERTIONS = frozenset(
    {"type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum",
     "maxLength", "minLength", "pattern", "format", "maxItems", "minItems", "uniqueItems", "maxContains",
     "minContains", "contains", "items", "prefixItems", "additionalItems", "unevaluatedItems", "maxProperties",
     "minProperties", "required", "properties", "patternProperties", "additionalProperties", "propertyNames",
     "unevaluatedProperties", "dependentRequired", "dependentSchemas", "dependencies", "allOf", "anyOf", "oneOf",
     "not", "if", "then", "else"}
)  # fmt: skip
"""JSON Schema's assertion keywords: beside an `anyOf` / `oneOf` each holds for every branch (annotations, `$defs`
and keywords JSON Schema does not know, such as OpenAPI's `discriminator`, assert nothing)."""
_MAX_COPIED = 20_000
"""Schema values the folds of one schema may copy into union branches (the keywords beside a union, once per branch
but the first): many branches times many keywords, nested, would grow the schema geometrically."""


class SiblingGap(NamedTuple):
    """A keyword beside a union not folded into one of its branches: where the union is, the keyword, and why."""

    where: str
    keyword: str
    why: str


class _Empty(SchemaGrammarError):
    """Parts that no value can match together (disjoint types, enums, consts)."""


def folded_all_of(
    schema: Any,
    param: str,
    gaps: list[SiblingGap] | None = None,
    exact: bool = False,
    search: PatternSearch | None = None,
) -> Any:
    """`schema` with every `allOf` folded into its schema object (raises SchemaGrammarError naming `param` where
    that is not exact) and every union's sibling assertions into its branches: where that is not exact, a
    SchemaGrammarError naming the keyword's place under `param` when `exact`, else the branch kept alone and the
    keyword added to `gaps`. `search`: the pattern searches of listed values, shared by the schemas of one request
    (a budget of this schema's own where None)."""
    return _Folder(schema, param, gaps, exact, search).fold(schema, param)


def conjunction(schemas: list[Any], where: str) -> Any:
    """One schema asserting all of `schemas` (folded as one exact `allOf`), `False` where no value matches them all;
    a SchemaGrammarError naming `where` where the fold is not exact."""
    conjoined = {"allOf": list(schemas)}
    try:
        return _Folder(conjoined, where, None, True).fold(conjoined, where, branch=True)
    except _Empty:
        return False


def folded_branch(beside: dict[str, Any], branch: Any, where: str) -> Any:
    """A union's branch with the keywords `beside` the union folded in: one schema, `False` where it admits no value,
    None where the fold is not exact (a `$ref` in the branch, resolved against no root; an overlap not merged)."""
    if not isinstance(branch, dict) or "$ref" in branch:
        return None
    try:
        folded = _Folder({}, where, None, True).conjunction([beside, branch], where)
    except SchemaGrammarError:
        return None
    return folded if folded is False or (isinstance(folded, dict) and "allOf" not in folded) else None


def admitted_values(schema: dict[str, Any], search: PatternSearch | None = None) -> list[Any] | None:
    """The `const` (as one) / `enum` values of `schema` that its other assertions admit, as the JSON value grammars
    keep them (`_Folder._listed`): for the families that write listed values themselves; None where it lists none or
    they cannot be checked (`search`: the schema's pattern searches, a budget of their own where None)."""
    listed = [schema["const"]] if "const" in schema else schema.get("enum")
    if not isinstance(listed, list):
        return None
    try:
        kept = _values_admitted(schema, "", search or PatternSearch())
    except _Empty:
        return []
    except SchemaGrammarError:
        return None
    return [kept["const"]] if "const" in kept else kept["enum"]


def unfolded_keyword(beside: dict[str, Any], branches: list[Any]) -> str:
    """The keyword beside a union to name where its branches cannot be folded: one a branch says otherwise, else one
    whose meaning depends on the keywords beside it (`items`, `additionalProperties`…), else the first."""
    clash = (k for k in beside if any(isinstance(b, dict) and k in b and b[k] != beside[k] for b in branches))
    bound = (k for k in beside if any(k in group for group in _BOUND_GROUPS))
    return next(clash, next(bound, next(iter(beside))))


class _Folder:
    """One schema's fold: its root (for local `$ref`s), the references being inlined, how many were, the values
    copied into union branches, and what to do where a union's siblings do not fold."""

    def __init__(
        self, root: Any, param: str, gaps: list[SiblingGap] | None, exact: bool, search: PatternSearch | None = None
    ) -> None:
        self.root, self.param, self.gaps, self.exact = root, param, gaps, exact
        self.inlining: list[str] = []
        self.inlined = 0
        self.copied = 0
        self.search = search or PatternSearch()
        self.settling = 0
        """Above 0 while the branches of a union none of which admits a value are folded again, none left out."""

    def fold(self, schema: Any, where: str, branch: bool = False) -> Any:
        """`schema` folded; where it is a union's `branch` and admits no value, _Empty (the union leaves it out)."""
        if isinstance(schema, list):
            return [self.fold(s, f"{where}[{i}]") for i, s in enumerate(schema)]
        if not isinstance(schema, dict):
            return schema
        out = {
            k: self._folded_value(k, v, where, branch) if isinstance(v, (dict, list)) else v for k, v in schema.items()
        }
        branches = out.pop("allOf", None)
        if not isinstance(branches, list):
            out = out if branches is None else {**out, "allOf": branches}
            return self._unions(self._listed(out, where, branch), where, branch)
        own = {k: v for k, v in out.items() if k not in _KEEP_ON_ROOT}
        parts = _parts(own, branches)
        if len(parts) > 1:
            parts = _parts({}, [self._target(p) for p in parts])
        if not all(isinstance(p, dict) for p in parts):
            raise SchemaGrammarError(
                "the JSON schema cannot be enforced: an allOf branch that is no object", self.param
            )
        try:
            merged = self._merged_parts(parts, where, branch)
        except _Empty as exc:  # xgrammar refuses a `false` schema: an allOf that admits nothing is refused
            if branch:
                raise
            raise SchemaGrammarError(str(exc), self.param) from None
        return {**{k: v for k, v in out.items() if k in _KEEP_ON_ROOT}, **merged}

    def conjunction(self, schemas: list[Any], where: str) -> Any:
        """One schema asserting all of `schemas` (already folded), `False` where no value can match them all
        (SchemaGrammarError where they do not merge exactly)."""
        if any(s is False for s in schemas):
            return False
        try:
            return self._conjunction(schemas, where)
        except _Empty:
            return False

    def _conjunction(self, schemas: list[Any], where: str) -> Any:
        parts = _parts({}, schemas)
        if len(parts) > 1:
            parts = _parts({}, [self._target(p) for p in parts])
        if not parts:
            return {}
        if not all(isinstance(p, dict) for p in parts):
            raise SchemaGrammarError(
                "the JSON schema cannot be enforced: an allOf branch that is no object", self.param
            )
        return self._merged_parts(parts, where)

    def _merged_parts(self, parts: list[dict[str, Any]], where: str, branch: bool = False) -> dict[str, Any]:
        """The one schema object asserting every part (each a folded schema object), its unions folded (_Empty where
        it admits no value and is a union's `branch`)."""
        if len(parts) == 1:
            return self._unions(parts[0], where, branch)
        special: dict[str, Any] = {}
        for group, mergeable in zip(_BOUND_GROUPS, _MERGEABLE, strict=True):
            saying = [p for p in parts if p.keys() & group]
            if len(saying) < 2:
                continue
            used = {k for p in saying for k in p.keys() & group}
            if not used <= mergeable or (used == {"items"} and any(not _is_schema(p["items"]) for p in saying)):
                raise SchemaGrammarError(
                    f"the JSON schema cannot be enforced: an allOf whose parts use {', '.join(sorted(used))}",
                    self.param,
                )
            special.update(self._merged_group(used, saying, where))
        merged: dict[str, Any] = {}
        for part in parts:
            for key, value in part.items():
                if key in special:
                    continue
                merged[key] = self._merged(key, merged[key], value) if key in merged else value
        merged.update(special)
        if merged.get("additionalProperties") is False and "patternProperties" not in merged:
            undeclared = set(merged.get("required") or ()) - set(merged.get("properties") or ())
            if undeclared:  # required, yet no name outside `properties` allowed
                raise _Empty("the JSON schema cannot be enforced: a required property no schema allows", self.param)
        return self._unions(_values_admitted(merged, self.param, self.search), where, branch)

    def _merged_group(self, used: set[str], parts: list[dict[str, Any]], where: str) -> dict[str, Any]:
        """`items` (each part's, all asserted), or `properties` with `additionalProperties`: a member is each part's
        schema for its name, or that part's `additionalProperties` where it does not list it."""
        if used == {"items"}:
            items = self.conjunction([p["items"] for p in parts], f"{where}.items")
            if items is False:
                raise SchemaGrammarError("the JSON schema cannot be enforced: items that admit nothing", self.param)
            return {"items": items}
        names = list(dict.fromkeys(n for p in parts for n in (p.get("properties") or {})))
        others = [p.get("additionalProperties", True) for p in parts]
        rest = self.conjunction(others, f"{where}.additionalProperties")
        properties: dict[str, Any] = {}
        for name in names:
            schemas = [(p.get("properties") or {}).get(name, other) for p, other in zip(parts, others, strict=True)]
            member = self.conjunction(schemas, f"{where}.properties.{name}")
            if member is not False:
                properties[name] = member
            elif rest is not False:  # left out, the name would fall to additionalProperties
                raise SchemaGrammarError(
                    "the JSON schema cannot be enforced: a property that admits nothing", self.param
                )
            elif any(name in (p.get("required") or ()) for p in parts):
                raise _Empty("the JSON schema cannot be enforced: a required property that admits nothing", self.param)
        out: dict[str, Any] = {"properties": properties}
        if any("additionalProperties" in p for p in parts):
            out["additionalProperties"] = rest
        return out

    def _unions(self, node: dict[str, Any], where: str, branch: bool = False) -> dict[str, Any]:
        """`node` with the assertions beside its `anyOf` (else `oneOf`) folded into each of its branches (a branch
        that then admits nothing left out; none left: _Empty where `node` is a union's `branch`, else each kept
        alone as a SiblingGap); where a branch does not fold, a SiblingGap."""
        if "anyOf" not in node and "oneOf" not in node:
            return node
        key = next((k for k in UNIONS if isinstance(node.get(k), list) and node[k]), None)
        beside = {k: v for k, v in node.items() if k in SIBLING_ASSERTIONS and k != key} if key else {}
        if not beside:
            return node
        branches: list[Any] = node[key]
        if self.copied <= _MAX_COPIED:  # each fold walks the keywords beside (a lone branch's too) once per copy
            self.copied += _size(beside, _MAX_COPIED + 1) * max(1, len(branches) - 1)
        folded: list[Any] = []
        for i, option in enumerate(branches):
            try:
                if self.copied > _MAX_COPIED:
                    raise SchemaGrammarError(f"would copy more than {_MAX_COPIED} schema values into its branches", "")
                one = self.conjunction([beside, option], f"{where}.{key}[{i}]")
            except SchemaGrammarError as exc:
                one = self._gap(where, key, beside, option, str(exc))
            if one is not False:
                folded.append(one)
        if not folded:
            if branch:
                raise _Empty("the JSON schema cannot be enforced: no branch would admit a value", self.param)
            folded = [self._gap(where, key, beside, b, "no branch would admit a value") for b in branches]
        kept = {k: v for k, v in node.items() if k not in beside or k == key}
        return {**kept, key: folded}

    def _listed(self, node: dict[str, Any], where: str, branch: bool) -> dict[str, Any]:
        """`node` whose `const` / `enum` keeps only the values its sibling assertions admit (`_values_admitted`);
        where they admit none and `node` is a union's `branch`, _Empty; where they cannot be checked or admit none,
        a SchemaGrammarError naming the keyword's place when exact, else `node` as it was (the siblings not
        enforced, as xgrammar does) and a SiblingGap."""
        keyword = next((k for k in _VALUE_KEYWORDS if k in node), None)
        if keyword is None or not (node.keys() - set(_VALUE_KEYWORDS)) & SIBLING_ASSERTIONS:
            return node
        try:
            return _values_admitted(node, self.param, self.search)
        except SchemaGrammarError as exc:
            if branch and isinstance(exc, _Empty):
                raise
            reason = str(exc).removeprefix("the JSON schema cannot be enforced: ")
            why = f"'{keyword}' values beside other assertions are written alone ({reason})"
            if self.exact:
                raise SchemaGrammarError(f"the JSON schema cannot be enforced: {why}", f"{where}.{keyword}") from None
            if self.gaps is not None and not any(g.where == where and g.keyword == keyword for g in self.gaps):
                self.gaps.append(SiblingGap(where, keyword, why))
            return node

    def _gap(self, where: str, key: str, beside: dict[str, Any], branch: Any, reason: str) -> Any:
        """`branch` alone, the keyword beside the union that does not fold into it recorded (a SchemaGrammarError
        naming it when exact)."""
        named = (k for k in beside if re.search(rf"(?<![\w$]){re.escape(k)}(?!\w)", reason))
        keyword = next(named, None) or unfolded_keyword(beside, [branch])
        reason = reason.removeprefix("the JSON schema cannot be enforced: ").replace(
            "an allOf whose parts use", "both use"
        )
        reason = reason.replace("an allOf whose branches both say", "both say")
        why = f"'{keyword}' beside '{key}' cannot be folded into each of its branches ({reason})"
        if self.exact:
            raise SchemaGrammarError(f"the JSON schema cannot be enforced: {why}", f"{where}.{keyword}")
        if self.gaps is not None and not any(g.where == where and g.keyword == keyword for g in self.gaps):
            self.gaps.append(SiblingGap(where, keyword, why))
        return branch

    def _folded_value(self, key: str, value: Any, parent: str, branch: bool) -> Any:
        if key in ("const", "enum", "required", "examples", "default"):
            return value
        where = f"{parent}.{key}"
        if key in ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas") and isinstance(
            value, dict
        ):
            return {k: self.fold(v, f"{where}.{k}") for k, v in value.items()}
        if key in UNIONS and isinstance(value, list):
            return self._branches(value, where, branch)
        return self.fold(value, where)

    def _branches(self, branches: list[Any], where: str, branch: bool) -> list[Any]:
        """A union's branches folded, those that admit no value left out (with their gaps: JSON Schema's union
        takes what the others take); where none is left, _Empty when the union's schema is itself a `branch`, else
        each folded again as it was (none left out: the gaps are recorded, or raised when exact)."""
        kept = []
        for i, one in enumerate(branches):
            mark = len(self.gaps) if self.gaps is not None else 0
            try:
                kept.append(self.fold(one, f"{where}[{i}]", branch=not self.settling))
            except _Empty:
                if self.gaps is not None:
                    del self.gaps[mark:]
        if kept or not branches:
            return kept
        if branch:
            raise _Empty("the JSON schema cannot be enforced: no branch would admit a value", self.param)
        self.settling += 1
        try:
            return [self.fold(one, f"{where}[{i}]") for i, one in enumerate(branches)]
        finally:
            self.settling -= 1

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
            return self.fold(branch, self.param + refs[-1][1:].replace("/", "."))
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
                raise _Empty("the JSON schema cannot be enforced: an allOf of disjoint types", self.param)
            return both[0] if len(both) == 1 else both
        if key == "enum" and isinstance(first, list) and isinstance(second, list):
            seconds = {json.dumps(v, sort_keys=True) for v in second}
            both = [v for v in first if json.dumps(v, sort_keys=True) in seconds]
            if not both:
                raise _Empty("the JSON schema cannot be enforced: an allOf of disjoint enums", self.param)
            return both
        if key == "const":
            if numbers and first == second:
                return first
            raise _Empty("the JSON schema cannot be enforced: an allOf of distinct consts", self.param)
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


_VALUE_KEYWORDS = ("const", "enum")


def _values_admitted(schema: dict[str, Any], param: str, search: PatternSearch) -> dict[str, Any]:
    """`schema` whose `const` / `enum` keeps only the values its other assertions admit (xgrammar writes the values
    alone, whatever else the schema says); _Empty where none is left."""
    rest = {k: v for k, v in schema.items() if k not in _VALUE_KEYWORDS}
    if not rest.keys() & SIBLING_ASSERTIONS or not schema.keys() & set(_VALUE_KEYWORDS):
        return schema
    typed = listed_of_type(schema)
    if typed is not None:  # the common case, `type` beside: no validator built
        return schema if typed else _values_kept(schema, lambda v: _of_type(v, schema["type"]), param)
    pattern = rest.pop("pattern", None) if isinstance(rest.get("pattern"), str) else None
    if _mentions(rest, _UNCHECKED):
        raise SchemaGrammarError(
            f"the JSON schema cannot be enforced: enum or const values beside {' or '.join(sorted(_UNCHECKED))}", param
        )
    # imported here: only a merge with listed values needs it (tests/gateway/test_start_imports.py)
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError
    from referencing.exceptions import Unresolvable

    valid = Draft202012Validator(rest).is_valid if rest.keys() & SIBLING_ASSERTIONS else lambda v: True
    try:
        if pattern is None:
            return _values_kept(schema, valid, param)
        return _values_kept(schema, lambda v: valid(v) and (not isinstance(v, str) or search(pattern, v)), param)
    except _Empty:
        raise
    except Unchecked as exc:
        raise SchemaGrammarError(
            f"the JSON schema cannot be enforced: enum or const values beside a pattern not checked ({exc})", param
        ) from None
    except (SchemaError, Unresolvable, RecursionError, TypeError, ValueError, ArithmeticError, AttributeError):
        # a keyword of the wrong kind the doors do not check (`minimum: "x"`, `multipleOf: 0`) fails the validator
        raise SchemaGrammarError(
            "the JSON schema cannot be enforced: enum or const values beside assertions that cannot be checked", param
        ) from None


def _values_kept(schema: dict[str, Any], admits: Callable[[Any], bool], param: str) -> dict[str, Any]:
    """`schema` whose `const` / `enum` keeps only the values `admits`; _Empty where none is left."""
    if "const" in schema and not admits(schema["const"]):
        raise _Empty("the JSON schema cannot be enforced: a const its siblings refuse", param)
    if isinstance(schema.get("enum"), list):
        values = [v for v in schema["enum"] if admits(v)]
        if not values:
            raise _Empty("the JSON schema cannot be enforced: enum values all refused by their siblings", param)
        schema = {**schema, "enum": values}
    return schema


def listed_of_type(schema: dict[str, Any]) -> bool | None:
    """For a schema whose only assertion beside its `const` / `enum` is a `type` (a name or a list of names): whether
    every value it lists has that type; None for any other schema."""
    kind = schema.get("type")
    others = schema.keys() - {"type", *_VALUE_KEYWORDS}
    if not (isinstance(kind, (str, list)) and not others & SIBLING_ASSERTIONS):
        return None
    listed = [schema["const"]] if "const" in schema else schema.get("enum")
    return isinstance(listed, list) and all(_of_type(v, kind) for v in listed)


_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "boolean": (bool,), "null": (type(None),), "array": (list,), "object": (dict,),
    "number": (int, float),
}  # fmt: skip


def _of_type(value: Any, kind: str | list[Any]) -> bool:
    """Whether a JSON value has the type `kind` names (or one of them): JSON Schema's, where 1.0 is an integer and
    `true` no number."""
    if isinstance(kind, list):
        return any(_of_type(value, k) for k in kind)
    if isinstance(value, bool):
        return kind == "boolean"
    if kind == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    return isinstance(kind, str) and isinstance(value, _PYTHON_TYPES.get(kind, ()))


_UNCHECKED = frozenset({"pattern", "patternProperties", "propertyNames", "format"})
"""Keywords the values are not checked against, but a `pattern` of the schema itself (ecma_patterns.py): jsonschema
searches the others' patterns with Python's `re`, which backtracks exponentially on a hostile one (`^(a+)+$`
against 28 `a`s and a `!`: 7 s of CPU), and does not check a `format`."""


def _mentions(value: Any, keys: frozenset[str]) -> bool:
    """Whether `value` holds an object with one of `keys` at any depth."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if item.keys() & keys:
                return True
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _size(value: Any, most: int) -> int:
    """How many JSON values `value` holds, counted up to `most`."""
    count, stack = 0, [value]
    while stack and count < most:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return count


def _is_schema(value: Any) -> bool:
    return isinstance(value, (dict, bool))
