"""Validation shared by /v1/chat/completions and /v1/completions: typed field reads and generation settings.

Policy: unknown top-level fields are ignored, as vLLM and SGLang do, so that
clients sending vendor extras keep working (each door names them on the request's record: `note_ignored`); known
fields whose meaning the gateway cannot honour (logit_bias, best_of > 1, suffix, audio, the legacy
functions API, and vLLM's guided_*, beam search ...) are refused with a 400 rather than silently dropped. JSON null
means "not given" for every optional field. An integral float (`"n": 1.0`) is an
integer, as JSON Schema and OpenAI's and vLLM's pydantic servers read it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from backends.json_types import as_integer, is_number
from gateway.errors import invalid
from gateway.observability.requests import IGNORED_SHOWN, note_ignored_fields
from gateway.validation.declare import (
    Field,
    Obj,
    Schema,
    Variants,
    array,
    boolean,
    either,
    integer,
    number,
    obj,
    refused,
    string,
)

MAX_N = 16
"""Choices per request; each is its own backend request."""
MAX_STOP = 4
MAX_STOP_CHARS = 256
MAX_TOP_LOGPROBS = 20
MAX_NEW_TOKENS = 1 << 20
_INT64 = 1 << 63


Reader = Callable[["Fields", str], Any]
"""A typed read of one field (`Fields.boolean`, `Fields.integer`, ...) or a function of the same shape."""


class Reads:
    """Optional fields of one declaration that `Fields.read` reads in one step, in this order."""

    SHAPES = 256
    """Bodies' key orders remembered (`present_in`); clients send a few, each of its own."""

    def __init__(self, decl: Obj, readers: dict[str, Reader], **defaults: Any):
        self.readers = readers
        self.rank = {key: i for i, key in enumerate(readers)}
        """Each field's place in the order."""
        self.defaults: dict[str, Any] = {key: decl.optional_defaults[key] for key in readers} | defaults
        """Each field's value when the body leaves it out (or null): its declared default unless given here."""
        self._present: dict[tuple[str, ...], list[tuple[str, Reader]]] = {}

    def present_in(self, keys: tuple[str, ...]) -> list[tuple[str, Reader]]:
        """Those of these fields among a body's `keys` with their readers, in this order (never to be changed:
        remembered by `keys`)."""
        present = self._present.get(keys)
        if present is None:
            readers = self.readers
            present = [(key, readers[key]) for key in sorted(self.rank.keys() & keys, key=self.rank.__getitem__)]
            if len(self._present) >= self.SHAPES:
                self._present.clear()
            if len(keys) <= 64:  # (a hostile body's many keys are not kept)
                self._present[keys] = present
        return present


