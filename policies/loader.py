"""Policy files → Policy objects: YAML read with line marks, `_defaults.yaml` deep-merged under each
tenant, checked against policy.schema.json and then for what a schema cannot say (real dates, unique
tenants, key ids and key hashes). Every error names its file, line and field."""

from __future__ import annotations

import datetime as dt
import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from policies.limits import Limits as LimiterLimits
from policies.policy import DEFAULT_QUEUE_TIMEOUT_S, Globs, Key, Limits, ModelLimits, Policy

if TYPE_CHECKING:
    import jsonschema

SCHEMA_PATH = Path(__file__).with_name("policy.schema.json")
DEFAULTS_FILE = "_defaults.yaml"
SUFFIXES = (".yaml", ".yml")
MAX_FILE_BYTES = 1 << 20
"""A policy file's size at most (a Kubernetes ConfigMap's too): a big file read whole held every reload for seconds."""
MAX_DEPTH = 16
"""Nesting a policy file may have (its deepest field, tools.allow[i], is three levels down)."""
FieldPath = tuple[str | int, ...]


@dataclass(frozen=True)
class PolicyError:
    """One problem in one file; `line` is 1-based, `field` a dotted path like `keys[0].sha256`."""

    file: str
    line: int | None
    field: str | None
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


MAX_REPORTED = 50
"""Problems reported per file at most, then how many more: a file of 100,000 unknown fields logged 100,000 lines at
each reload."""
MAX_MESSAGE = 300
"""Characters of a schema message at most (they quote the value at fault: a list of 100,000 globs, say)."""


class PolicyFileError(Exception):
    """A file that cannot be used; `errors` says every reason (the first MAX_REPORTED, then how many more)."""

    def __init__(self, errors: list[PolicyError]):
        if len(errors) > MAX_REPORTED:
            more = PolicyError(errors[0].file, None, None, f"{len(errors) - MAX_REPORTED} more problems")
            errors = [*errors[:MAX_REPORTED], more]
        super().__init__("\n".join(map(str, errors)))
        self.errors = errors


@dataclass
class Marked:
    """A YAML document as plain data, with the file and line every field came from."""

    value: Any
    marks: dict[FieldPath, tuple[str, int]]


