"""POST /v1/chat/completions: render, generate n choices, parse each with the family's parser."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from gateway.api.admission import request_policy
from gateway.api.bodies import read_json
from gateway.api.door_params import CHAT_PARAMS, DoorParams
from gateway.api.logprobs import TokenTexts, chat_logprobs
from gateway.api.streaming import Events, respond
from gateway.api.usage import reasoning_tokens, usage
from gateway.errors import APIError
from gateway.families.base import OutputParser
from gateway.generation.choices import generate
from gateway.ids import new_call_id, new_id, now
from gateway.models.planning import ChatPlan, plan_chat_off_loop
from gateway.models.registry import ModelRegistry, ServedModel, served_model
from gateway.observability.tracing import note_request, stage
from gateway.types import ChatRequest, ChoiceStep, Delta
from gateway.validation.chat import CHAT, parse_chat_completion
from gateway.validation.fields import GenerationSettings, note_ignored


async def chat_completions(request: Request, registry: ModelRegistry, max_body: int) -> Response:
    body = await read_json(request, max_body)
    note_ignored(body, CHAT)
    parsed = parse_chat_completion(body)
    model = served_model(registry, parsed.model)
    rid = new_id("chatcmpl")
    events, renderer, _ = await start_chat(
        request,
        model,
        parsed.chat,
        parsed.settings,
        rid,
        max_tokens_param=_max_tokens_param(body),
        body_tools=body.get("tools") or (),
    )
    envelope = {"id": rid, "object": "chat.completion.chunk", "created": now(), "model": model.id}
    return await respond(request, events, renderer, envelope, parsed.settings, "chat.completion")


async def start_chat(
    request: Request,
    model: ServedModel,
    chat: ChatRequest,
    settings: GenerationSettings,
    rid: str,
    param: str = "messages",
    max_tokens_param: str = "max_tokens",
    params: DoorParams = CHAT_PARAMS,
    body_tools: Sequence[Any] = (),
) -> tuple[Events, ChatRenderer, ChatPlan]:
    """The one path every door takes from a chat request to its choices' steps and their renderer (and the plan:
    what the grammar holds each tool to, for a door that repeats its tools): the
    tenant's tool and max-tokens rules, then render, shield, encode, grammar, the fair queue and admission,
    and the backend. `param` and `max_tokens_param` name the door's fields for the prompt and max tokens, `params`
    its fields for tools and the answer's schema, `body_tools` the tools its body declared (read for their names:
    the tenant's tool allowlist applies to every one, and a refusal names its place)."""
    policy = request_policy(request)
    chat = policy.check_tools(chat, body_tools, params)  # each tool the body declares, named as it names it
    try:
        policy.check_max_tokens(settings.max_tokens, max_tokens_param)
        plan = await plan_chat_off_loop(model, chat, settings, param)
    except APIError as e:
        e.param = params.of(e.param, chat, body_tools)
        raise
    plan.sampling.max_new_tokens = policy.cap(
        plan.sampling.max_new_tokens, settings.max_tokens, len(plan.ids), settings.n, model.id
    )
    note_request("chat", rid, model.id, plan.sampling.max_new_tokens, settings)

    def start() -> Events:
        """The choices' steps, once admitted (a default budget may have been lowered to what the limits leave)."""
        queued = policy.queued(model, len(plan.ids) + plan.sampling.max_new_tokens)
        return generate(
            model,
            rid,
            [(plan.ids, plan.sampling)],
            settings,
            plan.grammar,
            queued,
            lambda: model.family.parser(chat, plan.prompt),
        )

    with stage("gateway.admission"):
        events = policy.admit_unlimited(model, settings.n, start)
        if events is None:
            events = await policy.admit(
                model,
                len(plan.ids),
                settings.n * plan.sampling.max_new_tokens,
                start,
                prompt_param=param,
                max_tokens_param=max_tokens_param,
                prompt=plan.prompt,
                choices=settings.n,
                defaulted=[plan.sampling] if settings.max_tokens is None else (),
            )
    texts = TokenTexts(model.tokenizer, model.added_ids) if settings.logprobs else None
    parser = functools.partial(model.family.parser, chat, plan.prompt)
    renderer = ChatRenderer(settings.n, parser, texts, len(plan.ids), model.count_tokens)
    return events, renderer, plan


