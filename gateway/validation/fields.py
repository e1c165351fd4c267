"""Validation shared by /v1/chat/completions and /v1/completions: typed field reads and generation settings.

Policy: unknown top-level fields are ignored, as vLLM and SGLang do, so that
clients sending vendor extras keep working; known fields whose meaning the
gateway cannot honour (logit_bias, echo, best_of > 1, suffix, audio, the legacy
functions API) are refused with a 400 rather than silently dropped. JSON null
means "not given" for every optional field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from backends.json_types import is_integer, is_number
from gateway.errors import invalid

MAX_N = 16
"""Choices per request; each is its own backend request."""
MAX_STOP = 4
MAX_STOP_CHARS = 256
MAX_TOP_LOGPROBS = 20
MAX_NEW_TOKENS = 1 << 20
_INT64 = 1 << 63


class Fields:
    """Typed reads from one JSON object; every error names the offending param path."""

    def __init__(self, value: Any, path: str = ""):
        if not isinstance(value, dict):
            raise invalid(f"{path or 'body'} must be an object", path or None)
        self.value = value
        self.path = path

    def param(self, key: str | int) -> str:
        if isinstance(key, int):
            return f"{self.path}[{key}]"
        return f"{self.path}.{key}" if self.path else key

    def get(self, key: str) -> Any:
        return self.value.get(key)

    def has(self, key: str) -> bool:
        return self.value.get(key) is not None

    def string(
        self, key: str, default: str | None = None, *, required: bool = False, choices: tuple[str, ...] = ()
    ) -> str | None:
        v = self.value.get(key)
        if v is None:
            if required:
                raise invalid(f"'{self.param(key)}' is required", self.param(key), "missing_required_parameter")
            return default
        if not isinstance(v, str):
            raise invalid(f"'{self.param(key)}' must be a string", self.param(key))
        if choices and v not in choices:
            raise invalid(
                f"'{self.param(key)}' must be one of {', '.join(map(repr, choices))}, got {v!r}", self.param(key)
            )
        return v

    def boolean(self, key: str, default: bool) -> bool:
        v = self.value.get(key)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise invalid(f"'{self.param(key)}' must be a boolean", self.param(key))
        return v

    def integer(self, key: str, default: int | None, lo: int, hi: int) -> int | None:
        v = self.value.get(key)
        if v is None:
            return default
        if not is_integer(v):
            raise invalid(f"'{self.param(key)}' must be an integer", self.param(key))
        if not lo <= v <= hi:
            raise invalid(f"'{self.param(key)}' must be between {lo} and {hi}, got {v}", self.param(key))
        return v

    def number(self, key: str, default: float, lo: float, hi: float) -> float:
        v = self.value.get(key)
        if v is None:
            return default
        if not is_number(v):
            raise invalid(f"'{self.param(key)}' must be a number", self.param(key))
        if not lo <= v <= hi:
            raise invalid(f"'{self.param(key)}' must be between {lo} and {hi}, got {v}", self.param(key))
        return float(v)

    def obj(self, key: str) -> Fields | None:
        v = self.value.get(key)
        return None if v is None else Fields(v, self.param(key))

    def array(self, key: str, *, max_len: int, required: bool = False) -> list[Any] | None:
        v = self.value.get(key)
        if v is None:
            if required:
                raise invalid(f"'{self.param(key)}' is required", self.param(key), "missing_required_parameter")
            return None
        if not isinstance(v, list):
            raise invalid(f"'{self.param(key)}' must be an array", self.param(key))
        if len(v) > max_len:
            raise invalid(f"'{self.param(key)}' has {len(v)} items; at most {max_len} are allowed", self.param(key))
        return v

    def refuse(self, key: str, unless: Any, reason: str) -> None:
        """400 when `key` is given with a value other than null or `unless`."""
        v = self.value.get(key)
        if v is not None and v != unless:
            raise invalid(f"'{self.param(key)}' is not supported: {reason}", self.param(key), "unsupported_parameter")


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
    skip_special_tokens: bool = True


def parse_model(fields: Fields) -> str:
    return fields.string("model", required=True)


def parse_settings(fields: Fields, *, max_tokens_keys: tuple[str, ...]) -> GenerationSettings:
    """The generation settings of a chat or completions body (logprobs are read by the caller)."""
    fields.refuse("logit_bias", {}, "logit bias is not applied by this gateway")
    max_tokens = None
    for key in max_tokens_keys:
        max_tokens = fields.integer(key, None, 1, MAX_NEW_TOKENS)
        if max_tokens is not None:
            break
    stream = fields.boolean("stream", False)
    options = fields.obj("stream_options")
    if options is not None and not stream:
        raise invalid("'stream_options' is only allowed when 'stream' is true", "stream_options")
    top_p, top_k = parse_top_p_top_k(fields)
    return GenerationSettings(
        max_tokens=max_tokens,
        n=fields.integer("n", 1, 1, MAX_N),
        stop=parse_stop(fields, "stop"),
        temperature=fields.number("temperature", 1.0, 0.0, 2.0),
        top_p=top_p,
        top_k=top_k,
        min_p=fields.number("min_p", 0.0, 0.0, 1.0),
        seed=fields.integer("seed", None, -_INT64, _INT64 - 1),
        frequency_penalty=fields.number("frequency_penalty", 0.0, -2.0, 2.0),
        presence_penalty=fields.number("presence_penalty", 0.0, -2.0, 2.0),
        ignore_eos=fields.boolean("ignore_eos", False),
        stream=stream,
        include_usage=options.boolean("include_usage", False) if options else False,
        skip_special_tokens=fields.boolean("skip_special_tokens", True),
    )


def parse_top_p_top_k(fields: Fields, top_k_min: int = -1) -> tuple[float, int]:
    """`top_p` and `top_k` as the backend takes them (top_k -1: off)."""
    top_p = fields.number("top_p", 1.0, 0.0, 1.0)
    top_k = fields.integer("top_k", -1, top_k_min, 1 << 30)
    # top_p 0 means "only the most likely token": SGLang needs top_p > 0, so say it with top_k.
    return top_p or 1.0, 1 if top_p == 0 else (-1 if top_k == 0 else top_k)


def parse_stop(fields: Fields, key: str) -> list[str]:
    """Stop strings: one string or an array of at most MAX_STOP non-empty ones."""
    v = fields.get(key)
    if v is None:
        return []
    items = [v] if isinstance(v, str) else fields.array(key, max_len=MAX_STOP)
    for i, s in enumerate(items):
        param = fields.param(key) if isinstance(v, str) else f"{fields.param(key)}[{i}]"
        if not isinstance(s, str) or not s:
            raise invalid(f"'{param}' must be a non-empty string", param)
        if len(s) > MAX_STOP_CHARS:
            raise invalid(f"'{param}' is longer than {MAX_STOP_CHARS} characters", param)
    return list(dict.fromkeys(items))
