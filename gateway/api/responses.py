"""The OpenAI Responses API: POST /v1/responses (and its input_tokens count), the stored responses' GET, DELETE,
input_items and cancel.

A request becomes the same chat request as /v1/chat/completions; `ResponsesDoor` turns the chat
chunks that `ChatRenderer` makes into Responses events, and the body is those events folded.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from backends.asgi import json_response, sse_frame
from gateway.api.admission import request_policy
from gateway.api.bodies import read_json
from gateway.api.chat import ChatRenderer, start_chat
from gateway.api.door_params import RESPONSES_PARAMS
from gateway.api.response_store import ResponseStore
from gateway.api.streaming import respond_door
from gateway.api.tenancy import tenant_of
from gateway.errors import APIError, invalid
from gateway.ids import item_id
from gateway.models.planning import encode_chat_off_loop
from gateway.models.registry import ModelRegistry, served_model
from gateway.types import ChatRequest, ChoiceStep
from gateway.validation.fields import Fields, note_ignored
from gateway.validation.responses import (
    INPUT_ITEMS_QUERY,
    RESPONSES,
    RETRIEVE_QUERY,
    ResponsesRequest,
    check_call_outputs,
    check_reasoning_followed,
    items_to_messages,
    parse_responses_request,
)


def request_owner(request: Request) -> str | None:
    """Whose stored responses this request may see: its tenant's name, None when the gateway runs open."""
    tenant = tenant_of(request)
    return None if tenant is None else tenant.caller.policy.tenant


async def _chat_of(
    parsed: ResponsesRequest, store: ResponseStore, owner: str | None, max_body: int
) -> tuple[ChatRequest, list[dict[str, Any]]]:
    """The chat a Responses body asks for (its previous response's history first, references resolved), and that
    history; `parsed.items` resolved in place."""
    history: list[dict[str, Any]] = []
    previous_output: list[dict[str, Any]] = []
    if parsed.previous_response_id is not None:
        previous = await store.get(parsed.previous_response_id, owner)
        if previous is None:
            raise _previous_not_found(parsed.previous_response_id)
        history, previous_output = previous["history"], previous["response"]["output"]
    parsed.items = await resolve_references(parsed.items, store, owner, max_body)
    check_unique_ids(parsed.items)
    check_call_outputs(history, previous_output, parsed.items)
    check_reasoning_followed(parsed.items)
    chat = ChatRequest(
        messages=items_to_messages(history + parsed.items, parsed.instructions),
        tools=parsed.tools,
        tool_choice=parsed.tool_choice,
        parallel_tool_calls=parsed.parallel_tool_calls,
        response_format=parsed.response_format,
        reasoning_effort=parsed.reasoning_effort,
        strict_by_default=True,
    )
    if not chat.messages:
        raise invalid("'input' must hold at least one item", "input")
    return chat, history


async def create_response(request: Request, registry: ModelRegistry, store: ResponseStore, max_body: int) -> Response:
    body = await read_json(request, max_body)
    note_ignored(body, RESPONSES)
    parsed = parse_responses_request(body)
    model = served_model(registry, parsed.model)
    owner = request_owner(request)
    chat, history = await _chat_of(parsed, store, owner, max_body)
    rid = item_id("resp")
    events, renderer, plan = await start_chat(
        request,
        model,
        chat,
        parsed.settings,
        rid,
        param="input",
        max_tokens_param="max_output_tokens",
        params=RESPONSES_PARAMS,
        body_tools=body.get("tools") or (),
    )

    async def keep(response: dict[str, Any], output: list[dict[str, Any]]) -> None:
        if parsed.store:
            record = {"id": rid, "owner": owner, "response": response, "input_items": parsed.items}
            await store.put({**record, "history": history + parsed.items + output})

    held = plan.tool_strict or {}
    for tool in parsed.echo["tools"]:  # as the grammar holds it (an omitted strict may have fallen back)
        tool["strict"] = held.get(tool["name"], tool["strict"])
    door = ResponsesDoor(renderer, _response(rid, model.id, parsed), keep)
    return await respond_door(request, events, door, parsed.settings.stream)


