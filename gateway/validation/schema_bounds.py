"""Bounds on client JSON values and a shape check for the JSON schemas in tools and response_format."""

from __future__ import annotations

import math
import re
from decimal import Decimal
from itertools import repeat
from typing import Any

from gateway.errors import invalid

MAX_DEPTH = 64
"""Nesting of any client-supplied JSON value (schemas, arguments, template kwargs)."""
MAX_NODES = 100_000
MAX_PATTERN_CHARS = 512
MAX_PATTERN_WEIGHT = 256
"""A `pattern`'s expanded size, counted repetitions multiplied out; a repeated group weighs GROUP_FACTOR times more:
xgrammar's compile time grows with it (measured: `^(\\w{16}){16}$` 1.1 s, `^.{1024}$` 2.7 s to build)."""
GROUP_FACTOR = 16
WIDE_ATOM = 4
"""What `.` and a negated class `[^…]` weigh: any character but a few compiles slower than a small class."""
UNBOUNDED_COUNT = 8
"""What `*`, `+` and `{n,}` count as in the weight."""
_COUNT = re.compile(r"\{(\d+)(?:(,)(\d*))?\}")
_GROUP_PREFIX = re.compile(r"\?(?::|=|!|<=|<!|<[A-Za-z_$][\w$]*>)")
_JSON_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_NON_EMPTY_LISTS = ("anyOf", "oneOf")
"""Empty, they admit no value: the grammar would match nothing and the output would not be JSON."""
NUMBER_PLACES = 6
"""Decimal places of the numbers xgrammar writes for a `number` with a range: one holding none of them (`minimum`
1e-7, `maximum` 9e-7) became an empty grammar, and a 200 came back with '{"a": }' as content or tool arguments."""
_SCHEMA_ONE = (
    "additionalProperties",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedProperties",
)
_SUBSCHEMA_KEYS = frozenset((*_SCHEMA_MAPS, *_SCHEMA_LISTS, *_SCHEMA_ONE, "items"))


def check_bounded(value: Any, param: str) -> None:
    """400 when `value` nests deeper than MAX_DEPTH or holds more than MAX_NODES values."""
    stack = [(value, 1)]
    nodes = 0
    while stack:
        v, depth = stack.pop()
        nodes += 1
        if depth > MAX_DEPTH:
            raise invalid(f"'{param}' is nested deeper than {MAX_DEPTH} levels", param)
        if nodes > MAX_NODES:
            raise invalid(f"'{param}' holds more than {MAX_NODES} values", param)
        if isinstance(v, dict):
            stack.extend(zip(v.values(), repeat(depth + 1)))  # (pairs made in C)
        elif isinstance(v, list):
            stack.extend(zip(v, repeat(depth + 1)))


def check_schema(schema: Any, param: str, *, object_root: bool) -> None:
    """400 unless `schema` is shaped like a JSON schema (keywords with the right kinds of values)."""
    check_bounded(schema, param)
    if not isinstance(schema, dict):
        raise invalid(f"'{param}' must be a JSON schema object", param)
    if object_root and schema.get("type", "object") != "object":
        raise invalid(f"'{param}' must be a schema of type 'object'", param)
    stack = [(schema, param)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, bool):
            continue
        if not isinstance(node, dict):
            raise invalid(f"'{where}' must be a schema (an object or a boolean)", where)
        kind = node.get("type")
        if not (kind is None or type(kind) is str and kind in _JSON_TYPES):  # (most: one type's name, or none)
            _check_type(kind, f"{where}.type")
        required = node.get("required")
        if required is not None and not (isinstance(required, list) and all(isinstance(r, str) for r in required)):
            raise invalid(f"'{where}.required' must be an array of strings", f"{where}.required")
        pattern = node.get("pattern")
        if pattern is not None:
            check_pattern(pattern, f"{where}.pattern")
        if kind == "number" and _empty_range(node):
            raise invalid(
                f"'{where}' has a range holding no number of at most {NUMBER_PLACES} decimal places, which is what "
                "the grammar can write",
                where,
            )
        enum = node.get("enum")
        if enum is not None and not isinstance(enum, list):
            raise invalid(f"'{where}.enum' must be an array", f"{where}.enum")
        if node.keys().isdisjoint(_SUBSCHEMA_KEYS):  # (most nodes hold no subschema: one pass in C)
            continue
        for key in _SCHEMA_MAPS:
            sub = node.get(key)
            if sub is None:
                continue
            if not isinstance(sub, dict):
                raise invalid(f"'{where}.{key}' must be an object of schemas", f"{where}.{key}")
            stack.extend((s, f"{where}.{key}.{name}") for name, s in sub.items())
        for key in _SCHEMA_LISTS:
            sub = node.get(key)
            if sub is None:
                continue
            if not isinstance(sub, list):
                raise invalid(f"'{where}.{key}' must be an array of schemas", f"{where}.{key}")
            if not sub and key in _NON_EMPTY_LISTS:
                raise invalid(f"'{where}.{key}' must hold at least one schema", f"{where}.{key}")
            stack.extend((s, f"{where}.{key}[{i}]") for i, s in enumerate(sub))
        for key in _SCHEMA_ONE:
            if key in node:
                stack.append((node[key], f"{where}.{key}"))
        items = node.get("items")
        if isinstance(items, list):  # draft-04 tuple form
            stack.extend((s, f"{where}.items[{i}]") for i, s in enumerate(items))
        elif items is not None:
            stack.append((items, f"{where}.items"))


