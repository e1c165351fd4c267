"""What a request for a served model needs before it reaches a backend: prompt ids, token budget,
grammar and sampling parameters, each refused with a 400 naming the field at fault."""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import orjson

from backends.base import Grammar, SamplingParams
from gateway.errors import APIError, invalid
from gateway.grammars.budget import build_failed, too_deep
from gateway.grammars.compat import newer_features
from gateway.grammars.json import SchemaGrammarError
from gateway.grammars.unenforced import check_strict_schemas, strict_where_possible
from gateway.models.registry import PromptPastContext, ServedModel
from gateway.observability.requests import note_grammar
from gateway.observability.tracing import stage
from gateway.prompts.template import TemplateError
from gateway.types import ChatRequest
from gateway.validation.fields import GenerationSettings


@dataclass
class ChatPlan:
    """A chat request made ready for the backend: the rendered prompt, its ids, grammar and sampling."""

    prompt: str
    ids: list[int]
    grammar: Grammar | None
    sampling: SamplingParams
    tool_strict: dict[str, bool] | None = None
    """Each active tool's name → whether the grammar holds it strictly (None: the chat has no tools). A tool that
    omitted `strict` may have been made strict, or left best effort when a strict build refused: what a door that
    repeats its tools says."""


def plan_chat(model: ServedModel, chat: ChatRequest, settings: GenerationSettings, param: str = "messages") -> ChatPlan:
    """Render, shield and encode `chat`, fit its token budget, build its grammar and sampling parameters.
    `param` names the field a prompt that does not fit, or cannot be rendered, is blamed on."""
    with stage("gateway.render"):
        prompt, ids = encode_chat(model, chat, param)
        max_new = token_budget(model, len(ids), settings.max_tokens, param, prompt_parts=_tools_share(model, chat, ids))
    started = time.perf_counter()
    with stage("gateway.grammar"):
        grammar, built = _chat_grammar(model, chat, prompt)
    if grammar is not None:
        note_grammar(time.perf_counter() - started)
    # The parser must see the family's markers, so the backend keeps special tokens whenever they matter.
    keep_markers = grammar is not None or (bool(chat.tools) and bool(chat.active_tools))
    skip_special = settings.skip_special_tokens and not keep_markers
    sampling = sampling_params(settings, max_new, model.stop_token_ids, skip_special)
    if not built.tools:
        return ChatPlan(prompt, ids, grammar, sampling)
    strict = {t["function"]["name"]: t["function"].get("strict") is True for t in built.active_tools}
    return ChatPlan(prompt, ids, grammar, sampling, strict)


OFF_LOOP_MESSAGES = 16
OFF_LOOP_CHARS = 16 * 1024
"""A chat with more messages or text than this (or with a grammar to build) is planned on a worker thread: a
10,000-message request takes ~1.6 s to render, shield and encode, which would stall every other stream."""


async def plan_chat_off_loop(
    model: ServedModel, chat: ChatRequest, settings: GenerationSettings, param: str = "messages"
) -> ChatPlan:
    """`plan_chat`, on a worker thread when the chat is costly to render or needs a grammar (the event loop
    keeps serving other streams meanwhile; the GIL hands it back every few milliseconds)."""
    if _cheap(chat):
        return plan_chat(model, chat, settings, param)
    return await asyncio.to_thread(plan_chat, model, chat, settings, param)


async def encode_chat_off_loop(
    model: ServedModel, chat: ChatRequest, past_context_ok: bool = False
) -> tuple[str, list[int]]:
    """`encode_chat`, on a worker thread when the chat is costly to render and encode (/tokenize and count_tokens
    encode a prompt past the context whole, as vLLM's and SGLang's /tokenize: up to the body limit, seconds)."""
    if _cheap(chat):
        return encode_chat(model, chat, past_context_ok=past_context_ok)
    return await asyncio.to_thread(encode_chat, model, chat, past_context_ok=past_context_ok)