async def count_input_tokens(
    request: Request, registry: ModelRegistry, store: ResponseStore, max_body: int
) -> Response:
    """POST /v1/responses/input_tokens: the prompt a create with this body would send, counted whole (as
    /v1/messages/count_tokens counts a Messages prompt)."""
    body = await read_json(request, max_body)
    note_ignored(body, RESPONSES)
    parsed = parse_responses_request(body)
    model = served_model(registry, parsed.model)
    chat, _ = await _chat_of(parsed, store, request_owner(request), max_body)
    chat = request_policy(request).check_tools(chat, body.get("tools") or (), RESPONSES_PARAMS)  # as rendered
    _, ids = await encode_chat_off_loop(model, chat, past_context_ok=True)
    return json_response({"object": "response.input_tokens", "input_tokens": len(ids)})


async def get_response(request: Request, store: ResponseStore) -> Response:
    rid = request.path_params["response_id"]
    if Fields(dict(request.query_params), RETRIEVE_QUERY).string("stream") == "true":
        raise invalid(
            "'stream' true is not supported: only background responses are streamed again, and this gateway "
            "does not run responses in the background",
            "stream",
            "unsupported_parameter",
        )
    record = await store.get(rid, request_owner(request))
    if record is None:
        raise _not_found(rid, "response_id")
    return json_response(record["response"])


async def delete_response(request: Request, store: ResponseStore) -> Response:
    rid = request.path_params["response_id"]
    if not await store.delete(rid, request_owner(request)):
        raise _not_found(rid, "response_id")
    return json_response({"id": rid, "object": "response.deleted", "deleted": True})


async def cancel_response(request: Request, store: ResponseStore) -> Response:
    """POST .../cancel: OpenAI cancels only background responses, and this gateway runs none in the background."""
    rid = request.path_params["response_id"]
    if await store.get(rid, request_owner(request)) is None:
        raise _not_found(rid, "response_id")
    raise invalid(
        f"{rid!r} cannot be cancelled: only responses created with 'background' true can be, and this gateway "
        "does not run responses in the background",
        "response_id",
    )


async def list_input_items(request: Request, store: ResponseStore) -> Response:
    """A stored response's input items, newest first unless `order=asc`; `after` and `limit` page them."""
    rid = request.path_params["response_id"]
    record = await store.get(rid, request_owner(request))
    if record is None:
        raise _not_found(rid, "response_id")
    query = Fields(dict(request.query_params), INPUT_ITEMS_QUERY)
    order = query.string("order")
    limit = query.integer_text("limit")
    items = record["input_items"] if order == "asc" else record["input_items"][::-1]
    after = query.string("after")
    if after is not None:
        ids = [i["id"] for i in items]
        if after not in ids:
            raise invalid(f"'after' names no input item of {rid!r}", "after")
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    return json_response(
        {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(items) > len(page),
        }
    )


async def resolve_references(
    items: list[dict[str, Any]], store: ResponseStore, owner: str | None, max_bytes: int
) -> list[dict[str, Any]]:
    """Each `item_reference` replaced by the item it names: one of a stored response of the same tenant (another
    tenant's reads as missing), or OpenAI's 404. The items referenced weigh as if sent inline (each reference its
    item's JSON): past `max_bytes`, the body bound, a 400, so a few bytes of references make no input of gigabytes."""
    wanted = [item["id"] for item in items if item["type"] == "item_reference"]
    if not wanted:
        return items
    found = await store.get_items(wanted, owner)
    missing = next((item_id for item_id in wanted if item_id not in found), None)
    if missing is not None:
        raise APIError(
            f"Item with id {missing!r} not found. Items are not persisted when `store` is set to false. "
            "Try again with `store` set to true, or remove this item from your input.",
            status=404,
            param="input",
        )
    sizes = {item_id: len(orjson.dumps(item)) for item_id, item in found.items()}
    if (resolved := sum(sizes[item_id] for item_id in wanted)) > max_bytes:
        raise invalid(
            f"the items 'input' references come to {resolved} bytes (each reference counts its item), past the "
            f"{max_bytes}-byte bound of a request body",
            "input",
        )
    return [found[item["id"]] if item["type"] == "item_reference" else item for item in items]


