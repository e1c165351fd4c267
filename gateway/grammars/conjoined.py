"""Schemas asserted together as one, where that is exact: a `$ref`'s target with the keywords beside it, the
`patternProperties` schemas a required name matches (required.py, gemma4/arguments.py).

xgrammar 0.2.9 reads a `$ref` alone: `{"$ref": "#/$defs/A", "required": ["y"]}` took A's objects without `y`, and
`{"$ref": "#/$defs/A", "type": "string"}` A's objects (checked on its grammars: tests/test_required_names.py).
JSON Schema 2019+ asserts both. `conjoined` is all_of.py's exact fold of the schemas as one `allOf`; it resolves no
`$ref` of theirs, so a fold that would leave one beside keywords it did not have (xgrammar would drop them) is not
exact either. `reference_target` follows a local `$ref` through references that say nothing else.
"""

from __future__ import annotations

from typing import Any

from gateway.families.json_pointer import resolve_pointer
from gateway.grammars.all_of import SIBLING_ASSERTIONS, conjunction
from gateway.grammars.json import SchemaGrammarError

_MAX_HOPS = 16


def conjoined(schemas: list[Any], where: str) -> Any:
    """One schema asserting every one of `schemas` (`False` where no value matches them all); a SchemaGrammarError
    naming `where`, saying why, where that is not exact."""
    if any(s is False for s in schemas):
        return False
    folded = conjunction(list(schemas), where)
    if _refs_beside(folded) > sum(_refs_beside(s) for s in schemas):
        raise SchemaGrammarError("the JSON schema cannot be enforced: a $ref merged with other keywords", where)
    return folded


def reference_target(root: Any, ref: Any) -> Any:
    """The schema a local `$ref` in `root` points to, through targets that are only a `$ref` themselves; None where
    it points nowhere or elsewhere (xgrammar's own refusal names it), or loops."""
    seen: list[str] = []
    for _ in range(_MAX_HOPS):
        if not isinstance(ref, str) or ref in seen:
            return None
        seen.append(ref)
        target = resolve_pointer(root, ref)
        if not (isinstance(target, dict) and "$ref" in target and not target.keys() & SIBLING_ASSERTIONS):
            return {} if target is True else target
        ref = target["$ref"]
    return None


def _refs_beside(value: Any) -> int:
    """How many schema objects in `value` say a `$ref` beside an assertion."""
    count, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            count += "$ref" in item and bool(item.keys() & SIBLING_ASSERTIONS)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return count