def _max_tokens_param(body: dict[str, Any]) -> str:
    """The field a request's max tokens came from (the newer name wins, as in parse_settings)."""
    return "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"


REASONING_NAMES = ("reasoning", "reasoning_content")
"""The reasoning is written under both names, in deltas and messages: vLLM's `reasoning` (renamed from
`reasoning_content` by vllm#27752 after OpenAI's guidance for gpt-oss, the old name removed by vllm#33402; OpenRouter's
name) and `reasoning_content` (DeepSeek's, which clients written for it and for older vLLM read alone: Dify,
the AI SDK's multi-turn threading). Clients that know both take one (`reasoning_content` or else `reasoning`:
LiteLLM's Delta, llama_index, strands). A reasoning chunk grows by ~19 bytes (234 → 253 for one token's text) and
~525 instructions (+1.7 %, callgrind: bench/RESULTS.md); a content chunk is unchanged."""


class ChatRenderer:
    """Choice steps → chat chunk choices (role, content / reasoning (REASONING_NAMES) / tool_calls deltas, finish);
    their usage counts each choice's reasoning again with `count_tokens`. Each of the `choices` reads its output with
    a parser of its own, made by `parser` at the choice's first step: after its backend request went out (a family's
    parser costs ~30 K instructions to build, which the backend need not wait for)."""

    def __init__(
        self,
        choices: int,
        parser: Callable[[], OutputParser],
        texts: TokenTexts | None,
        prompt_tokens: int,
        count_tokens: Callable[[str], int],
    ):
        self._parsers: list[OutputParser | None] = [None] * choices
        self._new_parser = parser
        self._texts = texts
        self._prompt_tokens = prompt_tokens
        self._count_tokens = count_tokens
        self._completion_tokens = [0] * choices
        self._reasoning: dict[int, list[str]] = {}
        """Each choice's reasoning texts, from its first (no list per choice made up front)."""
        self._counted: list[tuple[tuple[int, int], int] | None] = [None] * choices
        self._cached_tokens = 0
        self._call_ids: dict[tuple[int, int], str] = {}
        """(choice, tool index) → the call's id."""

    def opening(self) -> list[dict[str, Any]]:
        return [_choice(i, {"role": "assistant", "content": ""}) for i in range(len(self._parsers))]

    def step(self, index: int, step: ChoiceStep) -> list[dict[str, Any]]:
        parser = self._parsers[index]
        if parser is None:
            parser = self._parsers[index] = self._new_parser()
        deltas = parser.feed(step.pieces)
        if step.finish_reason is not None:
            deltas += parser.finish()
        self._completion_tokens[index] = step.completion_tokens
        self._cached_tokens = max(self._cached_tokens, step.cached_tokens)
        out = []
        delta = self._delta(index, deltas)
        if "reasoning_content" in delta:
            self._reasoning.setdefault(index, []).append(delta["reasoning_content"])
        logprobs = {"content": chat_logprobs(step.logprobs, self._texts)} if self._texts and step.logprobs else None
        if delta or logprobs:
            out.append(_choice(index, delta, logprobs))
        if step.finish_reason is not None:
            tool_calls = step.finish_reason == "stop" and parser.saw_tool_call
            finish = _choice(index, {}, finish_reason="tool_calls" if tool_calls else step.finish_reason)
            finish["stop_reason"] = step.stop_reason  # vLLM's, on the finishing chunk only
            out.append(finish)
        return out

    def _delta(self, index: int, deltas: Sequence[Delta]) -> dict[str, Any]:
        """One OpenAI delta for the step: text joined, each call's fragments joined under its index."""
        if len(deltas) == 1:
            only = deltas[0]
            if only.tool_index is None:  # most steps: one piece of text
                text: dict[str, Any] = {"content": only.content} if only.content else {}
                if only.reasoning:
                    text["reasoning"] = text["reasoning_content"] = only.reasoning  # REASONING_NAMES, spelled out
                return text
            if (index, only.tool_index) in self._call_ids and not only.content and not only.reasoning:
                # a named call's next arguments (most steps of a long argument): what the loop below makes of it
                return {"tool_calls": [{"index": only.tool_index, "function": {"arguments": only.tool_arguments}}]}
        content = "".join(d.content for d in deltas)
        reasoning = "".join(d.reasoning for d in deltas)
        calls: dict[int, dict[str, Any]] = {}
        for d in deltas:
            if d.tool_index is None:
                continue
            call = calls.get(d.tool_index)
            if call is None:
                call = calls[d.tool_index] = {"index": d.tool_index}
                named = (index, d.tool_index)
                if named not in self._call_ids:  # the first delta of a call names it
                    self._call_ids[named] = d.tool_id or new_call_id()
                    call.update(id=self._call_ids[named], type="function", function={"name": d.tool_name or ""})
                call.setdefault("function", {})["arguments"] = ""
            call["function"]["arguments"] += d.tool_arguments
        out: dict[str, Any] = {}
        if content:
            out["content"] = content
        if reasoning:
            out["reasoning"] = out["reasoning_content"] = reasoning  # REASONING_NAMES
        if calls:
            out["tool_calls"] = list(calls.values())
        return out

    def fold(self, chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        folded = [_Folded() for _ in self._parsers]
        for chunk in chunks:
            folded[chunk["index"]].add(chunk)
        return [f.choice(i, self._texts is not None) for i, f in enumerate(folded)]

    def usage(self) -> dict[str, Any]:
        reasoned = any(self._reasoning.values())
        reasoning = sum(map(self._reasoning_tokens, range(len(self._parsers)))) if reasoned else None
        return usage(self._prompt_tokens, sum(self._completion_tokens), self._cached_tokens, reasoning)

    def choice_usage(self, index: int) -> dict[str, Any]:
        """Without reasoning details, as vLLM's continuous usage (each chunk's: counting them there costs an encoding
        of the reasoning so far per chunk)."""
        return usage(self._prompt_tokens, self._completion_tokens[index], self._cached_tokens)

    def _reasoning_tokens(self, index: int) -> int:
        """Choice `index`'s reasoning tokens, counted once for its reasoning and tokens so far (usage is read for the
        usage chunk, the folded answer and the access line)."""
        texts = self._reasoning.get(index, ())
        key = (len(texts), self._completion_tokens[index])
        counted = self._counted[index]
        if counted is None or counted[0] != key:
            reasoning = "".join(texts)
            counted = self._counted[index] = (key, reasoning_tokens(key[1], reasoning, self._count_tokens))
        return counted[1]


def _choice(
    index: int, delta: dict[str, Any], logprobs: dict[str, Any] | None = None, finish_reason: str | None = None
) -> dict[str, Any]:
    return {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}


class _Folded:
    """One choice's chunks merged into a message."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.logprobs: list[dict[str, Any]] = []
        self.finish_reason: str | None = None
        self.stop_reason: str | int | None = None

    def add(self, chunk: dict[str, Any]) -> None:
        delta = chunk["delta"]
        self.content.append(delta.get("content", ""))
        self.reasoning.append(delta.get("reasoning_content", ""))
        for call in delta.get("tool_calls", ()):
            merged = self.calls.setdefault(
                call["index"], {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
            )
            merged["id"] = call.get("id", merged["id"])
            merged["function"]["name"] += call.get("function", {}).get("name", "")
            merged["function"]["arguments"] += call.get("function", {}).get("arguments", "")
        if chunk["logprobs"]:
            self.logprobs += chunk["logprobs"]["content"]
        if chunk["finish_reason"]:
            self.finish_reason, self.stop_reason = chunk["finish_reason"], chunk["stop_reason"]

    def choice(self, index: int, with_logprobs: bool) -> dict[str, Any]:
        content = "".join(self.content)
        message: dict[str, Any] = {
            "role": "assistant",
            "content": content or (None if self.calls else ""),
            "refusal": None,
        }
        reasoning = "".join(self.reasoning)
        if reasoning:
            message.update(dict.fromkeys(REASONING_NAMES, reasoning))
        if self.calls:
            message["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        logprobs = {"content": self.logprobs} if with_logprobs else None
        return {
            "index": index,
            "message": message,
            "logprobs": logprobs,
            "finish_reason": self.finish_reason,
            "stop_reason": self.stop_reason,
        }
