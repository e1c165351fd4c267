"""Validation of a /v1/completions body: prompts as text or token ids, plus generation settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from backends.json_types import is_token_ids
from gateway.errors import invalid
from gateway.validation.fields import Fields, GenerationSettings, parse_model, parse_settings

MAX_PROMPTS = 16
MAX_CHOICES = 64
"""Prompts times n: every one is a backend request."""
MAX_LEGACY_LOGPROBS = 5

Prompt = str | list[int]


@dataclass
class CompletionRequest:
    model: str
    prompts: list[Prompt]
    settings: GenerationSettings


def parse_completion(body: Any) -> CompletionRequest:
    """Validate a completions body; raises APIError (400) naming the bad param."""
    fields = Fields(body)
    model = parse_model(fields)
    fields.refuse("echo", False, "the prompt is not echoed back")
    fields.refuse("suffix", None, "insertion is not available")
    settings = parse_settings(fields, max_tokens_keys=("max_tokens",))
    best_of = fields.integer("best_of", None, 1, settings.n)
    if best_of not in (None, settings.n):
        raise invalid("'best_of' must equal 'n': candidates are not ranked", "best_of", "unsupported_parameter")
    top = fields.integer("logprobs", None, 0, MAX_LEGACY_LOGPROBS)
    settings.logprobs, settings.top_logprobs = top is not None, top or 0
    prompts = parse_prompts(fields)
    if len(prompts) * settings.n > MAX_CHOICES:
        raise invalid(
            f"prompts times 'n' is {len(prompts) * settings.n}; at most {MAX_CHOICES} choices are allowed", "n"
        )
    return CompletionRequest(model=model, prompts=prompts, settings=settings)


def parse_prompts(fields: Fields) -> list[Prompt]:
    """A string, a list of strings, a list of token ids, or a list of token-id lists."""
    v = fields.get("prompt")
    if v is None:
        raise invalid("'prompt' is required", "prompt", "missing_required_parameter")
    single = isinstance(v, str) or _is_ids(v)
    items: list[Any] = [v] if single else fields.array("prompt", max_len=MAX_PROMPTS)
    for i, p in enumerate(items):
        param = "prompt" if single else f"prompt[{i}]"
        if not (isinstance(p, str) or _is_ids(p)):
            raise invalid(f"'{param}' must be a string or an array of token ids", param)
        if not p:
            raise invalid(f"'{param}' must not be empty", param)
    if not items:
        raise invalid("'prompt' must hold at least one prompt", "prompt")
    return items


def _is_ids(v: Any) -> bool:
    return bool(v) and is_token_ids(v)