def _empty_range(node: dict[str, Any]) -> bool:
    """Whether a number schema's bounds leave no multiple of 10^-NUMBER_PLACES between them (its shortest decimal
    spelling, as xgrammar reads it); bounds that are not numbers are left to the grammar builder."""
    low = high = None
    for key, sign in (("minimum", 1), ("exclusiveMinimum", 1), ("maximum", -1), ("exclusiveMaximum", -1)):
        bound = node.get(key)
        exact = Decimal(str(bound)) if isinstance(bound, (int, float)) and not isinstance(bound, bool) else None
        if exact is not None and exact.is_finite():
            scaled = exact.scaleb(NUMBER_PLACES) * sign  # an upper bound negated: rounds like a lower
            step = math.floor(scaled) + 1 if key.startswith("exclusive") else math.ceil(scaled)
            if sign > 0:
                low = step if low is None else max(low, step)
            else:
                high = -step if high is None else min(high, -step)
    return low is not None and high is not None and low > high


def _check_type(value: Any, where: str) -> None:
    names = value if isinstance(value, list) else [value] if value is not None else []
    if not isinstance(value, (str, list, type(None))) or any(
        not isinstance(n, str) or n not in _JSON_TYPES for n in names
    ):
        raise invalid(f"'{where}' must be a JSON type name or an array of them", where)


def check_pattern(pattern: Any, where: str) -> None:
    """400 unless `pattern` is a string, no quantifier in it repeats nothing, and it is short and simple enough to
    compile quickly into a grammar."""
    if not isinstance(pattern, str):
        raise invalid(f"'{where}' must be a string", where)
    if len(pattern) > MAX_PATTERN_CHARS:
        raise invalid(f"'{where}' is longer than {MAX_PATTERN_CHARS} characters", where, "pattern_too_complex")
    if _repeats_nothing(pattern):
        raise invalid(
            f"'{where}' is not an ECMA-262 regular expression: a quantifier has nothing to repeat (at the start, "
            "after '(', '|', an anchor or another quantifier)",
            where,
        )
    if pattern_weight(pattern) > MAX_PATTERN_WEIGHT:
        raise invalid(
            f"'{where}' repeats too much to be enforced quickly (counted repetitions, multiplied out, "
            f"weigh more than {MAX_PATTERN_WEIGHT}; repeated groups weigh {GROUP_FACTOR} times more)",
            where,
            "pattern_too_complex",
        )


def _repeats_nothing(pattern: str) -> bool:
    """Whether a quantifier in `pattern` has nothing to repeat, ECMA-262's SyntaxError (`a{1}{2}`, `a**`, `^*`):
    xgrammar read `a{1}{2}` as `a{2}` and answered by a pattern no JSON Schema validator compiles. One `?` after a
    quantifier makes it lazy."""
    repeatable = lazy = False
    i = 0
    while i < len(pattern):
        c = pattern[i]
        count = _COUNT.match(pattern, i) if c == "{" else None
        if c == "?" and lazy:
            lazy, i = False, i + 1
        elif c in "*+?" or count:
            if not repeatable:
                return True
            repeatable, lazy = False, True
            i = count.end() if count else i + 1
        elif c == "[":
            i = _class_end(pattern, i)
            repeatable, lazy = True, False
        else:
            group = _GROUP_PREFIX.match(pattern, i + 1) if c == "(" else None
            repeatable, lazy = c not in "(|^$", False
            i = group.end() if group else i + (2 if c == "\\" else 1)
    return False


def _class_end(pattern: str, start: int) -> int:
    """The index after the character class opening at `start` (a `]` first in it is a member; escapes skipped)."""
    i = start + 1 + pattern.startswith("^", start + 1)
    i += pattern.startswith("]", i)
    while i < len(pattern) and pattern[i] != "]":
        i += 2 if pattern[i] == "\\" else 1
    return i + 1


def pattern_weight(pattern: str) -> int:
    """The expanded size of a regex: atoms count 1, repetitions multiply (over-approximated, never run)."""
    stack = [0]
    last, last_group = 0, False
    i = 0
    while i < len(pattern):
        c = pattern[i]
        m = _COUNT.match(pattern, i) if c == "{" else None
        if m or c in "*+":
            if m:
                low, comma, high = int(m[1]), m[2], m[3]
                count = max(low, int(high) if high else UNBOUNDED_COUNT) if comma else low
                i = m.end()
            else:
                count, i = UNBOUNDED_COUNT, i + 1
            repeated = last * min(count, 1 << 20) * (GROUP_FACTOR if last_group else 1)
            stack[-1] += repeated - last
            last, last_group = repeated, False
            continue
        if c == "(":
            stack.append(0)
            i += 1
            continue
        if c == ")" and len(stack) > 1:
            last, last_group = stack.pop(), True
            stack[-1] += last
            i += 1
            continue
        atom = 1
        if c == "\\":
            i += 2
        elif c == "[":
            atom = WIDE_ATOM if pattern.startswith("[^", i) else 1
            close = pattern.find("]", i + 2)
            i = len(pattern) if close < 0 else close + 1
        else:
            atom = WIDE_ATOM if c == "." else 1
            i += 1
        if c in "?|^$":
            continue
        last, last_group = atom, False
        stack[-1] += atom
    return sum(stack)