class Fields:
    """Typed reads from one JSON object through its declaration; every error names the offending param path."""

    __slots__ = ("_declared", "_defaults", "_keys", "decl", "path", "value")

    def __init__(self, value: Any, decl: Obj | Variants, path: str = ""):
        if not isinstance(value, dict):
            raise invalid(f"{path or 'body'} must be an object", path or None)
        self.value = value
        self.decl = decl
        self.path = path
        self._keys: tuple[str, ...] | None = None
        """The object's keys in its order, taken at its first `read` (shared by the runs read from it)."""
        self._declared: dict[str, Field] = decl.fields  # (a Variants' none: its key read through `decl.field`)
        self._defaults: dict[str, Any] = decl.optional_defaults
        """Optional fields' defaults: a read of one the body leaves out (or null) returns at once."""

    def variant(self) -> Fields:
        """This object read through the declaration of its case (its `type`)."""
        cases, kind = self.decl.cases, self.value.get(self.decl.key)
        case = cases.get(kind) if type(kind) is str else None  # (a case named: taken at once)
        return Fields(self.value, case or cases[self.string(self.decl.key)], self.path)

    def param(self, key: str | int) -> str:
        if isinstance(key, int):
            return f"{self.path}[{key}]"
        return f"{self.path}.{key}" if self.path else key

    def get(self, key: str) -> Any:
        """The raw value at `key` (None when absent; a 400 when the field is required)."""
        v = self.value.get(key)
        if v is None:
            return None if key in self._defaults else self._given(key)[1]
        if key not in self._declared:
            self._field(key)  # (a Variants' key, or the error of an undeclared one)
        return v

    def given(self, keys: Collection[str]) -> list[str]:
        """Those of the optional `keys` the body gives a value (not null), in their order: a read of any other
        returns its default at once, so a caller may read these alone."""
        value = self.value
        if value.keys().isdisjoint(keys):  # (most bodies give none of them: one pass in C)
            return []
        # the keys present picked out in C (`filter`), their values looked at in Python: a step per key given
        return [key for key in filter(value.__contains__, keys) if value[key] is not None]

    def read(self, reads: Reads) -> dict[str, Any]:
        """Each of `reads`' fields' value: the defaults of those the body leaves out (or null), the typed read of
        each it gives in `reads`' order (so the first error is the one reading each in turn raises). When the body
        gives none, the dict is `reads`' own: read it, never change it."""
        present = reads.present_in(self._keys or self._key_order())
        return self._read_into(reads.defaults.copy(), present) if present else reads.defaults

    def read_given(self, reads: Reads) -> dict[str, Any]:
        """The typed values of those of `reads`' fields the body gives (not null), read in `reads`' order."""
        return self._read_into({}, reads.present_in(self._keys or self._key_order()))

    def _read_into(self, out: dict[str, Any], present: list[tuple[str, Reader]]) -> dict[str, Any]:
        """`out` with the typed value of each of the `present` fields the body gives (not null), read in order."""
        value = self.value
        for key, reader in present:
            if value[key] is not None:
                out[key] = reader(self, key)
        return out

    def _key_order(self) -> tuple[str, ...]:
        """The object's keys in its order, taken once."""
        self._keys = tuple(self.value)
        return self._keys

    def has(self, key: str) -> bool:
        self.decl.field(key)
        return self.value.get(key) is not None

    def _field(self, key: str) -> Field:
        """The key's declaration."""
        return self._declared.get(key) or self.decl.field(key)  # a Variants' key, or the error of an undeclared one

    def _given(self, key: str, required: bool | None = None) -> tuple[Field, Any]:
        """The key's declaration and value; a missing required value is a 400."""
        f = self._field(key)
        v = self.value.get(key)
        if v is None and (f.required if required is None else required):
            raise invalid(f"'{self.param(key)}' is required", self.param(key), "missing_required_parameter")
        return f, v

    def string(self, key: str, *, required: bool | None = None) -> str | None:
        v = self.value.get(key)
        if v is None:
            if required is None and key in self._defaults:
                return self._defaults[key]
            return self._given(key, required)[0].default
        f = self._declared.get(key) or self._field(key)  # (the look-up in line: a call less, ~0.4 K instructions)
        if not isinstance(v, str):
            raise invalid(f"'{self.param(key)}' must be a string", self.param(key))
        if f.choices and v not in f.choices:
            raise invalid(
                f"'{self.param(key)}' must be one of {', '.join(map(repr, f.choices))}, got {v!r}", self.param(key)
            )
        if f.pattern and not re.fullmatch(f.pattern, v):
            raise invalid(f"'{self.param(key)}' must match {f.pattern}: {f.doc}", self.param(key))
        return v

    def boolean(self, key: str) -> bool:
        v = self.value.get(key)
        if v is None:
            return self._defaults[key] if key in self._defaults else self._given(key)[0].default
        if key not in self._declared:
            self._field(key)
        if not isinstance(v, bool):
            raise invalid(f"'{self.param(key)}' must be a boolean", self.param(key))
        return v

    def integer(self, key: str) -> int | None:
        """An integer (an integral float such as 1.0 is taken, as JSON Schema and pydantic take it) within bounds."""
        v = self.value.get(key)
        if v is None:
            return self._defaults[key] if key in self._defaults else self._given(key)[0].default
        f = self._declared.get(key) or self._field(key)
        number = v if type(v) is int else as_integer(v)  # (an int as it is: most integers sent)
        if number is None:
            # a float past 2^53 (`1e22`) is no exact integer: the bounds say what was wrong with it (an integer
            # past 64 bits never gets here: backends/exact_json.py refuses it where the body is read)
            bounds = f" between {f.lo} and {f.hi}" if f.lo is not None and is_number(v) else ""
            raise invalid(f"'{self.param(key)}' must be an integer{bounds}", self.param(key))
        return number if f.lo <= number <= f.hi else self._bounded(key, f, number)

    def integer_text(self, key: str) -> int | None:
        """An integer written in decimal digits (a query parameter)."""
        f, v = self._given(key)
        if v is None:
            return f.default
        if not isinstance(v, str) or not v.isascii() or not v.isdigit() or len(v) > 18:
            raise invalid(f"'{self.param(key)}' must be an integer between {f.lo} and {f.hi}", self.param(key))
        return self._bounded(key, f, int(v))

    def number(self, key: str) -> float:
        v = self.value.get(key)
        if v is None:
            return self._defaults[key] if key in self._defaults else self._given(key)[0].default
        f = self._declared.get(key) or self._field(key)
        if type(v) is float and f.lo <= v <= f.hi:  # (most numbers sent; NaN fails the bounds)
            return v
        if not is_number(v):
            raise invalid(f"'{self.param(key)}' must be a number", self.param(key))
        return float(v if f.lo <= v <= f.hi else self._bounded(key, f, v))

    def _bounded(self, key: str, f: Field, v: float) -> float:
        if not f.lo <= v <= f.hi:
            raise invalid(f"'{self.param(key)}' must be between {f.lo} and {f.hi}, got {v}", self.param(key))
        return v

    def obj(self, key: str, decl: Obj | None = None) -> Fields | None:
        """The object at `key`, read through its declaration (`decl`: one of the field's alternatives)."""
        v = self.value.get(key)
        if v is None:
            return None if key in self._defaults else self._given(key)[1]
        return Fields(v, decl or self._field(key).obj, self.param(key))

    def mapping(self, key: str) -> dict[str, Any] | None:
        """A free JSON object (no declared fields of its own)."""
        v = self.value.get(key)
        if v is None:
            return None if key in self._defaults else self._given(key)[1]
        self._field(key)
        if not isinstance(v, dict):
            raise invalid(f"'{self.param(key)}' must be an object", self.param(key))
        return v

    def array(self, key: str, *, required: bool | None = None) -> list[Any] | None:
        v = self.value.get(key)
        if v is None:
            return None if required is None and key in self._defaults else self._given(key, required)[1]
        f = self._field(key)
        if not isinstance(v, list):
            raise invalid(f"'{self.param(key)}' must be an array", self.param(key))
        if len(v) > f.max_items:
            raise invalid(f"'{self.param(key)}' has {len(v)} items; at most {f.max_items} are allowed", self.param(key))
        if len(v) < f.min_items:
            raise invalid(f"'{self.param(key)}' must hold at least {f.min_items} item(s)", self.param(key))
        return v

    def items(self, key: str, *, required: bool | None = None) -> list[Fields]:
        """The declared objects of the array at `key`."""
        items = self.array(key, required=required)
        if not items:
            return []
        decl, param = self._field(key).items, self.param(key)
        return [Fields(item, decl, f"{param}[{i}]") for i, item in enumerate(items)]

    def item(self, key: str, i: int) -> Fields:
        """The declared object at index `i` of the array at `key` (read by `array` already)."""
        return Fields(self.value[key][i], self.decl.field(key).items, f"{self.param(key)}[{i}]")

    def refuse(self, key: str) -> None:
        """400 when a refused field is given with a value other than null or the one it allows."""
        if self.value.get(key) is None and key in self._defaults:
            return
        f, v = self._given(key)
        if v is not None and v != f.refused_unless:
            raise invalid(
                f"'{self.param(key)}' is not supported: {f.refused}", self.param(key), "unsupported_parameter"
            )