def check_unique_ids(items: list[dict[str, Any]]) -> None:
    """OpenAI's 400 for an input holding one item twice (inline, or an `item_reference` to one already there): the
    model would read it twice. Its words, `param` "input"."""
    seen: set[str] = set()
    for item in items:
        if item["id"] in seen:
            raise invalid(
                f"Duplicate item found with id {item['id']}. Remove duplicate items from your input and try again.",
                "input",
            )
        seen.add(item["id"])


def _not_found(rid: str, param: str) -> APIError:
    return APIError(f"no stored response with id {rid!r}", status=404, param=param, code="response_not_found")


def _previous_not_found(rid: str) -> APIError:
    """OpenAI's answer, word for word, to a previous_response_id it cannot find: a 400 whose code clients (Codex, the
    proxies in front of it) recover on by sending the whole conversation again."""
    return invalid(
        f"Previous response with id {rid!r} not found.", "previous_response_id", "previous_response_not_found"
    )


def _response(rid: str, model: str, parsed: ResponsesRequest) -> dict[str, Any]:
    """The Response object before any output: everything the request fixed."""
    return {
        "id": rid,
        "object": "response",
        "created_at": int(time.time()),
        "completed_at": None,
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "instructions": parsed.instructions,
        "model": model,
        "output": [],
        "parallel_tool_calls": parsed.parallel_tool_calls,
        "previous_response_id": parsed.previous_response_id,
        "store": parsed.store,
        "metadata": parsed.metadata,
        "background": False,
        "service_tier": "default",
        "usage": None,
        **parsed.echo,
    }


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


class _OpenItem:
    """The output item being streamed: its index, the item and the text it has gathered."""

    def __init__(self, index: int, item: dict[str, Any]):
        self.index = index
        self.item = item
        self.text: list[str] = []
        self.logprobs: list[dict[str, Any]] = []


