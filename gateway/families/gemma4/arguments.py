"""A call's arguments in Gemma 4's object notation as structural-tag formats (xgrammar 0.2.7 / 0.2.8).

`{key:value,…}` with bare keys, strings between two `<|"|>` TOKENS (`token` formats by id, the raw text
between them `any_tokens` excluding every special token), numbers as regexes, true / false /
null, arrays and nested objects, sent as one EBNF (`gateway.grammars.ebnf_formats`: a format object held in several
places is one rule there, referred to). Formats have no references of their own, so a schema is spelled out whole:
* a local `$ref` (`#`, `#/$defs/X`, any JSON pointer into the tool's parameters) is inlined, the keywords beside it
  folded with its target (both asserted: `gateway.grammars.conjoined`; where that is not exact, a SchemaGrammarError
  naming the keyword under strict, else the keywords in place of the target's); a reference to
  itself (a recursive schema), a remote one or one that does not resolve has no format (None);
* a schema with no `type` (nor literal, union or `$ref`) is read as xgrammar 0.2.9 reads it for the other families'
  JSON (`implied_type`): an object beside `properties` / `additionalProperties` / `unevaluatedProperties`, else an
  array beside `items` / `prefixItems` / `unevaluatedItems`, else any value, whose type keywords (`minimum`,
  `required`, `minItems`…: TYPE_KEYWORDS) are then not enforced. JSON Schema would take a value of another type there
  too (`{"properties": …}` takes `1`); every family refuses it;
* a free-form object (no `properties`) or value takes any value FREE_DEPTH levels deep (keys
  `FREE_KEY`, so no key can spell a control token); deeper, or past MAX_DEPTH in all, has no format;
* a grammar past MAX_FORMATS formats (inlined references and counted array items add up) has no format.
With no format the call takes any arguments (`free_arguments`; a 400 under strict: grammar.py); so has one whose key
or enum string holds a special token's whole spelling
(a literal is text; one that only begins like a spelling, `<b>` or `<|`, is fine: what follows it is a quote token
or `:`). Properties are written in the schema's declared order with `,` and no space;
every required one must come, optional ones may: after each member that may come first, the rest is a chain of
tails, one rule each (`_members`: linear in the members, where one alternative per first member with a copy of
the members after it spelled n optional ones out n²/2 times). A required name that `properties` does not list is
written after them with the schema `additionalProperties` gives it (absent: any value), declared as the JSON
grammars declare it (`gateway.grammars.required`, after the union fold and a `$ref`'s fold); where it cannot be
(`additionalProperties: false`…), a SchemaGrammarError naming the `required` under strict, else the object as before.
Names `properties` does not list are written as xgrammar 0.2.9 writes them (`others_schema`): beside
`additionalProperties` (else `unevaluatedProperties`) `true` or a schema, any number after the declared members,
named as the XML styles' free names less the declared ones (`free_names.free_name_rules`), typed by that schema
(without `properties` too, where the schema says something: else FREE_KEY names of free values); none where
neither is said or it is false (`{"unevaluatedProperties": false}`: `{}`).

Bounds hold as in the other families' JSON (xgrammar's own conversion of the keywords): a number's `minimum`,
`maximum` (exclusive too) and `multipleOf` as xgrammar's EBNF of that number; a string's `format` (its raw pattern, `string_formats.raw_string_pattern`) or `pattern` as a `regex`
between the quotes (full match, as xgrammar reads a schema's pattern); one that could write the first character of a
special token's spelling is narrowed not to (`safe_json.cheaply_narrowed`), or where it cannot be (a literal `<`, a
count past 4), like a pattern xgrammar cannot use, dropped and the string is free; an array's `minItems` / `maxItems` spelled out item by item up to MAX_COUNTED items (a larger bound is not
kept). A string's `minLength` / `maxLength` are not kept: a counted regex over a whole vocabulary compiles slowly
(`[^<]{0,40}` alone: ~0.8 s on Qwen3's, bench/RESULTS.md). Under the tool's `strict: true` nothing is left out
silently: a keyword not kept (those, NOT_KEPT, a bound xgrammar cannot convert, a type's keyword in a schema written as any value) is a SchemaGrammarError naming its place (stricter
than the JSON grammars, which refuse only a string keyword there: unenforced.py), and a pattern is narrowed whatever
its count. The keywords beside an `anyOf` / `oneOf` are folded into each branch (`_union`); where they cannot be,
best effort drops them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from gateway.families.json_pointer import resolve_pointer
from gateway.grammars.all_of import SIBLING_ASSERTIONS, UNIONS, admitted_values, folded_branch, unfolded_keyword
from gateway.grammars.conjoined import conjoined
from gateway.grammars.ebnf_formats import EbnfWriter
from gateway.grammars.ecma_patterns import PatternSearch
from gateway.grammars.free_names import free_name_rules
from gateway.grammars.json import ARRAY_SIGNS, OBJECT_SIGNS, SchemaGrammarError, compact_json_ebnf
from gateway.grammars.patterns import narrowed
from gateway.grammars.required import declared_required, undeclared
from gateway.grammars.safe_json import (
    SUBSCHEMA_KEYS,
    SUBSCHEMA_MAPS,
    cheaply_narrowed,
    holds_spelling,
    may_write,
    usable_pattern,
)
from gateway.grammars.string_formats import raw_string_pattern

Format = dict[str, Any]
MAX_DEPTH = 6
FREE_DEPTH = 3
MAX_FORMATS = 5000
FREE_KEY = r"[A-Za-z0-9_$@.\-]+"
INTEGER = r"-?(0|[1-9][0-9]*)"
NUMBER = r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?"
CHARS_PER_FORMAT = 100
"""Spelled-out text that weighs one format where it is copied (MAX_FORMATS: at most ~500 KB of copies a tool)."""
MAX_COUNTED = 16
"""The largest `minItems` / `maxItems` spelled out (each counted item is a copy of the item's formats)."""
_NUMBER_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
NOT_KEPT = {
    None: ("allOf", "unevaluatedProperties", "unevaluatedItems"),
    "string": ("minLength", "maxLength"),
    "array": ("prefixItems",),
    "object": ("minProperties", "maxProperties", "propertyNames", "patternProperties"),
}
"""Keywords no format here enforces (the rest of the schema is), any schema's (None) and a type's (each asserts
nothing of another type's value; all of them where no type is said nor read, `implied_type`): a SchemaGrammarError
under strict. Those no family's grammar enforces (`not`, `if`, …) are refused before (gateway/grammars/unenforced.py)."""
TYPE_KEYWORDS = ("required", "minProperties", "maxProperties", "propertyNames", "patternProperties", "minItems",
                 "maxItems", "pattern", "format", "minLength", "maxLength", *_NUMBER_BOUNDS)  # fmt: skip
"""Keywords that assert something of one type's values: in a schema written as any value (no `type` said nor read)
none is enforced, as in xgrammar's reading; a SchemaGrammarError under strict."""


def _const(text: str) -> Format:
    return {"type": "const_string", "value": text}


def _seq(*elements: Format) -> Format:
    return elements[0] if len(elements) == 1 else {"type": "sequence", "elements": list(elements)}


def _or(elements: list[Format]) -> Format:
    return elements[0] if len(elements) == 1 else {"type": "or", "elements": elements}


class _TooLarge(Exception):
    """The grammar would pass MAX_FORMATS formats."""


class ArgumentFormats:
    """Formats for values of a schema; `quote` is the `<|"|>` token format, `raw` a string's body, `spellings` the
    special tokens' (no literal may hold one; no bounded string may write their first characters, `firsts`)."""

    def __init__(self, quote: Format, raw: Format, spellings: tuple[str, ...]):
        self.quote = quote
        self.raw = raw
        self.spellings = spellings
        self.firsts = "".join(sorted({s[0] for s in spellings}))
        self._root: Any = None
        self._inlining: list[str] = []
        self._formats = 0
        self._strict = False
        self._search = PatternSearch()

    def arguments(self, schema: Any, param: str = "", strict: bool = False) -> Format | None:
        """The `{…}` of a call whose parameters are `schema` (at `param` in the request) as one EBNF (`ebnf_formats`:
        a format object used in several places, such as an object's member tails, written once), or None when it
        cannot be spelled out. `strict`: a keyword these formats cannot keep is a SchemaGrammarError naming it."""
        if not isinstance(schema, dict) or schema.get("type") != "object":
            return None
        self._root, self._inlining, self._formats, self._strict = schema, [], 0, strict
        self._search = PatternSearch()
        try:
            value = self._value(schema, 0, param)
        except _TooLarge:
            return None
        return None if value is None else {"type": "grammar", "grammar": EbnfWriter().grammar(value)}

    def free_arguments(self) -> Format | None:
        """Any arguments `{key:value,…}`, values nested FREE_DEPTH levels deep or as deep as fits in MAX_FORMATS (a
        vocabulary of thousands of special tokens, which every string excludes): what a schema that cannot be spelled
        out keeps, so that a call the grammar takes is one the parser reads; None when not even one level fits."""
        for levels in range(FREE_DEPTH, 0, -1):
            self._formats = 0
            try:
                return {"type": "grammar", "grammar": EbnfWriter().grammar(self._containers(0, levels)[1])}
            except _TooLarge:
                continue
        return None

    def _dropped(self, where: str, keyword: str, why: str = "is not enforced") -> None:
        """A keyword at `where` these formats do not keep: under strict, a SchemaGrammarError naming it."""
        if self._strict:
            raise SchemaGrammarError(
                f"a strict schema's '{keyword}' {why} in this model's call notation; remove it, or set strict false "
                "for best effort",
                f"{where}.{keyword}",
            )

    def _keywords_kept(self, schema: dict[str, Any], where: str) -> None:
        """`_dropped` for the first keyword of `schema` in NOT_KEPT that applies to its type (`not_kept`)."""
        keyword = not_kept(schema)
        if keyword is not None:
            self._dropped(where, keyword)

    def _value(self, schema: Any, depth: int, where: str) -> Format | None:
        if schema is True:  # the schema any value matches, as `{}`
            schema = {}
        if not isinstance(schema, dict) or depth > MAX_DEPTH:
            return None
        self._formats += 1
        if self._formats > MAX_FORMATS:
            raise _TooLarge
        if self._strict:
            self._keywords_kept(schema, where)
        if "$ref" in schema:
            return self._reference(schema, depth, where)
        if (implied := implied_type(schema)) is not None:
            schema = {**schema, "type": implied}  # read as xgrammar reads it: the other families' JSON agree
        if not {"type", "enum", "const", "anyOf", "oneOf"} & schema.keys():
            return self._free(depth)
        if "anyOf" in schema or "oneOf" in schema:
            return self._union(schema, depth, where)
        if "enum" in schema or "const" in schema:
            return self._literals(self._listed(schema, where), depth)
        kind = schema.get("type")
        if isinstance(kind, list):
            return self._any([{**schema, "type": k} for k in kind], depth, [where] * len(kind))
        build: dict[str, Callable[[], Format | None]] = {
            "string": lambda: _seq(self.quote, self._string_body(schema, where), self.quote),
            "integer": lambda: self._number(schema, INTEGER, where),
            "number": lambda: self._number(schema, NUMBER, where),
            "boolean": lambda: _or([_const("true"), _const("false")]),
            "null": lambda: _const("null"),
            "array": lambda: self._array(schema, depth, where),
            "object": lambda: self._object(schema, depth, where),
        }
        return build[kind]() if kind in build else None

    def _reference(self, schema: dict[str, Any], depth: int, where: str) -> Format | None:
        """A local `$ref` inlined, the keywords beside it folded with its target (`conjoined`: both asserted, as
        the JSON grammars fold a `required` beside one); None for a recursive, remote or dangling one."""
        ref = schema["$ref"]
        target = resolve_pointer(self._root, ref) if isinstance(ref, str) and ref not in self._inlining else None
        if not isinstance(target, dict):
            return None
        beside = {k: v for k, v in schema.items() if k != "$ref"}
        merged = {**target, **beside}  # a target that is a `$ref` too: followed next, with these beside it
        if beside.keys() & SIBLING_ASSERTIONS and "$ref" not in target:
            try:
                merged, reason = conjoined([target, beside], where), "no value matches both"
            except SchemaGrammarError as exc:
                merged, reason = None, str(exc).removeprefix("the JSON schema cannot be enforced: ")
            if not isinstance(merged, dict):
                keyword = "required" if "required" in beside else unfolded_keyword(beside, [target])
                names = f"{json.dumps(beside['required'], ensure_ascii=False)} " if keyword == "required" else ""
                self._dropped(where, keyword, f"{names}beside '$ref' is not folded with its target {ref} ({reason})")
                merged = {**target, **beside}
        self._inlining.append(ref)
        try:
            return self._value(merged, depth, where)
        finally:
            self._inlining.pop()

    def _free(self, depth: int, levels: int = FREE_DEPTH) -> Format | None:
        """Any value, nested at most `levels` deep: strings, numbers, literals, arrays, objects with FREE_KEY keys."""
        if depth > MAX_DEPTH:
            return None
        scalars = [
            _seq(self.quote, self.raw, self.quote),
            {"type": "regex", "pattern": NUMBER},
            _or([_const("true"), _const("false"), _const("null")]),
        ]
        return _or([*scalars, *self._containers(depth, levels)])

    def _containers(self, depth: int, levels: int) -> list[Format]:
        """An array and an object of free values `levels` deep ([] when no level is left)."""
        inner = self._free(depth + 1, levels - 1) if levels else None
        if inner is None:
            return []
        self._formats += 4 * _count_formats(inner)  # written four times: first and later items, first and later members
        if self._formats > MAX_FORMATS:
            raise _TooLarge
        member = _seq({"type": "regex", "pattern": FREE_KEY}, _const(":"), inner)
        return [_seq(_const("["), _counted(inner), _const("]")), _seq(_const("{"), _counted(member), _const("}"))]

    def _union(self, schema: dict[str, Any], depth: int, where: str) -> Format | None:
        """An `anyOf` / `oneOf` (`oneOf` read as `anyOf`: unenforced.py refuses a strict one not shown exclusive). The
        keywords beside it that assert something (SIBLING_ASSERTIONS) hold for every branch, so each branch (a
        local `$ref` one its target) is folded with them (`all_of.folded_branch`, as the JSON grammars fold them); one
        that then admits no value (disjoint types, listed values its keywords all refuse) is left out. A branch that
        cannot be folded exactly (two parts saying `prefixItems`…) is kept alone, without them: under strict, a
        SchemaGrammarError naming the keyword."""
        key = "anyOf" if "anyOf" in schema else "oneOf"
        options = schema[key] if isinstance(schema[key], list) and schema[key] else None
        if options is None:
            return None
        beside = {k: v for k, v in schema.items() if k in SIBLING_ASSERTIONS and k != key}
        chosen: list[tuple[int, Any, Any, Any]] = []
        empty: list[tuple[int, Any, Any, Any]] = []  # branches whose listed values are all refused: no value
        for i, option in enumerate(options):
            ref = option.get("$ref") if beside and isinstance(option, dict) else None
            target = self._target(option) if beside else option
            branch = folded_branch(beside, target, where) if beside and target is not None else option
            if branch is False:
                continue  # with the keywords beside the union it admits no value (disjoint types…)
            if branch is None:
                self._dropped(
                    where, unfolded_keyword(beside, options), f"beside '{key}' cannot be merged into its branches"
                )
                branch, ref = option, None
            nothing = isinstance(branch, dict) and admitted_values(branch, self._search) == []
            (empty if nothing else chosen).append((i, option, branch, ref))
        formats: list[Format] = []
        for i, option, branch, ref in chosen or empty:  # none admitting a value: each as it is (`_listed`)
            value = self._option(option, branch, ref, depth, f"{where}.{key}[{i}]")
            if value is None:
                return None
            formats.append(value)
        return _or(formats) if formats else None

    def _option(self, option: Any, branch: Any, ref: Any, depth: int, where: str) -> Format | None:
        """A union's branch (`option`, folded as `branch`) written, its `$ref` target (`ref`) inlined there."""
        if isinstance(ref, str) and branch is not option:
            self._inlining.append(ref)  # the target inlined here: a reference back to it is recursion
        try:
            return self._value(branch, depth, where)
        finally:
            if isinstance(ref, str) and branch is not option:
                self._inlining.pop()

    def _target(self, option: Any) -> Any:
        """A union's branch, a local `$ref` one its target with the branch's other keywords (as `_reference`
        merges them); None for a recursive, remote or dangling reference."""
        if not isinstance(option, dict) or "$ref" not in option:
            return option
        ref = option["$ref"]
        target = resolve_pointer(self._root, ref) if isinstance(ref, str) and ref not in self._inlining else None
        return {**target, **{k: v for k, v in option.items() if k != "$ref"}} if isinstance(target, dict) else None

    def _any(self, options: list[Any] | None, depth: int, wheres: list[str]) -> Format | None:
        formats = [self._value(o, depth, w) for o, w in zip(options, wheres, strict=True)] if options else [None]
        return None if any(f is None for f in formats) else _or(formats)

    def _listed(self, schema: dict[str, Any], where: str) -> Any:
        """A literal schema's values that its other keywords admit (`all_of.admitted_values`, as the JSON grammars
        keep them); where none is, or they cannot be checked, all of them, those keywords not kept (`_dropped`)."""
        listed = schema["enum"] if "enum" in schema else [schema["const"]]
        admitted = admitted_values(schema, self._search) if isinstance(listed, list) else listed
        if admitted:
            return admitted
        keyword = "enum" if "enum" in schema else "const"
        self._dropped(where, keyword, "values are written without the keywords beside them (none or not checked)")
        return listed

    def _literals(self, values: Any, depth: int) -> Format | None:
        if not isinstance(values, list) or not values:
            return None
        formats: list[Format] = []
        strings: list[Format] = []  # between one pair of quotes: xgrammar compiles the texts as one trie, where
        # each in quotes of its own (10,000 values) took ~1.8 s to compile on Qwen3's vocabulary
        for v in values:
            if isinstance(v, str) and holds_spelling(v, self.spellings):
                return None  # written as text, it would spell a control token
            if isinstance(v, str):
                if not strings:
                    formats.append(_seq(self.quote, {"type": "or", "elements": strings}, self.quote))
                strings.append(_const(v))
            elif (literal := self._literal(v, depth)) is not None:
                formats.append(literal)
            else:
                return None
        return _or(formats)

    def _literal(self, value: Any, depth: int) -> Format | None:
        """One value written as itself (a const or enum object or array spelled out member by member); None where a
        string or key would spell a special token, a key cannot be written bare, or it nests past MAX_DEPTH."""
        if value is None or isinstance(value, (bool, int, float)):
            return _const(
                "null" if value is None else "true" if value is True else "false" if value is False else repr(value)
            )
        if isinstance(value, str):
            return None if holds_spelling(value, self.spellings) else _seq(self.quote, _const(value), self.quote)
        if depth >= MAX_DEPTH or not isinstance(value, (list, dict)):
            return None
        if isinstance(value, list):
            parts = [self._literal(v, depth + 1) for v in value]
        else:
            parts = [self._literal_member(k, v, depth + 1) for k, v in value.items()]
        if any(p is None for p in parts):
            return None
        self._formats += len(parts)
        if self._formats > MAX_FORMATS:
            raise _TooLarge
        opening, closing = ("[", "]") if isinstance(value, list) else ("{", "}")
        written: list[Format] = [_const(opening)]
        for i, part in enumerate(parts):
            written += [_const(","), part] if i else [part]
        return _seq(*written, _const(closing))

    def _literal_member(self, key: str, value: Any, depth: int) -> Format | None:
        """`key:value` of an object written as itself; None where the key cannot be written bare."""
        written = self._literal(value, depth) if self._bare_key(key) else None
        return None if written is None else _seq(_const(f"{key}:"), written)

    def _string_body(self, schema: dict[str, Any], where: str) -> Format:
        """A string's text between the quotes: its format's raw pattern or its pattern (`raw_string_pattern`; narrowed
        where it could write a special token's first character and counts little, `safe_json.cheaply_narrowed`), or
        any text (a pattern dropped so: `_dropped`)."""
        pattern = raw_string_pattern(schema, where, self._strict)
        usable = pattern is not None and usable_pattern(pattern, f"{where}.pattern", self._strict)
        if usable and may_write(pattern, self.firsts):
            pattern = narrowed(pattern, self.firsts) if self._strict else cheaply_narrowed(pattern, self.firsts)
            if pattern is None:
                self._dropped(where, "pattern", "may write a special token's first character and cannot be narrowed")
        return {"type": "regex", "pattern": pattern} if usable and pattern is not None else self.raw

    def _array(self, schema: dict[str, Any], depth: int, where: str) -> Format | None:
        # no `items`: any items, as JSON Schema says (xgrammar 0.2.9 beside `maxItems` takes none: `[]` alone)
        item = self._value(schema.get("items", True), depth + 1, f"{where}.items")
        if item is None:
            return None
        low, high = _count(schema, "minItems"), _count(schema, "maxItems")
        if low > MAX_COUNTED:
            self._dropped(where, "minItems", f"past {MAX_COUNTED} is not enforced")
            low = 0
        if high is not None and not low <= high <= MAX_COUNTED:
            self._dropped(where, "maxItems", f"past {MAX_COUNTED} is not enforced")
            high = None
        self._formats += (low + (high or 0)) * _count_formats(item)  # the copies spelled out
        if self._formats > MAX_FORMATS:
            raise _TooLarge
        items = _counted(item, low, high)
        return _seq(_const("["), _const("]")) if items is None else _seq(_const("["), items, _const("]"))

    def _object(self, schema: dict[str, Any], depth: int, where: str) -> Format | None:
        if undeclared(schema):  # its required names written too, as the JSON grammars declare them (required.py)
            schema = declared_required(schema, where, self._strict, root=self._root)
        properties = schema.get("properties")
        other = others_schema(schema)
        if not isinstance(properties, dict) or not properties:
            other = True if other is None else other
            if other is False:
                return _seq(_const("{"), _const("}"))
            typed = self._with_free_names(None, [], other, depth, where) if isinstance(other, dict) and other else None
            if typed is not None:  # its members' values typed, named as beside `properties`
                return typed
            containers = self._containers(depth, FREE_DEPTH)
            return containers[1] if containers else None
        required = set(schema.get("required") or [])
        members: list[tuple[Format, bool]] = []
        for key, sub in properties.items():
            value = self._value(sub, depth + 1, f"{where}.properties.{key}")
            if value is None or not self._bare_key(key):
                return None
            members.append((_seq(_const(f"{key}:"), value), key in required))
        declared = self._members(members)
        if other is None or other is False:
            return _seq(_const("{"), declared, _const("}"))
        return self._with_free_names(declared, list(properties), other, depth, where)

    def _with_free_names(
        self, declared: Format | None, names: list[str], other: Any, depth: int, where: str
    ) -> Format | None:
        """`{…}` of the declared members (`_members`; None: no `properties`), then any number of `,name:value` as
        xgrammar writes free names (after the declared ones), the value meeting `other` (additionalProperties'
        schema), the name one of the XML styles' free names and none of `names` (`free_names.free_name_rules`: the
        parser would read a declared name's second value, last wins). Where `other` has no format (a dangling
        `$ref`…), no free name (None without `properties`: the caller writes free values); under strict a
        SchemaGrammarError naming `additionalProperties`."""
        value = self._value(other, depth + 1, f"{where}.additionalProperties")
        if value is None:
            self._dropped(where, "additionalProperties", "cannot be spelled out")
            return None if declared is None else _seq(_const("{"), declared, _const("}"))
        key = {"type": "grammar", "grammar": free_name_rules(names, None, "root")}
        self._formats += _count_formats(key)
        free = _seq(key, _const(":"), value)
        more: Format = {"type": "star", "content": _seq(_const(","), free)}
        if declared is None:
            return _seq(_const("{"), {"type": "optional", "content": _seq(free, more)}, _const("}"))
        if declared.get("type") != "optional":  # a required member: the declared ones come first
            return _seq(_const("{"), declared, more, _const("}"))
        body = _or([_seq(declared["content"], more), _seq(free, more)])
        return _seq(_const("{"), {"type": "optional", "content": body}, _const("}"))

    def _number(self, schema: dict[str, Any], plain: str, where: str) -> Format:
        """An integer or number: xgrammar's EBNF of it where the schema bounds it, else the plain regex."""
        bounds = {
            k: v for k in _NUMBER_BOUNDS if isinstance(v := schema.get(k), (int, float)) and not isinstance(v, bool)
        }
        if not bounds:
            return {"type": "regex", "pattern": plain}
        try:
            ebnf = compact_json_ebnf({"type": schema["type"], **bounds}, where)
        except SchemaGrammarError:
            self._dropped(where, next(iter(bounds)), "cannot be enforced (nor the other bounds beside it)")
            return {"type": "regex", "pattern": plain}
        return {"type": "grammar", "grammar": ebnf}

    def _bare_key(self, key: str) -> bool:
        """Whether a key can be written bare: none of `:,{}` in it, and no special token spelled where it stands
        (`{key:` or `,key:`)."""
        return not any(c in key for c in ":,{}") and not holds_spelling(f"{{{key}:\0,{key}:", self.spellings)

    def _members(self, members: list[tuple[Format, bool]]) -> Format:
        """Declared order, the first written member without a comma, in linear size and flat nesting. The members
        that may come first are those up to the first required one (`last`); after member k of them comes
        `tails[k]`, the later members each as `,member` (optional or not): `tails[k]` is one object that both the
        alternative starting at k and `tails[k - 1]` hold, so the EBNF (`ebnf_formats`) writes it once, as a rule
        that refers to the next; the members after `last` are one flat run."""
        first_required = next((i for i, (_, required) in enumerate(members) if required), None)
        last = len(members) - 1 if first_required is None else first_required
        run = [_later(member, required) for member, required in members[last + 1 :]]
        tails: list[Format] = [_seq(*run) if run else _const("")]
        for member, required in reversed(members[1 : last + 1]):
            tails.append(_seq(_later(member, required), tails[-1]))
        tails.reverse()  # tails[k] follows member k
        self._formats += len(members)  # each member's tail; its alternative and uses are references, not copies
        if self._formats > MAX_FORMATS:
            raise _TooLarge
        alternatives = _or([_seq(member, tails[k]) for k, (member, _) in enumerate(members[: last + 1])])
        return alternatives if first_required is not None else {"type": "optional", "content": alternatives}


def others_schema(schema: dict[str, Any]) -> Any:
    """The schema of the names `properties` does not list, as xgrammar 0.2.9 reads it: `additionalProperties`, else
    `unevaluatedProperties` (its `false`: no other name), else None (beside `properties`: no other name written, as
    xgrammar writes none; without: any name)."""
    return schema.get("additionalProperties", schema.get("unevaluatedProperties"))


def implied_type(schema: dict[str, Any]) -> str | None:
    """The type xgrammar 0.2.9 reads in a schema that says none (nor a literal, a union or a `$ref`): "object" beside
    an OBJECT_SIGNS keyword, else "array" beside an ARRAY_SIGNS one; None otherwise (said, or any value). JSON Schema
    would also admit values of other types (`{"properties": …}` takes `1`); every family's grammar reads it so."""
    if {"type", "enum", "const", "anyOf", "oneOf", "$ref"} & schema.keys():
        return None
    return "object" if OBJECT_SIGNS & schema.keys() else "array" if ARRAY_SIGNS & schema.keys() else None


def not_kept(schema: dict[str, Any]) -> str | None:
    """The first keyword of `schema` in NOT_KEPT that applies to its type: a list of types has each checked as a
    schema of its own, a `$ref` its target merged, a literal is itself; with no type said nor read
    (`implied_type`), all apply, and in a schema written as any value the TYPE_KEYWORDS too."""
    kind = schema.get("type", implied_type(schema))
    if isinstance(kind, str):
        kinds: tuple[str | None, ...] = (None, kind)
    elif {"type", "$ref", "enum", "const"} & schema.keys():
        kinds = (None,)
    else:
        kinds = tuple(NOT_KEPT)
    found = next((k for each in kinds for k in NOT_KEPT.get(each, ()) if k in schema), None)
    if found is None and kind is None and not {"$ref", "enum", "const", "anyOf", "oneOf"} & schema.keys():
        found = next((k for k in TYPE_KEYWORDS if k in schema), None)
    return found


def kept_under_strict(parameters: Any) -> bool:
    """False where a schema anywhere in `parameters` (its `$defs` too) has a keyword these formats do not keep
    (`not_kept`, a count past MAX_COUNTED), which a strict build refuses; True otherwise (the build decides the
    rest: a recursive `$ref`, a pattern that cannot be narrowed…). A union's branch is judged as `_union` builds
    it, with the keywords beside the union folded in (`_branches`)."""
    stack: list[tuple[Any, Any]] = [(parameters, parameters)]  # each schema, and the schema its keywords are judged in
    while stack:
        schema, judged = stack.pop()
        if isinstance(schema, list):
            stack += [(s, s) for s in schema]
            continue
        if not isinstance(schema, dict):
            continue
        counts = [c for c in (schema.get("minItems"), schema.get("maxItems")) if isinstance(c, int)]
        if (isinstance(judged, dict) and not_kept(judged) is not None) or any(c > MAX_COUNTED for c in counts):
            return False
        stack += [p for k in SUBSCHEMA_KEYS if k in schema for p in _branches(schema, k)]
        stack += [(sub, sub) for k in SUBSCHEMA_MAPS if isinstance(schema.get(k), dict) for sub in schema[k].values()]
    return True


def _branches(schema: dict[str, Any], key: str) -> list[tuple[Any, Any]]:
    """`schema[key]`, and for a union's branches each folded with the keywords beside the union where that is exact
    (as `_union` builds it: a branch saying only `required` is then an object's; False where it admits no value)."""
    beside = {k: v for k, v in schema.items() if k in SIBLING_ASSERTIONS and k != key}
    if key not in UNIONS or not beside or not isinstance(schema[key], list):
        return [(schema[key], schema[key])]
    return [(o, o if (f := folded_branch(beside, o, "")) is None else f) for o in schema[key]]


def _later(member: Format, required: bool) -> Format:
    """A member after the first written one: `,member`, optional unless `required`."""
    later = _seq(_const(","), member)
    return later if required else {"type": "optional", "content": later}


def _counted(item: Format, low: int = 0, high: int | None = None) -> Format | None:
    """`low` to `high` (None: unbounded) `item`s separated by `,`; None for none at all (`high` 0)."""
    if high == 0:
        return None
    later = _seq(_const(","), item)
    tail: Format | None = {"type": "star", "content": later} if high is None else None
    for _ in range(0 if high is None else high - max(low, 1)):  # at most this many more, as nested options
        tail = {"type": "optional", "content": later if tail is None else _seq(later, tail)}
    items = _seq(item, *[later] * (max(low, 1) - 1), *([tail] if tail is not None else []))
    return items if low else {"type": "optional", "content": items}


def _count(schema: dict[str, Any], key: str) -> Any:
    """A non-negative integer keyword (`minItems`, `maxItems`): 0 for a missing minimum, None for a maximum."""
    value = schema.get(key)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return 0 if key.startswith("min") else None


def _count_formats(fmt: Any) -> int:
    """How many formats `fmt` holds (itself included), each CHARS_PER_FORMAT characters of its text (keys, enum
    strings, patterns, excluded token ids) one more: a copy of a long string or of a vocabulary's many special
    token ids costs as much as a copy of many formats."""
    formats, chars = _size(fmt)
    return formats + chars // CHARS_PER_FORMAT


def _size(fmt: Any) -> tuple[int, int]:
    """The formats in `fmt` and the characters of text it holds (an integer as ~8: digits and a comma)."""
    if isinstance(fmt, str):
        return 0, len(fmt)
    if isinstance(fmt, int):
        return 0, 8
    formats, chars = int(isinstance(fmt, dict) and "type" in fmt), 0
    for part in fmt.values() if isinstance(fmt, dict) else fmt if isinstance(fmt, list) else ():
        inner = _size(part)
        formats, chars = formats + inner[0], chars + inner[1]
    return formats, chars
