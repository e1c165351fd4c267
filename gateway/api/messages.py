"""Anthropic's Messages API: POST /v1/messages and /v1/messages/count_tokens.

A request becomes the same chat request as /v1/chat/completions; `MessagesDoor` turns the chat chunks
that `ChatRenderer` makes into Anthropic's stream events, and the body is those events folded.
Errors take Anthropic's shape, {"type": "error", "error": {"type", "message"}}: `APIError.response` gives it to every
refusal under /v1/messages, wherever it is raised, and `MessagesDoor.failure` to a stream that fails.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from backends.asgi import json_response, sse_frame
from gateway.api.admission import request_policy
from gateway.api.bodies import read_json
from gateway.api.chat import ChatRenderer, start_chat
from gateway.api.door_params import MESSAGES_PARAMS
from gateway.api.streaming import respond_door
from gateway.errors import APIError, anthropic_error
from gateway.ids import item_id, tool_use_id
from gateway.models.planning import encode_chat_off_loop
from gateway.models.registry import ModelRegistry, served_model
from gateway.types import ChoiceStep
from gateway.validation.cut_json import completed_members
from gateway.validation.fields import note_ignored
from gateway.validation.messages import COUNT_TOKENS, MESSAGES, parse_messages_request

_TEXT_BLOCKS = {"text": ("text", "text_delta"), "thinking": ("thinking", "thinking_delta")}
"""Block type → the field its text is in and the type of its deltas."""


def thinking_signature(digest: bytes) -> str:
    """A thinking block's signature: the SHA-256 of its text, base64. Anthropic sends one in a signature_delta before
    the block stops, and clients that pass thinking back keep it (some drop a block without one). It is not checked
    when a block comes back: the client writes the whole history anyway (chat's reasoning_content and Responses'
    reasoning items are taken as sent), and a conversation moved from another provider carries that provider's."""
    return base64.b64encode(digest).decode()


async def create_message(request: Request, registry: ModelRegistry, max_body: int) -> Response:
    body = await read_json(request, max_body)
    note_ignored(body, MESSAGES)
    parsed = parse_messages_request(body)
    model = served_model(registry, parsed.model)
    rid = item_id("msg")
    events, renderer, _ = await start_chat(
        request,
        model,
        parsed.chat,
        parsed.settings,
        rid,
        max_tokens_param="max_tokens",
        params=MESSAGES_PARAMS,
        body_tools=body.get("tools") or (),
    )
    door = MessagesDoor(renderer, rid, model.id)
    return await respond_door(request, events, door, parsed.settings.stream)


async def count_tokens(request: Request, registry: ModelRegistry, max_body: int) -> Response:
    body = await read_json(request, max_body)
    note_ignored(body, COUNT_TOKENS)
    parsed = parse_messages_request(body, count_only=True)
    model = served_model(registry, parsed.model)
    chat = request_policy(request).check_tools(parsed.chat, body.get("tools") or (), MESSAGES_PARAMS)  # as rendered
    _, ids = await encode_chat_off_loop(model, chat, past_context_ok=True)
    return json_response({"input_tokens": len(ids)})


