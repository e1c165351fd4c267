"""Declared body fields: each field's type, bounds and choices written once, read by the validator and /openapi.json.

`Fields` (fields.py) reads a body only through its object's `Obj` declaration (reading an undeclared key is a
programming error), and `gateway/api/openapi.py` turns the same declarations into JSON schemas. JSON null means
"not given" for every optional field, so optional fields accept null in the schema too.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, ClassVar

Schema = dict[str, Any]
Refs = dict[str, Schema]
"""Component name → schema: the objects a schema refers to, filled while building it."""


@dataclass(frozen=True)
class Field:
    """One field of a body: how the validator reads it and what the document says about it."""

    type: str
    """JSON type: string, integer, number, boolean, object, array; "any" for free JSON."""
    doc: str = ""
    required: bool = False
    default: Any = None
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] = ()
    pattern: str | None = None
    max_items: int | None = None
    min_items: int = 0
    items: Obj | Variants | Schema | None = None
    """An array's items: a declared object or a plain schema."""
    obj: Obj | Variants | None = None
    """An object field's own declaration."""
    alternatives: tuple[Obj | Variants | Schema, ...] = ()
    """Other shapes the field also takes (a string, or an array of parts)."""
    extra: Schema = field(default_factory=dict)
    """Further schema keywords the validator enforces (maxProperties, ...)."""
    refused_unless: Any = None
    refused: str | None = None
    """Why the field is refused (400) when given with a value other than null or `refused_unless`."""

    def schema(self, refs: Refs) -> Schema:
        """The JSON schema of this field's accepted values (null included when optional)."""
        if self.refused is not None:
            allowed = [{"type": "null"}] + ([{"const": self.refused_unless}] if self.refused_unless is not None else [])
            return {"anyOf": allowed, "description": f"Not supported: {self.refused}."}
        shapes = [self._own_schema(refs), *(as_schema(a, refs) for a in self.alternatives)]
        if not self.required:
            shapes.append({"type": "null"})
        out: Schema = shapes[0] if len(shapes) == 1 else {"anyOf": shapes}
        if self.doc:
            out = {**out, "description": self.doc}
        if self.default is not None:
            out = {**out, "default": self.default}
        return out

    def _own_schema(self, refs: Refs) -> Schema:
        if self.obj is not None:
            return self.obj.ref(refs)
        if self.type == "any":
            return {}
        out: Schema = {"type": self.type}
        if self.choices:
            out["enum"] = list(self.choices)
        if self.pattern:
            out["pattern"] = self.pattern
        if self.lo is not None:
            out["minimum"] = self.lo
        if self.hi is not None:
            out["maximum"] = self.hi
        if self.type == "array":
            if self.items is not None:
                out["items"] = as_schema(self.items, refs)
            if self.max_items is not None:
                out["maxItems"] = self.max_items
            if self.min_items:
                out["minItems"] = self.min_items
        return {**out, **self.extra}


@dataclass(frozen=True)
class Obj:
    """A declared JSON object: its fields by key; unknown keys are ignored (vLLM's and SGLang's policy)."""

    name: str
    fields: dict[str, Field]
    doc: str = ""
    extra: Schema = field(default_factory=dict)
    """Further schema keywords the validator enforces on the whole object (maxProperties, ...)."""

    @cached_property
    def optional_defaults(self) -> dict[str, Any]:
        """Each optional field's default (what reading it gives when the body leaves it out), worked out once."""
        return {k: f.default for k, f in self.fields.items() if not f.required}

    def field(self, key: str) -> Field:
        try:
            return self.fields[key]
        except KeyError:
            raise KeyError(f"{self.name} declares no field {key!r}: declare it before reading it") from None

    def ref(self, refs: Refs) -> Schema:
        """A reference to this object's schema, which is added to `refs` once."""
        if self.name not in refs:
            refs[self.name] = {}  # taken before the fields, so a recursive declaration ends
            refs[self.name] = self.schema(refs)
        return {"$ref": f"#/components/schemas/{self.name}"}

    def schema(self, refs: Refs) -> Schema:
        out: Schema = {"type": "object", "properties": {k: f.schema(refs) for k, f in self.fields.items()}}
        required = [k for k, f in self.fields.items() if f.required]
        if required:
            out["required"] = required
        if self.doc:
            out["description"] = self.doc
        return {**out, **self.extra}


@dataclass(frozen=True)
class Variants:
    """Objects told apart by one key (their `type`), each case with its own declaration."""

    key: str
    cases: dict[str, Obj]
    default: str | None = None
    """The case of an object that names none."""
    fields: ClassVar[dict[str, Field]] = {}
    """No fields of its own (its cases have them; its key's declaration is `field`'s)."""
    optional_defaults: ClassVar[dict[str, Any]] = {}

    def field(self, key: str) -> Field:
        if key != self.key:
            raise KeyError(f"read {key!r} after narrowing to a case of {self.key!r}")
        return self._key_field

    @cached_property
    def _key_field(self) -> Field:
        """The declaration of the key that names the case, built once."""
        return Field("string", required=self.default is None, default=self.default, choices=tuple(self.cases))

    def ref(self, refs: Refs) -> Schema:
        cases = {case.name: case for case in self.cases.values()}  # a declaration may serve several cases
        return {"anyOf": [case.ref(refs) for case in cases.values()]}


def as_schema(shape: Obj | Variants | Schema, refs: Refs) -> Schema:
    return shape.ref(refs) if isinstance(shape, Obj | Variants) else shape


def string(
    doc: str = "",
    *,
    required: bool = False,
    default: str | None = None,
    choices: tuple[str, ...] = (),
    pattern: str | None = None,
) -> Field:
    return Field("string", doc, required, default, choices=choices, pattern=pattern)


def integer(lo: int, hi: int, default: int | None = None, doc: str = "", *, required: bool = False) -> Field:
    return Field("integer", doc, required, default, lo=lo, hi=hi)


def number(lo: float, hi: float, default: float, doc: str = "") -> Field:
    return Field("number", doc, default=default, lo=lo, hi=hi)


def boolean(default: bool | None = None, doc: str = "") -> Field:
    return Field("boolean", doc, default=default)


def array(
    items: Obj | Variants | Schema, max_items: int, doc: str = "", *, required: bool = False, min_items: int = 0
) -> Field:
    return Field("array", doc, required, items=items, max_items=max_items, min_items=min_items)


def obj(decl: Obj | Variants, doc: str = "", *, required: bool = False) -> Field:
    return Field("object", doc, required, obj=decl)


def free_object(doc: str = "", *, required: bool = False) -> Field:
    return Field("object", doc, required)


def refused(reason: str, unless: Any = None) -> Field:
    return Field("any", refused=reason, refused_unless=unless)


def either(first: Field, *alternatives: Obj | Variants | Schema) -> Field:
    """`first`, or one of the other shapes."""
    return replace(first, alternatives=first.alternatives + alternatives)