@dataclass
class GenerationSettings:
    """How to generate, independent of the endpoint."""

    max_tokens: int | None = None
    """None: as many as the context leaves room for."""
    n: int = 1
    stop: list[str] = field(default_factory=list)
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    seed: int | None = None
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    ignore_eos: bool = False
    logprobs: bool = False
    top_logprobs: int = 0
    stream: bool = False
    include_usage: bool = False
    continuous_usage: bool = False
    """With include_usage, every chunk carries the usage so far (vLLM's continuous_usage_stats)."""
    skip_special_tokens: bool = True
    min_tokens: int = 0
    """vLLM's: tokens generated before a stop token or a stop string may end the output."""
    include_stop_str_in_output: bool = False
    """vLLM's: the stop string that ended the output stays at its end."""


STOP_STRING: Schema = {"type": "string", "minLength": 1, "maxLength": MAX_STOP_CHARS}
MODEL = string("The served model's id (GET /v1/models).", required=True)
MAX_TOKENS = integer(1, MAX_NEW_TOKENS, doc="Tokens to generate at most; default: the gateway's default cap.")
STREAM = boolean(False, "Answer as server-sent events.")
TEMPERATURE = number(0.0, 2.0, 1.0)
TOP_P = number(0.0, 1.0, 1.0)
TOP_K = integer(-1, 1 << 30, -1, "-1 or 0: off.")
PENALTY = number(-2.0, 2.0, 0.0)
TOP_LOGPROBS = integer(0, MAX_TOP_LOGPROBS, 0)


def stop_field(max_items: int, doc: str) -> Field:
    """Stop strings: one non-empty string or an array of them."""
    return either(array(STOP_STRING, max_items, doc), STOP_STRING)