async def encode_texts_off_loop(model: ServedModel, texts: Sequence[str], add_special_tokens: bool) -> list[list[int]]:
    """Each raw prompt text's ids (no template: /tokenize's prompt, /v1/completions' texts), on a worker thread when
    they are costly to encode (a prompt under the context bound may hold ~650K characters: ~0.6 s of CPU)."""

    def encode() -> list[list[int]]:
        return [model.encoder.encode_prompt(text, add_special_tokens=add_special_tokens) for text in texts]

    if costly_text(sum(map(len, texts))):
        return await asyncio.to_thread(encode)
    return encode()


def costly_text(chars: int) -> bool:
    """Whether rendering or encoding a prompt of `chars` characters is costly enough to leave the event loop for a
    worker thread: the one rule of the chat, /tokenize and completions paths."""
    return chars > OFF_LOOP_CHARS


def _cheap(chat: ChatRequest) -> bool:
    if len(chat.messages) > OFF_LOOP_MESSAGES or chat.tools or chat.response_format:
        return False
    chars = _json_chars(chat.template_kwargs) if chat.template_kwargs else 0
    for m in chat.messages:
        content = m.get("content")
        if type(content) is str:
            chars += len(content)
        if len(m) > 2:  # more than role and content: an assistant's reasoning or calls may be long too
            reasoning, calls = m.get("reasoning_content"), m.get("tool_calls")
            if reasoning:
                chars += len(reasoning)
            if calls:
                for call in calls:
                    chars += _json_chars(call["function"]["arguments"])
    return not costly_text(chars)


def _json_chars(value: object) -> int:
    """The length of `value` as JSON (the text a template writes of it); past what JSON holds, costly."""
    try:
        return len(orjson.dumps(value))
    except (TypeError, orjson.JSONEncodeError):
        return OFF_LOOP_CHARS + 1


def token_budget(
    model: ServedModel,
    prompt_tokens: int,
    max_tokens: int | None,
    param: str,
    default: int | None = None,
    prompt_parts: Callable[[], str] | None = None,
) -> int:
    """max_new_tokens for a prompt: what was asked, else `default` (the door's) or the model's default, capped by
    the room the context leaves; 400 when it does not fit (its message completed by `prompt_parts`, called only
    then: what the prompt's tokens are made of)."""
    room = model.context_length - prompt_tokens
    if room < 1:
        parts = prompt_parts() if prompt_parts else ""
        raise invalid(
            f"the prompt is {prompt_tokens} tokens{parts}; this model's context is {model.context_length} tokens",
            param,
            "context_length_exceeded",
        )
    if max_tokens is not None and max_tokens > room:
        parts = prompt_parts() if prompt_parts else ""
        raise invalid(
            f"the prompt ({prompt_tokens} tokens{parts}) plus max tokens ({max_tokens}) exceeds this model's context "
            f"of {model.context_length} tokens",
            param,
            "context_length_exceeded",
        )
    if max_tokens is not None:
        return max_tokens
    return min(room, default or model.default_max_tokens or room)


def sampling_params(
    settings: GenerationSettings, max_new_tokens: int, stop_token_ids: Sequence[int], skip_special_tokens: bool
) -> SamplingParams:
    return SamplingParams(  # positional, in the dataclass's field order: keywords cost ~5.5 K instructions more
        max_new_tokens,
        settings.temperature,
        settings.top_p,
        settings.top_k,
        settings.min_p,
        settings.seed,
        [] if settings.ignore_eos else list(stop_token_ids),  # stop_token_ids
        settings.ignore_eos,
        settings.frequency_penalty,
        settings.presence_penalty,
        skip_special_tokens,
        settings.min_tokens,  # min_new_tokens
    )


def _tools_share(model: ServedModel, chat: ChatRequest, ids: list[int]) -> Callable[[], str] | None:
    """`tools_share` of the prompt `ids` as token_budget's `prompt_parts`; None for a chat without tools (nothing to
    tell apart: no closure made per request)."""
    return (lambda: tools_share(model, chat, len(ids))) if chat.tools else None


