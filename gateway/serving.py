"""What chat and completions requests share: body reading, model lookup, token budget, backend requests."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import orjson
from starlette.requests import Request

from backends.base import GenerateRequest, Grammar, SamplingParams
from gateway.detokenizer import Detokenizer
from gateway.errors import APIError, invalid
from gateway.families.base import ChatRequest
from gateway.generation import ChoiceStep, choice_steps, merge
from gateway.grammar_compat import newer_features
from gateway.json_grammar import SchemaGrammarError
from gateway.model import ModelRegistry, ServedModel
from gateway.protocol import GenerationSettings
from gateway.template import TemplateError

DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024


async def read_json(request: Request, limit: int) -> Any:
    """The request's JSON body; 413 past `limit` bytes, 400 when it is not JSON."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise _too_large(limit)
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise invalid(f"the body is not valid JSON: {e}", None, "invalid_json") from None


def _too_large(limit: int) -> APIError:
    return APIError(f"the body is larger than {limit} bytes", status=413, code="request_too_large")


def served_model(registry: ModelRegistry, model_id: str) -> ServedModel:
    model = registry.get(model_id)
    if model is None:
        raise APIError(f"the model {model_id!r} does not exist", status=404, param="model", code="model_not_found")
    return model


def token_budget(model: ServedModel, prompt_tokens: int, max_tokens: int | None, param: str) -> int:
    """max_new_tokens for a prompt: what was asked, else the model's default capped by the room the
    context leaves; 400 when it does not fit."""
    room = model.context_length - prompt_tokens
    if room < 1:
        raise invalid(
            f"the prompt is {prompt_tokens} tokens; this model's context is {model.context_length} tokens",
            param,
            "context_length_exceeded",
        )
    if max_tokens is not None and max_tokens > room:
        raise invalid(
            f"the prompt ({prompt_tokens} tokens) plus max tokens ({max_tokens}) exceeds this model's context "
            f"of {model.context_length} tokens",
            param,
            "context_length_exceeded",
        )
    if max_tokens is not None:
        return max_tokens
    return min(room, model.default_max_tokens or room)


def sampling_params(
    settings: GenerationSettings, max_new_tokens: int, stop_token_ids: list[int], skip_special_tokens: bool
) -> SamplingParams:
    return SamplingParams(
        max_new_tokens=max_new_tokens,
        temperature=settings.temperature,
        top_p=settings.top_p,
        top_k=settings.top_k,
        min_p=settings.min_p,
        seed=settings.seed,
        stop_token_ids=[] if settings.ignore_eos else list(stop_token_ids),
        ignore_eos=settings.ignore_eos,
        frequency_penalty=settings.frequency_penalty,
        presence_penalty=settings.presence_penalty,
        skip_special_tokens=skip_special_tokens,
    )


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def generate(
    model: ServedModel,
    rid: str,
    prompts: Sequence[tuple[list[int], SamplingParams]],
    settings: GenerationSettings,
    grammar: Grammar | None,
) -> AsyncIterator[tuple[int, ChoiceStep]]:
    """Every choice's steps, merged: choice `p * n + j` is sample j of prompt p (seeds differ per sample)."""
    if model.backend is None:
        raise APIError(
            f"the model {model.id!r} only tokenizes; it has no backend", param="model", code="model_not_generative"
        )
    streams = []
    for p, (ids, sampling) in enumerate(prompts):
        for j in range(settings.n):
            request = GenerateRequest(
                rid=f"{rid}-{p * settings.n + j}",
                input_ids=list(ids),
                sampling=dataclasses.replace(sampling, seed=_nth_seed(sampling.seed, j)),
                grammar=grammar,
                logprobs=settings.logprobs,
                top_logprobs=settings.top_logprobs,
            )
            detokenizer = Detokenizer(model.tokenizer, model.added_ids)
            streams.append(choice_steps(model.backend, request, detokenizer, settings.stop))
    return merge(streams)


def _nth_seed(seed: int | None, j: int) -> int | None:
    """Sample j's seed: the request's seed for the first, distinct ones (still in int64) for the others."""
    return None if seed is None else (seed + j + (1 << 63)) % (1 << 64) - (1 << 63)


def now() -> int:
    return int(time.time())


def encode_chat(model: ServedModel, chat: ChatRequest) -> tuple[str, list[int]]:
    """The rendered prompt and its ids; a template that refuses the messages is a 400."""
    try:
        return model.encode_chat(chat)
    except TemplateError as e:
        raise invalid(f"the messages cannot be rendered: {e}", "messages") from None


def chat_grammar(model: ServedModel, chat: ChatRequest, prompt: str) -> Grammar | None:
    """The family's grammar for the request; a schema that cannot be enforced, by xgrammar or by the
    backend's older xgrammar, is a 400."""
    try:
        grammar = model.family.grammar(chat, prompt)
    except SchemaGrammarError as e:
        raise invalid(str(e), e.param) from None
    unsupported = newer_features(grammar, model.grammar_target)
    if unsupported:
        param = "tools" if chat.active_tools else "response_format"
        raise invalid(
            f"this model's backend runs xgrammar {model.grammar_target}, which would silently ignore "
            f"{', '.join(unsupported)} in the grammar this request needs",
            param,
            "grammar_unsupported_by_backend",
        )
    return grammar