MAX_METADATA = 16
METADATA = Field(
    "object",
    f"At most {MAX_METADATA} keys of at most 64 characters, string values of at most 512.",
    extra={
        "maxProperties": MAX_METADATA,
        "propertyNames": {"maxLength": 64},
        "additionalProperties": {"type": "string", "maxLength": 512},
    },
)
"""OpenAI's metadata (chat and Responses): string pairs that label a request."""
STREAM_OPTIONS = Obj(
    "StreamOptions",
    {
        "include_usage": boolean(False, "A last chunk carries the usage."),
        "continuous_usage_stats": boolean(False, "With include_usage, every chunk carries the usage so far (vLLM's)."),
    },
)
_GRAMMAR = "constrained output is asked for with 'response_format' (chat completions)"
VLLM_REFUSED: dict[str, Field] = {
    **dict.fromkeys(
        ("guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs"), refused(_GRAMMAR)
    ),
    "repetition_penalty": refused("only 1 (no repetition penalty) is applied", unless=1),
    "use_beam_search": refused("beam search is not available", unless=False),
    "prompt_logprobs": refused("prompt logprobs are not available"),
    "allowed_token_ids": refused("restricting the vocabulary is not available"),
    "bad_words": refused("banned words are not available", unless=[]),
}
"""vLLM's sampling extensions the gateway cannot honour: refused, since ignoring them would change the output
unannounced (vLLM's own fields the gateway does honour are declared with the settings)."""
SETTINGS: dict[str, Field] = {
    "model": MODEL,
    "logit_bias": refused("logit bias is not applied by this gateway", unless={}),
    **VLLM_REFUSED,
    "max_tokens": MAX_TOKENS,
    "stream": STREAM,
    "stream_options": obj(STREAM_OPTIONS, "Only with stream true."),
    "n": integer(1, MAX_N, 1, "Choices to generate."),
    "stop": stop_field(MAX_STOP, "Stop strings; the answer ends before the first one."),
    "temperature": TEMPERATURE,
    "top_p": TOP_P,
    "top_k": TOP_K,
    "min_p": number(0.0, 1.0, 0.0),
    "seed": integer(-_INT64, _INT64 - 1),
    "frequency_penalty": PENALTY,
    "presence_penalty": PENALTY,
    "ignore_eos": boolean(False),
    "skip_special_tokens": boolean(True),
    "user": string("An end user's label; not used here."),
    "min_tokens": integer(0, MAX_NEW_TOKENS, 0, "vLLM's: tokens generated before a stop may end the output."),
    "include_stop_str_in_output": boolean(False, "vLLM's: the matched stop string ends the output, kept."),
}
"""The generation settings a chat or completions body declares."""
_REFUSED_SETTINGS = ("logit_bias", *VLLM_REFUSED)


def note_ignored(body: Any, decl: Obj) -> None:
    """Note on the request's record (its access line, `gateway:requests_with_ignored_fields`) the top-level keys of
    `body` that `decl` does not declare: ignored, as vLLM ignores them (its request models allow extras and log them
    at debug: "The following fields were present in the request but ignored"), where OpenAI's API answers 400
    "Unrecognized request argument supplied: X" and Anthropic's "X: Extra inputs are not permitted"."""
    declared = decl.fields
    if isinstance(body, dict) and not body.keys() <= declared.keys():  # one pass in C for the bodies that hold none
        note_ignored_fields(list(islice((key for key in body if key not in declared), IGNORED_SHOWN)))


def parse_model(fields: Fields) -> str:
    return fields.string("model")


def parse_settings(fields: Fields, reads: SettingsReads) -> GenerationSettings:
    """The generation settings of a chat or completions body, read as `reads` says (with the door's own fields read
    in `reads.head` and `reads.plain`)."""
    head = fields.read(reads.head)
    max_tokens = None
    for key in reads.max_tokens_keys:  # (not `next` of a generator: ~1.5 K instructions more)
        if head[key] is not None:
            max_tokens = head[key]
            break
    min_tokens = head["min_tokens"]
    if max_tokens is not None and min_tokens > max_tokens:
        raise invalid(f"'min_tokens' must be at most the max tokens ({max_tokens}), got {min_tokens}", "min_tokens")
    settings = GenerationSettings(
        max_tokens
    )  # the rest set after: a dataclass's keywords cost ~0.5 K instructions each
    settings.top_p, settings.top_k = backend_top_p_top_k(head["top_p"], head["top_k"])
    settings.min_tokens, settings.stream = min_tokens, head["stream"]
    settings.include_usage, settings.continuous_usage = head["stream_options"]
    for key, value in fields.read_given(reads.plain).items():
        setattr(settings, key, value)
    return settings


