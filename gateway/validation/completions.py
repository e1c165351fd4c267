"""Validation of a /v1/completions body: prompts as text or token ids, plus generation settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from backends.json_types import as_token_ids
from gateway.errors import invalid
from gateway.validation.declare import Field, Obj, array, boolean, either, integer, refused
from gateway.validation.fields import (
    MAX_N,
    MAX_NEW_TOKENS,
    SETTINGS,
    Fields,
    GenerationSettings,
    parse_model,
    parse_settings,
    settings_reads,
)

MAX_PROMPTS = 16
MAX_CHOICES = 64
"""Prompts times n: every one is a backend request."""
MAX_LEGACY_LOGPROBS = 5
DEFAULT_MAX_TOKENS = 16
"""max_tokens of a completion that names none: OpenAI's documented default for this API (vLLM's and SGLang's too),
capped by the context left and the tenant's ceiling."""

Prompt = str | list[int]
TOKEN_IDS = {"type": "array", "items": {"type": "integer"}, "minItems": 1}
PROMPT_TEXT = {"type": "string", "minLength": 1}
PROMPT = either(
    array(
        {"anyOf": [PROMPT_TEXT, TOKEN_IDS]},
        MAX_PROMPTS,
        "Prompts: strings or token-id arrays.",
        required=True,
        min_items=1,
    ),
    PROMPT_TEXT,
    TOKEN_IDS,
)
ADD_SPECIAL_TOKENS = boolean(
    True, "Text prompts get the tokenizer's special tokens (e.g. BOS), as vLLM's default; token-id prompts never."
)
COMPLETION_FIELDS: dict[str, Field] = {
    **SETTINGS,
    "max_tokens": integer(
        1, MAX_NEW_TOKENS, doc=f"Tokens to generate at most; default {DEFAULT_MAX_TOKENS}, within the context left."
    ),
    "prompt": PROMPT,
    "add_special_tokens": ADD_SPECIAL_TOKENS,
    "echo": boolean(False, "Each choice's text starts with its prompt (not with logprobs: no prompt logprobs here)."),
    "suffix": refused("insertion is not available"),
    "best_of": integer(1, MAX_N, doc="Must equal n: candidates are not ranked."),
    "logprobs": integer(0, MAX_LEGACY_LOGPROBS, doc="Log probabilities of this many top tokens."),
}
COMPLETION = Obj(
    "CompletionRequest", COMPLETION_FIELDS, extra={"description": f"At most {MAX_CHOICES} prompts times n."}
)
_SETTINGS_READS = settings_reads(COMPLETION, {"suffix": Fields.refuse}, ("max_tokens",))


@dataclass
class CompletionRequest:
    model: str
    prompts: list[Prompt]
    settings: GenerationSettings
    echo: bool = False
    add_special_tokens: bool = True


def parse_completion(body: Any) -> CompletionRequest:
    """Validate a completions body; raises APIError (400) naming the bad param."""
    fields = Fields(body, COMPLETION)
    model = parse_model(fields)
    settings = parse_settings(fields, _SETTINGS_READS)  # with `suffix` refused before
    best_of = fields.integer("best_of")
    if best_of not in (None, settings.n):
        raise invalid("'best_of' must equal 'n': candidates are not ranked", "best_of", "unsupported_parameter")
    top = fields.integer("logprobs")
    settings.logprobs, settings.top_logprobs = top is not None, top or 0
    echo = fields.boolean("echo")
    if echo and settings.logprobs:
        raise invalid(
            "'echo' with 'logprobs' is not supported: the prompt's logprobs are not available",
            "echo",
            "unsupported_parameter",
        )
    prompts = parse_prompts(fields)
    if len(prompts) * settings.n > MAX_CHOICES:
        raise invalid(
            f"prompts times 'n' is {len(prompts) * settings.n}; at most {MAX_CHOICES} choices are allowed", "n"
        )
    return CompletionRequest(
        model=model,
        prompts=prompts,
        settings=settings,
        echo=echo,
        add_special_tokens=fields.boolean("add_special_tokens"),
    )


def parse_prompts(fields: Fields) -> list[Prompt]:
    """A string, a list of strings, a list of token ids, or a list of token-id lists (integral floats as ids)."""
    v = fields.get("prompt")
    single = isinstance(v, str) or _ids(v) is not None
    items: list[Any] = [v] if single else fields.array("prompt")
    prompts: list[Prompt] = []
    for i, p in enumerate(items):
        param = "prompt" if single else f"prompt[{i}]"
        prompt = p if isinstance(p, str) else _ids(p)
        if prompt is None:
            raise invalid(f"'{param}' must be a string or an array of token ids", param)
        if not prompt:
            raise invalid(f"'{param}' must not be empty", param)
        prompts.append(prompt)
    return prompts


def _ids(v: Any) -> list[int] | None:
    """A non-empty list of token ids, as ints."""
    return as_token_ids(v) if v else None