class _TextLogprobs:
    """Which token logprobs belong to the message text a chunk shows. A chunk that shows nothing (a marker's first
    tokens the parser holds, a character's first bytes, a stop string's start) keeps its tokens until text shows;
    those of reasoning, of a call's markup, of a matched stop string and the end token belong to no text."""

    def __init__(self) -> None:
        self._held: list[dict[str, Any]] = []

    def of(self, delta: dict[str, Any], logprobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        text = delta.get("content")
        if not text:
            self._held = [] if delta.get("reasoning_content") or delta.get("tool_calls") else self._held + logprobs
            return []
        after_reasoning = bool(delta.get("reasoning_content"))  # the held tokens were the reasoning's
        tokens, self._held = logprobs if after_reasoning else self._held + logprobs, []
        return _spelling(tokens, text.encode(), last=after_reasoning)


def _spelling(tokens: list[dict[str, Any]], text: bytes, last: bool) -> list[dict[str, Any]]:
    """The tokens whose bytes spell `text` (markup, a stop string or the end token may come before or after it in
    one chunk): where it is first spelled, or last (after reasoning); all of them where it is spelled nowhere."""
    spelled = b"".join(bytes(token["bytes"]) for token in tokens)
    start = spelled.rfind(text) if last else spelled.find(text)
    if start < 0:
        return tokens
    end, at, out = start + len(text), 0, []
    for token in tokens:
        size = len(token["bytes"])
        if at < end and at + size > start:
            out.append(token)
        at += size
    return out


class ResponsesDoor:
    """Chat chunks of one choice → Responses stream events with sequence numbers; folded into a Response."""

    end = b""

    def __init__(
        self,
        renderer: ChatRenderer,
        response: dict[str, Any],
        keep: Callable[[dict[str, Any], list[dict[str, Any]]], Awaitable[None]],
    ):
        self._renderer = renderer
        self._response = response
        self._keep = keep
        self._seq = 0
        self._output: list[dict[str, Any]] = []
        self._open: _OpenItem | None = None
        self._finish_reason: str | None = None
        self._summary = response["reasoning"]["summary"] is not None
        """The request asked for a reasoning summary: the reasoning is given as one too."""
        self._text_logprobs = _TextLogprobs()
        self._stored = False  # storing was tried: a failure after that (the store, the last events) stores nothing

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        out = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return out

    def _snapshot(self) -> dict[str, Any]:
        return {**self._response, "output": list(self._output)}

    def usage(self) -> dict[str, Any]:
        return self._renderer.usage()

    def opening(self) -> list[Any]:
        return [
            self._event("response.created", response=self._snapshot()),
            self._event("response.in_progress", response=self._snapshot()),
        ]

    def step(self, index: int, step: ChoiceStep) -> list[Any]:
        out: list[dict[str, Any]] = []
        for chunk in self._renderer.step(index, step):
            delta = chunk["delta"]
            if delta.get("reasoning_content"):
                out += self._reasoning_delta(delta["reasoning_content"])
            logprobs = (chunk["logprobs"] or {}).get("content")
            if logprobs:
                logprobs = self._text_logprobs.of(delta, logprobs)
            if delta.get("content"):
                out += self._text_delta(delta["content"], logprobs or [])
            for call in delta.get("tool_calls", ()):
                out += self._call_delta(call)
            self._finish_reason = chunk["finish_reason"] or self._finish_reason
        return out

    def _start(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        out = self._close()
        self._open = _OpenItem(len(self._output), item)
        return out + [self._event("response.output_item.added", output_index=self._open.index, item=dict(item))]

    def _where(self) -> dict[str, Any]:
        assert self._open is not None
        return {"item_id": self._open.item["id"], "output_index": self._open.index}

    def _text_delta(self, text: str, logprobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        if self._open is None or self._open.item["type"] != "message":
            item = {
                "id": item_id("msg"),
                "type": "message",
                "status": "in_progress",
                "role": "assistant",
                "content": [],
            }
            out += self._start(item)
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            out.append(self._event("response.content_part.added", **self._where(), content_index=0, part=part))
        self._open.text.append(text)
        self._open.logprobs += logprobs
        out.append(
            self._event("response.output_text.delta", **self._where(), content_index=0, delta=text, logprobs=logprobs)
        )
        return out

    def _reasoning_delta(self, text: str) -> list[dict[str, Any]]:
        """The model's reasoning as the item's `reasoning_text` content (OpenAI's and vLLM's for open models), and
        as its summary too when the request asked for one (no other summary is made here)."""
        out = []
        if self._open is None or self._open.item["type"] != "reasoning":
            out += self._start({"id": item_id("rs"), "type": "reasoning", "summary": []})
            part = {"type": "reasoning_text", "text": ""}
            out.append(self._event("response.content_part.added", **self._where(), content_index=0, part=part))
            if self._summary:
                part = {"type": "summary_text", "text": ""}
                added = "response.reasoning_summary_part.added"
                out.append(self._event(added, **self._where(), summary_index=0, part=part))
        self._open.text.append(text)
        out.append(self._event("response.reasoning_text.delta", **self._where(), content_index=0, delta=text))
        if self._summary:
            delta = "response.reasoning_summary_text.delta"
            out.append(self._event(delta, **self._where(), summary_index=0, delta=text))
        return out

    def _call_delta(self, call: dict[str, Any]) -> list[dict[str, Any]]:
        out = []
        if "id" in call:  # the first fragment of a call names it
            item = {
                "id": item_id("fc"),
                "type": "function_call",
                "status": "in_progress",
                "call_id": call["id"],
                "name": call["function"]["name"],
                "arguments": "",
            }
            out += self._start(item)
        fragment = call["function"].get("arguments", "")
        if fragment and self._open is not None:
            self._open.text.append(fragment)
            out.append(self._event("response.function_call_arguments.delta", **self._where(), delta=fragment))
        return out

    def _close(self, status: str = "completed") -> list[dict[str, Any]]:
        """The `.done` events of the open item; it joins the output (`incomplete` when the token budget cut it)."""
        current, self._open = self._open, None
        if current is None:
            return []
        where = {"item_id": current.item["id"], "output_index": current.index}
        text = "".join(current.text)
        item = current.item
        out = []
        if item["type"] == "message":
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": current.logprobs}
            out.append(
                self._event("response.output_text.done", **where, content_index=0, text=text, logprobs=current.logprobs)
            )
            out.append(self._event("response.content_part.done", **where, content_index=0, part=part))
            item = {**item, "status": status, "content": [part]}
        elif item["type"] == "reasoning":
            part = {"type": "reasoning_text", "text": text}
            out.append(self._event("response.reasoning_text.done", **where, content_index=0, text=text))
            out.append(self._event("response.content_part.done", **where, content_index=0, part=part))
            summary = [{"type": "summary_text", "text": text}] if self._summary else []
            for summary_part in summary:
                out.append(self._event("response.reasoning_summary_text.done", **where, summary_index=0, text=text))
                done = "response.reasoning_summary_part.done"
                out.append(self._event(done, **where, summary_index=0, part=summary_part))
            item = {**item, "summary": summary, "content": [part]}
        else:
            out.append(self._event("response.function_call_arguments.done", **where, name=item["name"], arguments=text))
            whole = status == "completed" or _is_json(text)  # a call cut after its arguments closed is whole
            item = {**item, "status": "completed" if whole else status, "arguments": text}
        self._output.append(item)
        out.append(self._event("response.output_item.done", output_index=current.index, item=item))
        return out

    async def closing(self) -> list[Any]:
        incomplete = self._finish_reason == "length"
        out = self._close("incomplete" if incomplete else "completed")
        response = self._snapshot()
        response.update(
            status="incomplete" if incomplete else "completed",
            incomplete_details={"reason": "max_output_tokens"} if incomplete else None,
            completed_at=None if incomplete else int(time.time()),
            usage=self._usage(),
        )
        self._stored = True
        await self._keep(response, self._output)
        out.append(self._event("response.incomplete" if incomplete else "response.completed", response=response))
        return out

    def _usage(self) -> dict[str, Any]:
        chat = self._renderer.usage()
        output = chat["completion_tokens"]
        reasoning = chat.get("completion_tokens_details", {}).get("reasoning_tokens", 0)  # counted as chat's
        return {
            "input_tokens": chat["prompt_tokens"],
            # backends report cache hits only; writing the prefix cache is not billed apart here
            "input_tokens_details": {
                "cached_tokens": chat["prompt_tokens_details"]["cached_tokens"],
                "cache_write_tokens": 0,
            },
            "output_tokens": output,
            "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": chat["total_tokens"],
        }

    def fold(self, events: list[Any]) -> dict[str, Any]:
        """The Response of the terminal event, its output rebuilt from the `output_item.done` events."""
        done = [e for e in events if e["type"] == "response.output_item.done"]
        return {**events[-1]["response"], "output": [e["item"] for e in sorted(done, key=lambda e: e["output_index"])]}

    def frame(self, item: Any) -> bytes:
        return b"event: " + item["type"].encode() + b"\n" + sse_frame(item)

    async def failure(self, error: APIError) -> bytes:
        """The terminal `response.failed` (the response as far as it came, status `failed`, stored unless storing
        is what failed), then OpenAI's error event (code, message, param) that also carries OpenResponses' `error`
        payload."""
        fields = {"code": error.code, "message": error.message, "param": error.param}
        out = self._close("incomplete")
        response = self._snapshot()
        # the Response's error code is one of OpenAI's few (the error event keeps the gateway's own)
        code = "rate_limit_exceeded" if error.status == 429 else "server_error"
        response.update(status="failed", error={"code": code, "message": error.message})
        response["usage"] = self._usage()
        if not self._stored:
            try:
                await self._keep(response, self._output)
            except APIError:  # the store is down: the events still tell the client
                pass
        out.append(self._event("response.failed", response=response))
        out.append(self._event("error", **fields, error={"type": error.type, **fields}))
        return b"".join(map(self.frame, out))