def parse_metadata(fields: Fields, key: str = "metadata") -> dict[str, str]:
    """`metadata`: at most 16 string pairs, keys of at most 64 characters, values of at most 512."""
    meta = fields.mapping(key)
    if meta is None:
        return {}
    if len(meta) > MAX_METADATA:
        raise invalid(f"'{key}' has more than {MAX_METADATA} keys", key)
    for name, value in meta.items():
        if len(name) > 64 or not isinstance(value, str) or len(value) > 512:
            raise invalid(f"'{key}' keys are at most 64 characters and values strings of at most 512", key)
    return dict(meta)


def backend_top_p_top_k(top_p: float, top_k: int) -> tuple[float, int]:
    """A body's `top_p` and `top_k` as the backend takes them (top_k -1: off)."""
    # top_p 0 means "only the most likely token": SGLang needs top_p > 0, so say it with top_k.
    return top_p or 1.0, 1 if top_p == 0 else (top_k or -1)


def parse_stop(fields: Fields, key: str) -> list[str]:
    """Stop strings: one string or an array of at most its declared count of non-empty ones."""
    v = fields.get(key)
    if v is None:
        return []
    items = [v] if isinstance(v, str) else fields.array(key)
    for i, s in enumerate(items):
        if not isinstance(s, str) or not s or len(s) > MAX_STOP_CHARS:
            param = fields.param(key) if isinstance(v, str) else f"{fields.param(key)}[{i}]"
            if not isinstance(s, str) or not s:
                raise invalid(f"'{param}' must be a non-empty string", param)
            raise invalid(f"'{param}' is longer than {MAX_STOP_CHARS} characters", param)
    return list(dict.fromkeys(items))


_PLAIN_SETTINGS: dict[str, Reader] = {
    "n": Fields.integer,
    "stop": parse_stop,
    "temperature": Fields.number,
    "min_p": Fields.number,
    "seed": Fields.integer,
    "frequency_penalty": Fields.number,
    "presence_penalty": Fields.number,
    "ignore_eos": Fields.boolean,
    "skip_special_tokens": Fields.boolean,
    "include_stop_str_in_output": Fields.boolean,
}
"""Settings read as they are, each into the GenerationSettings attribute of its name, in this order; read only when
the body gives them: absent, each is the attribute's default, which is its declared default (a test checks)."""


def _stream_options(fields: Fields, key: str) -> tuple[bool, bool]:
    """`stream_options`' include_usage and continuous usage; it needs `stream` true (read before it)."""
    given = fields.value[key]
    if type(given) is dict and fields.value.get("stream") is True:  # (most: valid values taken as they are)
        include_usage, continuous = given.get("include_usage"), given.get("continuous_usage_stats")
        if include_usage is None or include_usage is False:
            return False, False  # (continuous_usage_stats not read: it applies with include_usage only)
        if include_usage is True and (continuous is None or type(continuous) is bool):
            return True, continuous is True
    options = fields.obj(key)
    include_usage = options.boolean("include_usage")
    continuous_usage = include_usage and options.boolean("continuous_usage_stats")
    if not fields.boolean("stream"):
        raise invalid("'stream_options' is only allowed when 'stream' is true", "stream_options")
    return include_usage, continuous_usage


@dataclass(frozen=True)
class SettingsReads:
    """How a door reads its body's generation settings (`settings_reads` makes one)."""

    head: Reads
    """The door's own fields read before the settings, then the settings up to min_tokens: one step."""
    max_tokens_keys: tuple[str, ...]
    """The fields of the max tokens: each checked, the first given wins."""
    plain: Reads
    """The settings read as they are after min_tokens is checked, each into the GenerationSettings attribute of its
    name (`_PLAIN_SETTINGS`, then the door's own)."""


def settings_reads(
    decl: Obj,
    before: dict[str, Reader],
    max_tokens_keys: tuple[str, ...],
    plain: dict[str, Reader] | None = None,
) -> SettingsReads:
    """The reads of `decl`'s settings: the door's own fields `before` them (their values unused), and its `plain`
    ones read after the shared plain settings."""
    head = {
        **before,
        **dict.fromkeys(_REFUSED_SETTINGS, Fields.refuse),
        "user": Fields.string,  # typed, though not used
        **dict.fromkeys(max_tokens_keys, Fields.integer),
        "stream": Fields.boolean,
        "stream_options": _stream_options,
        "top_p": Fields.number,
        "top_k": Fields.integer,
        "min_tokens": Fields.integer,
    }
    return SettingsReads(
        Reads(decl, head, stream_options=(False, False)),
        max_tokens_keys,
        Reads(decl, {**_PLAIN_SETTINGS, **(plain or {})}),
    )