def tools_share(model: ServedModel, chat: ChatRequest, prompt_tokens: int) -> str:
    """The tools' share of a prompt that does not fit, as `(N in the messages, M in the tools)` (empty when they add
    nothing): OpenAI's context error names the functions' share so, its `param` staying `messages`."""
    if not chat.tools:
        return ""
    try:
        bare = len(model.encode_chat(replace(chat, tools=[], tool_choice="auto"))[1])
    except TemplateError:
        return ""
    return f" ({bare} in the messages, {prompt_tokens - bare} in the tools)" if prompt_tokens > bare else ""


def encode_chat(
    model: ServedModel, chat: ChatRequest, param: str = "messages", past_context_ok: bool = False
) -> tuple[str, list[int]]:
    """The rendered prompt and its ids; a template that refuses the messages is a 400 about `param`, as is (unless
    `past_context_ok`) a prompt whose length in characters proves it past the context, refused unencoded."""
    try:
        return model.encode_chat(chat, past_context_ok)
    except TemplateError as e:
        raise invalid(f"the messages cannot be rendered: {e}", param) from None
    except PromptPastContext as e:
        raise past_context(model, e.at_least, param) from None


def past_context(model: ServedModel, at_least: int, param: str) -> APIError:
    """The 400 for a prompt of at least `at_least` tokens, known past the context before it was encoded."""
    return invalid(
        f"the prompt is at least {at_least} tokens; this model's context is {model.context_length} tokens",
        param,
        "context_length_exceeded",
    )


def chat_grammar(model: ServedModel, chat: ChatRequest, prompt: str) -> Grammar | None:
    """The family's grammar for the request (built and compiled under the model's compile budget when it has
    one); a schema that cannot be enforced, by xgrammar or by the backend's older xgrammar, or that costs more
    than the budget, is a 400, as is a strict schema using a keyword no grammar enforces (grammars/unenforced.py,
    checked here for every family). With `chat.strict_by_default`, the tools that omit `strict` are built strict
    where their schemas use no unenforced keyword, and all best effort if a strict build refuses one of them."""
    return _chat_grammar(model, chat, prompt)[0]


def _chat_grammar(model: ServedModel, chat: ChatRequest, prompt: str) -> tuple[Grammar | None, ChatRequest]:
    """`chat_grammar`, and the chat it was built for (its tools' `strict` what the grammar holds them to)."""
    if not chat.strict_by_default:
        return _grammar(model, chat, prompt), chat
    trial, promoted = strict_where_possible(chat, model.family.keeps_strict)
    if promoted:
        try:
            return _grammar(model, trial, prompt), trial
        except APIError as e:
            if not _refuses_one_of(e, promoted):
                raise
    # the client's own tools: those omitting strict best effort, all at once (one more build at most, however many
    # tools a strict build would refuse one by one)
    return _grammar(model, chat, prompt), chat


def _refuses_one_of(error: APIError, tools: set[int]) -> bool:
    """Whether a 400 refuses one of `tools` (indexes) as unenforceable (not as too costly)."""
    if error.status != 400 or error.code is not None or not error.param:
        return False
    return any(error.param.startswith(f"tools[{i}].function.parameters") for i in tools)


def _grammar(model: ServedModel, chat: ChatRequest, prompt: str) -> Grammar | None:
    schemas = bool(chat.tools or chat.response_format)
    try:
        if schemas:
            check_strict_schemas(chat, model.family.raw_lengths_held)
        if model.grammar_budget is not None and schemas:
            # only a client's schema can cost much to compile: a chat without one builds its grammar (if its
            # family has one without tools) here, without a round trip to a compile child
            grammar = model.grammar_budget.build(chat, prompt)
        else:
            grammar = model.family.grammar(chat, prompt)
    except SchemaGrammarError as e:
        raise invalid(str(e), e.param) from None
    except RecursionError:  # built here (no compile budget): the family's builder recursed past Python's limit
        raise too_deep(chat) from None
    except APIError:
        raise
    except Exception:  # noqa: BLE001  (built here: a builder's defect met on this schema, as in a compile child)
        raise build_failed(chat, traceback.format_exc()) from None
    if grammar is None:
        return None
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