def field_name(path: Iterable[str | int]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


@cache
def schema() -> dict[str, Any]:
    """The JSON Schema of a policy file (after defaults are merged in)."""
    return json.loads(SCHEMA_PATH.read_text())


@cache
def validator() -> jsonschema.Draft202012Validator:
    """The schema's validator, checking formats too (`format: date`, keys[].expires); jsonschema (~0.05 CPU-s to
    import) loads when a policy is first checked."""
    import jsonschema

    return jsonschema.Draft202012Validator(schema(), format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def read_marked(path: Path) -> Marked:
    """Parse one YAML file, keeping each field's line; duplicate keys and non-string keys are errors."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise PolicyFileError([PolicyError(str(path), None, None, f"cannot be read: {exc}")]) from None
    return parse_marked(str(path), data)


def parse_marked(name: str, data: bytes) -> Marked:
    """`data`, the first MAX_FILE_BYTES + 1 bytes of the file `name`, as read_marked reads it."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyFileError([PolicyError(name, None, None, f"cannot be read: {exc}")]) from None
    if len(data) > MAX_FILE_BYTES:
        raise PolicyFileError([PolicyError(name, None, None, f"larger than {MAX_FILE_BYTES >> 20} MiB")])
    try:
        loader = yaml.SafeLoader(text)
    except yaml.reader.ReaderError as exc:  # a character YAML never allows (NUL, other control characters)
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        line = text.count("\n", 0, exc.position) + 1
        raise PolicyFileError([PolicyError(name, line, None, f"not YAML: the character #x{code:04x} is not allowed")])
    try:
        node = loader.get_single_node()
        marks: dict[FieldPath, tuple[str, int]] = {}
        errors: list[PolicyError] = []
        value = _build(loader, node, (), name, marks, errors, set()) if node is not None else None
    except RecursionError:  # the composer's nesting, before _build's own bound
        raise PolicyFileError([PolicyError(name, None, None, f"nested deeper than {MAX_DEPTH} levels")]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise PolicyFileError(
            [PolicyError(name, mark.line + 1 if mark else None, None, f"not YAML: {problem}")]
        ) from None
    finally:
        loader.dispose()
    if errors:
        raise PolicyFileError(errors)
    if not isinstance(value, dict):
        raise PolicyFileError([PolicyError(name, 1, None, "must be a mapping of fields")])
    return Marked(value, marks)


TEXT_FIELDS = frozenset({"sha256", "id", "tenant"})
"""Fields that are text whatever YAML would make of them unquoted: a key hash of 64 decimal digits is an integer to
YAML (and one of digits 0-7 with a leading 0 an octal one, its zeros lost)."""


def _build(
    loader: yaml.SafeLoader, node: yaml.Node, path: FieldPath, file: str, marks, errors, seen: set[int], at: int = 0
) -> Any:
    """The plain value of `node`, each field's line in `marks`, mistakes in `errors`; an alias (a node `seen` before:
    a few lines of them spell billions of nodes) or nesting past MAX_DEPTH is a mistake, not followed. `at`: the line
    of the field whose value `node` is (an alias's node starts where its anchor is)."""
    line = node.start_mark.line + 1
    if id(node) in seen or len(path) > MAX_DEPTH:
        problem = "aliases (*name) are not allowed" if id(node) in seen else f"nested deeper than {MAX_DEPTH} levels"
        errors.append(PolicyError(file, at or line, field_name(path) or None, problem))
        return None
    seen.add(id(node))
    marks[path] = (file, line)
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if not isinstance(key, str):
                errors.append(
                    PolicyError(file, line, field_name(path) or None, f"field names are strings, not {key!r}")
                )
            elif key in out:
                errors.append(PolicyError(file, line, field_name((*path, key)), "appears twice"))
            else:
                out[key] = _build(loader, value_node, (*path, key), file, marks, errors, seen, line)
                marks[(*path, key)] = (file, line)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(loader, item, (*path, i), file, marks, errors, seen) for i, item in enumerate(node.value)]
    if path and path[-1] in TEXT_FIELDS and node.tag != "tag:yaml.org,2002:null" and node.style is None:
        return node.value  # an unquoted hash of digits only (or 0-7: octal) is its text, not a number
    try:
        return loader.construct_object(node, deep=True)
    except ValueError:  # a timestamp-looking scalar that is no date (2027-13-45): the schema says why
        return node.value


REPLACED = frozenset({("limits", "models")})
"""Mappings a tenant's file replaces whole, as lists: `limits.models` is read in order (the first glob a model matches
wins), so a merge would put the defaults' globs before the tenant's own."""


def merged(defaults: Marked | None, own: Marked) -> Marked:
    """`own` deep-merged over `defaults`: mappings merge (but those in REPLACED), anything else (lists too) is
    replaced."""
    if defaults is None:
        return own
    marks = dict(defaults.marks)

    def merge(base: Any, top: Any, path: FieldPath) -> Any:
        if isinstance(base, dict) and isinstance(top, dict) and path not in REPLACED:
            out = dict(base)
            for key, value in top.items():
                out[key] = merge(base.get(key), value, (*path, key))
            return out
        for p in [p for p in marks if p[: len(path)] == path and len(p) > len(path)]:
            del marks[p]  # the default's sub-fields are gone
        marks.update({p: m for p, m in own.marks.items() if p[: len(path)] == path})
        return top

    value = merge(defaults.value, own.value, ())
    marks.update(own.marks)
    return Marked(value, marks)


def _jsonable(value: Any) -> Any:
    """YAML dates as ISO strings (what the schema describes); datetimes stay as they are (and fail)."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    return value


def schema_errors(
    doc: Marked, file: str, found: Iterable[jsonschema.ValidationError] | None = None
) -> list[PolicyError]:
    """What policy.schema.json says is wrong with `doc` (`found`: the schema's errors of it, when already known), each
    at the line of the field at fault."""
    out = []
    for error in validator().iter_errors(_jsonable(doc.value)) if found is None else found:
        path: FieldPath = tuple(error.absolute_path)
        message = error.message
        if error.validator == "additionalProperties":
            allowed = set(error.schema.get("properties", {}))
            for extra in sorted(set(error.instance) - allowed):
                out.append(_at(doc, file, (*path, extra), f"unknown field; allowed: {', '.join(sorted(allowed))}"))
            continue
        if error.validator == "required":
            missing = [r for r in error.validator_value if r not in error.instance]
            for name in missing:
                out.append(_at(doc, file, (*path, name), "is required", where=path))
            continue
        if error.validator == "pattern" and path and path[-1] == "sha256":
            message = "must be 64 hex digits: the SHA-256 of the key (gateway policy hash-key prints it)"
        elif error.validator in ("pattern", "format") and path and path[-1] == "expires":
            message = f"must be a date like 2027-06-30, not {error.instance!r}"
        elif error.validator == "minimum" and error.instance == 0 and path[:1] == ("limits",) and path[-1] in COUNTED:
            message = (
                "must be at least 1: a limit of 0 would refuse every request, and no wait would help "
                "(to stop a tenant, delete its file or its keys: its requests then get 401)"
            )
        elif error.validator == "oneOf" and path == ("audit",):
            message = "must be true, false or {prompts: true|false}"
        elif error.validator in ("maxItems", "maxProperties"):
            message = f"at most {error.validator_value} entries, not {len(error.instance)}"
        elif error.validator == "maxLength":
            message = f"at most {error.validator_value} characters, not {len(error.instance)}"
        if len(message) > MAX_MESSAGE:
            message = message[: MAX_MESSAGE - 1] + "…"
        out.append(_at(doc, file, path, message))
    unique = {(e.file, e.field): e for e in reversed(out)}  # one error per field (pattern and format agree)
    return sorted(unique.values(), key=lambda e: (e.line or 0, e.field or ""))


COUNTED = ("requests_per_minute", "tokens_per_minute", "concurrent_requests", "tokens_per_day")
"""The limits the limiter counts: 0 of one would refuse every request of the tenant."""


def _at(doc: Marked, file: str, path: FieldPath, message: str, where: FieldPath | None = None) -> PolicyError:
    probe = where if where is not None else path
    while probe not in doc.marks and probe:
        probe = probe[:-1]
    source, line = doc.marks.get(probe, (file, None))
    return PolicyError(source, line, field_name(path) or None, message)


def load_policy(path: Path, defaults: Marked | None) -> Policy:
    """One tenant file (with the directory's defaults) as a Policy; PolicyFileError says every problem."""
    return derive_policy(str(path), read_marked(path), defaults)


PARTS_APART = frozenset(
    {"$schema", "$id", "$comment", "title", "description", "type", "additionalProperties", "required", "properties"}
)
"""An object's schema of these keywords alone checks each of its `properties` on its value alone (the rest look at the
names of its fields, never at their values): a field's value valid once is valid in any document that holds it."""


@cache
def stand_ins() -> tuple[dict[FieldPath, tuple[int, Any, bool]], frozenset[FieldPath]]:
    """For each field of policy.schema.json checked apart (its object's schema is of PARTS_APART): its bit in
    `KnownValid`, a small value its schema accepts and whether its object requires it (else a valid one is left out of
    a check); and the paths of the objects whose fields are checked apart."""
    values: dict[FieldPath, tuple[int, Any, bool]] = {}
    apart: set[FieldPath] = set()

    def walk(subschema: Any, path: FieldPath) -> None:
        if not isinstance(subschema, dict) or "properties" not in subschema or not set(subschema) <= PARTS_APART:
            return
        apart.add(path)
        for name, field_schema in subschema["properties"].items():
            check = validator().evolve(schema=field_schema)
            tried = [*field_schema.get("enum", ())[:1], True, 1, "a", [], {}]
            found = [v for v in tried if check.is_valid(v)]
            if found:
                values[(*path, name)] = (len(values), found[0], name in subschema.get("required", ()))
            walk(field_schema, (*path, name))

    walk(schema(), ())
    return values, frozenset(apart)


@dataclass
class KnownValid:
    """The fields found valid of a tenant file's content (`own`) and of the defaults' (`defaults`), as bits of
    `stand_ins()`: a merged document is checked with each such field it holds whole from one file replaced by its
    stand-in (the schema's errors are the same: that field had none), so a change of `_defaults.yaml` does not check
    every tenant's keys again. Each check adds to them: a field held whole from one file with no error under it."""

    own: int = 0
    defaults: int = 0

    def checked(self, doc: Any, own: Any, defaults: Any) -> tuple[Any, list[tuple[FieldPath, int, bool]]]:
        """`doc` (`own` merged over `defaults`) to check, each known-valid field it holds whole from one file stood in
        for; and the fields still checked whole from one file (what a check of it learns: path, bit, whether own)."""
        values, apart = stand_ins()
        learnable: list[tuple[FieldPath, int, bool]] = []
        if () not in apart:
            return doc, learnable

        def lean(value: dict[str, Any], mine: dict[str, Any], base: dict[str, Any], path: FieldPath) -> dict[str, Any]:
            out = {}
            for key, merged_value in value.items():
                at = (*path, key)
                bit, stand_in, required = values.get(at, (-1, None, True))
                both = key in mine and key in base and isinstance(mine[key], dict) and isinstance(base[key], dict)
                if both and at not in REPLACED:  # merged from both files: checked whole, or field by field
                    if at not in apart:
                        out[key] = merged_value
                    elif (fields := lean(merged_value, mine[key], base[key], at)) or required or stand_in != {}:
                        out[key] = fields  # (left out: none but known-valid ones, and {} is valid there)
                    continue
                if bit < 0:
                    out[key] = merged_value
                elif not (self.own if key in mine else self.defaults) >> bit & 1:
                    out[key] = merged_value
                    learnable.append((at, bit, key in mine))
                elif required:
                    out[key] = stand_in
            return out

        return lean(doc, own, defaults if isinstance(defaults, dict) else {}, ()), learnable

    def learn(self, learnable: list[tuple[FieldPath, int, bool]], found: list[jsonschema.ValidationError]) -> None:
        """Add the fields of `learnable` under which the check found no error."""
        faulty = [tuple(e.absolute_path) for e in found]
        for path, bit, mine in learnable:
            if not any(f[: len(path)] == path for f in faulty):
                if mine:
                    self.own |= 1 << bit
                else:
                    self.defaults |= 1 << bit


def derive_policy(file: str, own: Marked, defaults: Marked | None, known: KnownValid | None = None) -> Policy:
    """The tenant file `file`, read as `own`, with the directory's defaults as a Policy (neither is changed: a reload
    derives again from both when the defaults change); PolicyFileError says every problem. `known`: the fields of
    either file found valid before (and to learn), whose check is skipped."""
    doc = merged(defaults, own)
    if known is None:
        errors = schema_errors(doc, file)
    else:
        checked, learnable = known.checked(doc.value, own.value, defaults.value if defaults is not None else None)
        found = list(validator().iter_errors(_jsonable(checked)))
        known.learn(learnable, found)
        errors = schema_errors(doc, file, found)
    value = doc.value
    if not errors:  # the schema held: the shapes below are known
        errors += _repeated_keys(doc, file)
        if not math.isfinite(value.get("limits", {}).get("queue_timeout_s", 0)):
            errors.append(_at(doc, file, ("limits", "queue_timeout_s"), "must be a finite number of seconds"))
    if errors:
        raise PolicyFileError(errors)
    return _policy(value, file)


def _repeated_keys(doc: Marked, file: str) -> list[PolicyError]:
    """A key id, or a key hash, that a file lists twice (which entry a key is, its id and expiry, would be a guess)."""
    errors = []
    keys = doc.value.get("keys", [])
    seen: dict[tuple[str, str], int] = {}
    for i, key in enumerate(keys):
        for field, value in (("id", key["id"]), ("sha256", key["sha256"].lower())):
            if (field, value) in seen:
                what = "key id" if field == "id" else f"key hash (of keys[{seen[field, value]}])"
                errors.append(_at(doc, file, ("keys", i, field), f"the {what} {key[field]!r} appears twice"))
            seen.setdefault((field, value), i)
    return errors


def _policy(value: dict[str, Any], source: str) -> Policy:
    limits = dict(value.get("limits", {}))
    limits.setdefault("queue_timeout_s", DEFAULT_QUEUE_TIMEOUT_S)
    per_model = limits.pop("models", {})
    tools = value.get("tools", {})
    audit = value.get("audit", True)
    return Policy(
        tenant=value["tenant"],
        keys=tuple(Key(k["id"], k["sha256"].lower(), _date(k.get("expires"))) for k in value["keys"]),
        models=Globs(tuple(value.get("models", ()))),
        limits=Limits(**{k: float(v) if k == "queue_timeout_s" else int(v) for k, v in limits.items()}),  # 5.0: 5
        model_limits=ModelLimits(
            tuple((glob, LimiterLimits(**own, on_store_error="closed")) for glob, own in per_model.items())
        ),
        tools_allow=Globs(tuple(tools["allow"])) if "allow" in tools else None,
        tools_strict=tools.get("strict", "client"),
        priority=value.get("priority", "interactive"),
        audit=bool(audit) if isinstance(audit, bool) else True,
        audit_prompts=isinstance(audit, dict) and audit["prompts"],
        on_store_error=value.get("on_store_error", "closed"),
        metrics=value.get("metrics", False),
        source=source,
    )


def _date(expires: dt.date | str | None) -> dt.date | None:
    """A key's `expires`: YAML makes a date of 2027-06-30, a quoted one stays text (the schema checked it)."""
    return dt.date.fromisoformat(expires) if isinstance(expires, str) else expires


def policy_files(directory: Path) -> list[Path]:
    """The tenant files of a directory: YAML files not starting with `_` or `.`, sorted by name (no stat of a plain
    file: a reload after one change of 2,000 files spent half its time on a second stat of each and on sorting Paths)."""
    with os.scandir(directory) as entries:
        names = [
            e.name for e in entries if e.name.endswith(SUFFIXES) and not e.name.startswith(("_", ".")) and e.is_file()
        ]
    return [directory / name for name in sorted(names)]


OWN_FIELDS = ("tenant", "keys")
"""Fields each tenant file names for itself: in `_defaults.yaml` they would give every tenant one name or one key."""


def read_defaults(directory: Path) -> Marked | None:
    """`_defaults.yaml` of a directory, or None when it has none; naming a tenant or keys there is an error."""
    path = directory / DEFAULTS_FILE
    if not path.is_file():
        return None
    return checked_defaults(str(path), read_marked(path))


def checked_defaults(file: str, doc: Marked) -> Marked:
    """`doc`, read from the defaults file `file`, unless it names a tenant or keys (PolicyFileError)."""
    own = [f for f in OWN_FIELDS if f in doc.value]
    if own:
        errors = [_at(doc, file, (f,), "belongs in each tenant's own file, not in the defaults") for f in own]
        raise PolicyFileError(errors)
    return doc


def conflicts(policies: dict[str, Policy], order: Iterable[str]) -> dict[str, PolicyError]:
    """Files (taken in `order`, the first keeps its claim) whose tenant name or a key hash an earlier
    file already holds: file → the error that rejects it."""
    tenants: dict[str, str] = {}
    hashes: dict[str, str] = {}
    out: dict[str, PolicyError] = {}
    for file in order:
        policy = policies[file]
        if policy.tenant in tenants:
            out[file] = PolicyError(
                file, None, "tenant", f"{policy.tenant!r} is already the tenant of {tenants[policy.tenant]}"
            )
            continue
        taken = next((k for k in policy.keys if k.sha256 in hashes), None)
        if taken is not None:
            out[file] = PolicyError(file, None, "keys", f"the key {taken.id!r} is also a key of {hashes[taken.sha256]}")
            continue
        tenants[policy.tenant] = file
        hashes.update((k.sha256, file) for k in policy.keys)
    return out


def check_directory(directory: Path) -> tuple[dict[str, Policy], list[PolicyError]]:
    """Load every tenant file of `directory`: the good ones by file name, and every error."""
    if not directory.is_dir():
        return {}, [PolicyError(str(directory), None, None, "is not a directory")]
    try:
        defaults = read_defaults(directory)
    except PolicyFileError as exc:
        return {}, exc.errors
    good: dict[str, Policy] = {}
    errors: list[PolicyError] = []
    for path in policy_files(directory):
        try:
            good[str(path)] = load_policy(path, defaults)
        except PolicyFileError as exc:
            errors += exc.errors
    for file, error in conflicts(good, sorted(good)).items():
        del good[file]
        errors.append(error)
    return good, errors