class MessagesDoor:
    """Chat chunks of one choice → Anthropic stream events (content blocks by index); folded into a Message."""

    end = b""

    def __init__(self, renderer: ChatRenderer, rid: str, model: str):
        self._renderer = renderer
        self._rid = rid
        self._model = model
        self._blocks = 0
        self._open: str | None = None
        self._finish: str | None = None
        self._stop_string: str | None = None
        self._started = False
        self._thinking = hashlib.sha256()
        """The open thinking block's text so far, hashed for its signature (a new hash once the block stops)."""

    def usage(self) -> dict[str, Any]:
        return self._renderer.usage()

    def opening(self) -> list[Any]:
        return []  # message_start goes with the first step, once the backend said how much of the prompt was cached

    def _message_start(self) -> list[dict[str, Any]]:
        """message_start (its usage split into cached and uncached input as message_delta's is) and a ping."""
        self._started = True
        usage = self._usage()
        message = {
            "id": self._rid,
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": self._model,
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {**usage, "output_tokens": 0},
        }
        return [{"type": "message_start", "message": message}, {"type": "ping"}]

    def step(self, index: int, step: ChoiceStep) -> list[Any]:
        out: list[dict[str, Any]] = []
        for chunk in self._renderer.step(index, step):
            delta = chunk["delta"]
            if delta.get("reasoning_content"):
                out += self._delta("thinking", delta["reasoning_content"])
            if delta.get("content"):
                out += self._delta("text", delta["content"])
            for call in delta.get("tool_calls", ()):
                if "id" in call:
                    block = {"type": "tool_use", "id": tool_use_id(), "name": call["function"]["name"], "input": {}}
                    out += self._start("tool_use", block)
                fragment = call["function"].get("arguments", "")
                if fragment:
                    out.append(self._block_delta({"type": "input_json_delta", "partial_json": fragment}))
            if chunk["finish_reason"]:
                self._finish = chunk["finish_reason"]
        self._stop_string = step.stop_string or self._stop_string
        return out if self._started else self._message_start() + out

    def _delta(self, kind: str, text: str) -> list[dict[str, Any]]:
        field, delta_type = _TEXT_BLOCKS[kind]
        out = [] if self._open == kind else self._start(kind, {"type": kind, field: "", **self._signature(kind)})
        if kind == "thinking":
            self._thinking.update(text.encode())
        return out + [self._block_delta({"type": delta_type, field: text})]

    @staticmethod
    def _signature(kind: str) -> dict[str, str]:
        """A thinking block starts with an empty signature (its own comes in a signature_delta before it stops)."""
        return {"signature": ""} if kind == "thinking" else {}

    def _start(self, kind: str, block: dict[str, Any]) -> list[dict[str, Any]]:
        out = self._stop()
        self._open = kind
        return out + [{"type": "content_block_start", "index": self._blocks, "content_block": block}]

    def _block_delta(self, delta: dict[str, Any]) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": self._blocks, "delta": delta}

    def _stop(self) -> list[dict[str, Any]]:
        if self._open is None:
            return []
        out = []
        if self._open == "thinking":
            signature = thinking_signature(self._thinking.digest())
            out.append(self._block_delta({"type": "signature_delta", "signature": signature}))
            self._thinking = hashlib.sha256()
        self._open = None
        self._blocks += 1
        return [*out, {"type": "content_block_stop", "index": self._blocks - 1}]

    async def closing(self) -> list[Any]:
        if self._finish == "length":
            reason = "max_tokens"
        elif self._finish == "tool_calls":
            reason = "tool_use"
        else:
            reason = "stop_sequence" if self._stop_string is not None else "end_turn"
        # Anthropic names the stop sequence only when it is the reason: null after a tool call one ended too
        delta = {"stop_reason": reason, "stop_sequence": self._stop_string if reason == "stop_sequence" else None}
        return [
            *([] if self._started else self._message_start()),
            *self._stop(),
            {"type": "message_delta", "delta": delta, "usage": self._usage()},
            {"type": "message_stop"},
        ]

    def _usage(self) -> dict[str, Any]:
        chat = self._renderer.usage()
        cached = chat["prompt_tokens_details"]["cached_tokens"]
        return {
            "input_tokens": chat["prompt_tokens"] - cached,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached,
            "output_tokens": chat["completion_tokens"],
        }

    def fold(self, events: list[Any]) -> dict[str, Any]:
        """message_start's message, its content built from the block events, message_delta's stop and usage."""
        message = dict(events[0]["message"])
        blocks: list[dict[str, Any]] = []
        partial: dict[int, list[str]] = {}
        for e in events:
            if e["type"] == "content_block_start":
                blocks.append(dict(e["content_block"]))
            elif e["type"] == "content_block_delta":
                delta, block = e["delta"], blocks[e["index"]]
                if delta["type"] == "input_json_delta":
                    partial.setdefault(e["index"], []).append(delta["partial_json"])
                elif delta["type"] == "signature_delta":
                    block["signature"] = delta["signature"]
                else:
                    field = "text" if delta["type"] == "text_delta" else "thinking"
                    block[field] += delta[field]
            elif e["type"] == "message_delta":
                message.update(e["delta"], usage=e["usage"])
        for index, fragments in partial.items():
            blocks[index]["input"] = completed_members("".join(fragments))
        return {**message, "content": blocks}

    def frame(self, item: Any) -> bytes:
        return b"event: " + item["type"].encode() + b"\n" + sse_frame(item)

    async def failure(self, error: APIError) -> bytes:
        return self.frame(anthropic_error(error))
