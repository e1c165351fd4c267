"""The order rules of the doors' event streams, as the published streaming references lay them out: each check
returns the answer the events add up to, so a test can compare it with the same request's non-streamed body."""

from __future__ import annotations

from typing import Any

from jiter import from_json

_RESPONSE_ENDS = ("response.completed", "response.incomplete", "response.failed")
_TEXT_DONE = ("response.output_text.done", "response.reasoning_text.done", "response.reasoning_summary_text.done")
_BLOCK_DELTAS = {"text": {"text_delta"}, "thinking": {"thinking_delta", "signature_delta"}}


def responses_order(events: list[dict[str, Any]]) -> dict[str, Any]:
    """A Responses stream: created, in_progress, then each output item from `added` to `done` (its parts and
    deltas in between, naming its id and output_index), then one terminal event whose output is the done items;
    sequence numbers count up from 0. Returns the terminal event's response."""
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]
    body = events[2:]
    if body and body[-1]["type"] == "error":  # a failure: response.failed, then the error event
        body = body[:-1]
    assert body and body[-1]["type"] in _RESPONSE_ENDS, [e["type"] for e in events[-2:]]
    done: list[dict[str, Any]] = []
    item: dict[str, Any] | None = None
    texts: dict[str, list[str]] = {}
    """Each delta kind's fragments in the open item (a reasoning item streams its text and its summary)."""
    for e in body[:-1]:
        kind = e["type"]
        assert kind not in _RESPONSE_ENDS and kind != "error", kind
        if kind == "response.output_item.added":
            assert item is None and e["output_index"] == len(done), e
            item, texts = e["item"], {}
            continue
        assert item is not None and e["output_index"] == len(done), e
        if kind == "response.output_item.done":
            assert e["item"]["id"] == item["id"] and e["item"]["type"] == item["type"]
            done.append(e["item"])
            item = None
            continue
        assert e["item_id"] == item["id"], e
        if kind.endswith(".delta"):
            texts.setdefault(kind.removesuffix(".delta"), []).append(e["delta"])
        elif kind in _TEXT_DONE:
            assert e["text"] == "".join(texts.get(kind.removesuffix(".done"), ()))
        elif kind == "response.function_call_arguments.done":
            assert e["arguments"] == "".join(texts.get("response.function_call_arguments", ()))
    assert item is None, "an output item was left open"
    response = body[-1]["response"]
    assert response["output"] == done
    return response


def messages_order(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """An Anthropic Messages stream: message_start, content blocks started, extended and stopped one at a time
    with indexes counting up from 0 (each delta of its block's kind), then message_delta and message_stop, or an
    error event wherever the stream failed. Returns the message the events add up to (None after an error), each
    tool_use's input read from its concatenated partial_json as the anthropic client reads it."""
    events = [e for e in events if e["type"] != "ping"]
    assert events[0]["type"] == "message_start"
    failed = events[-1]["type"] == "error"
    if not failed:
        assert [e["type"] for e in events[-2:]] == ["message_delta", "message_stop"]
    blocks: list[dict[str, Any]] = []
    partial: list[str] = []
    open_index = None
    for e in events[1 : -1 if failed else -2]:
        kind = e["type"]
        if kind == "content_block_start":
            assert open_index is None and e["index"] == len(blocks), e
            open_index = e["index"]
            blocks.append(dict(e["content_block"]))
            partial = []
            continue
        assert e["index"] == open_index, e
        block = blocks[open_index]
        if kind == "content_block_stop":
            if block["type"] == "tool_use":
                block["input"] = from_json("".join(partial).encode(), partial_mode=True) if partial else {}
            open_index = None
            continue
        assert kind == "content_block_delta", kind
        delta = e["delta"]
        assert delta["type"] in _BLOCK_DELTAS.get(block["type"], {"input_json_delta"}), (block["type"], delta)
        if delta["type"] == "input_json_delta":
            partial.append(delta["partial_json"])
        elif delta["type"] == "signature_delta":
            block["signature"] = delta["signature"]
        else:
            key = block["type"]  # text_delta → text, thinking_delta → thinking
            block[key] += delta[key]
    if failed:
        return None
    assert open_index is None, "a content block was left open"
    return {**events[0]["message"], **events[-2]["delta"], "usage": events[-2]["usage"], "content": blocks}
