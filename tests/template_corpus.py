"""Held-out chat templates (`tests/data/chat_templates/`, indexed with their sources in `chat_templates.json`)
rendered over a matrix of conversations by the gateway's renderer and by transformers' own (the steps of
`apply_chat_template(tokenize=False)`, offline): the two must be equal, or both must raise (but for the differences
the index's `ours` justifies). tests/test_template_corpus.py runs it; `laced_conversations` feeds its shield check.

A conversation is what the gateway's validation hands a family (an assistant's calls with `content: None`, their
arguments an object, or a JSON string where the family encodes them so), rendered with and without a generation
prompt, continued where it ends with an assistant's content, and with each template kwarg the template reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

from gateway.prompts.template import render_chat_template, template_variables

CORPUS_PATH = Path(__file__).parent / "data" / "chat_templates.json"
TEMPLATES_DIR = CORPUS_PATH.parent / "chat_templates"
FROZEN_NOW = datetime(2026, 3, 7, 9, 30, 5)
"""The clock both renderers read (`strftime_now`), so a template's date is the same in both."""


@cache
def corpus() -> dict[str, Any]:
    """The corpus index, each template's text read from its file as `template`."""
    index = json.loads(CORPUS_PATH.read_text(encoding="utf-8"))
    for entry in index["templates"]:
        entry["template"] = (TEMPLATES_DIR / entry["file"]).read_text(encoding="utf-8")
    return index


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "The city's name."},
                    "days": {"type": "integer", "enum": [1, 2, 3]},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "The time now.",
            "parameters": {"type": "object", "properties": {}},
        },
    },
]
DOCUMENTS = [{"title": "Paris", "text": "Paris is the capital of France."}]
SYSTEM = {"role": "system", "content": "You are terse."}
ASK = {"role": "user", "content": "What is the weather in Paris?"}
ANSWER = {"role": "assistant", "content": "It is sunny."}
AGAIN = {"role": "user", "content": "And tomorrow?"}
REASONED = {"role": "assistant", "content": "It is sunny.", "reasoning_content": "The user asks about Paris."}
RESULT = {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}', "name": "get_weather"}
RESULT_2 = {"role": "tool", "tool_call_id": "call_2", "content": "09:30"}
FINAL = {"role": "assistant", "content": "21 degrees at 09:30."}


def _call(call_id: str, name: str, arguments: dict[str, Any], as_text: bool) -> dict[str, Any]:
    args: Any = json.dumps(arguments, ensure_ascii=False) if as_text else arguments
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def _calling(content: str | None, as_text: bool, *, both: bool = False) -> dict[str, Any]:
    calls = [_call("call_1", "get_weather", {"city": "Paris", "days": 2}, as_text)]
    if both:
        calls.append(_call("call_2", "get_time", {}, as_text))
    return {"role": "assistant", "content": content, "tool_calls": calls}


@cache
def conversations() -> dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]] | None]]:
    """Name → (messages, the tools declared: TOOLS, an empty list, or None)."""
    convs: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]] | None]] = {
        "user": ([ASK], None),
        "system": ([SYSTEM, ASK], None),
        "multi-turn": ([SYSTEM, ASK, ANSWER, AGAIN], None),
        "assistant-last": ([ASK, ANSWER], None),
        "assistant-last-space": ([ASK, {"role": "assistant", "content": "It is "}], None),
        "assistant-echo": ([ASK, {"role": "assistant", "content": ASK["content"]}], None),
        "assistant-empty": ([ASK, {"role": "assistant", "content": ""}], None),
        "tools": ([SYSTEM, ASK], TOOLS),
        "tools-no-system": ([ASK], TOOLS),
        "tools-empty": ([SYSTEM, ASK], []),
        "reasoning": ([ASK, REASONED, AGAIN], None),
        "reasoning-last": ([SYSTEM, ASK, REASONED], None),
    }
    for args in ("dict", "str"):
        as_text = args == "str"
        convs[f"call-{args}"] = ([ASK, _calling(None, as_text), RESULT], TOOLS)
        convs[f"call-content-{args}"] = ([SYSTEM, ASK, _calling("Let me check.", as_text), RESULT, FINAL], TOOLS)
        convs[f"parallel-{args}"] = ([ASK, _calling(None, as_text, both=True), RESULT, RESULT_2, FINAL, AGAIN], TOOLS)
    return convs


KWARG_VALUES: dict[str, tuple[Any, ...]] = {
    "enable_thinking": (True, False),
    "thinking": (True, False),
    "reasoning_effort": ("low", "high"),
    "add_vision_id": (True,),
    "preserve_thinking": (True,),
    "clear_thinking": (False,),
    "keep_past_thinking": (True,),
    "drop_thinking": (False,),
    "truncate_history_thinking": (False,),
    "thinking_budget": (128,),
    "reasoning_budget": (128,),
    "date_string": ("26 Jul 2024",),
    "builtin_tools": (["code_interpreter", "brave_search"],),
    "tools_in_user_message": (False,),
    "model_identity": ("You are Gateway.",),
    "safety_mode": ("NONE",),
}
"""Extra template kwargs (chat_template_kwargs) tried where a template reads them."""


@dataclass(frozen=True)
class Render:
    """One render of the matrix."""

    conversation: str
    add_generation_prompt: bool
    continue_final_message: bool = False
    kwargs: dict[str, Any] = field(default_factory=dict)
    documents: bool = False
    null_content_as_text: bool = False
    """A null content given as "" (as vLLM gives it), not left out (as transformers does)."""
    empty_tools_as_none: bool = False
    """An empty list of tools given as no tools."""

    @property
    def name(self) -> str:
        flags = "gen" if self.add_generation_prompt else "continue" if self.continue_final_message else "nogen"
        kw = ",".join(f"{k}={v}" for k, v in self.kwargs.items())
        return f"{self.conversation}/{flags}" + (f"/{kw}" if kw else "") + ("/documents" if self.documents else "")


def renders(source: str) -> Iterator[Render]:
    """The matrix for one template: every conversation with a generation prompt, without one where it ends with
    an assistant's or a tool's turn, continued where it ends with an assistant's content; then a few conversations
    with a generation prompt once per kwarg value the template reads."""
    read = template_variables(source)
    convs = conversations()
    for name, (messages, _tools) in convs.items():
        yield Render(name, True)
        if messages[-1]["role"] != "user":
            yield Render(name, False)
        if messages[-1]["role"] == "assistant" and isinstance(messages[-1]["content"], str):
            yield Render(name, False, continue_final_message=True)
    for kwarg, values in KWARG_VALUES.items():
        if kwarg in read:
            for value in values:
                for name in ("multi-turn", "reasoning", "reasoning-last", "call-content-dict", "tools"):
                    yield Render(name, True, kwargs={kwarg: value})
    if "documents" in read:
        yield Render("system", True, documents=True)


def render_inputs(render: Render) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    messages, tools = conversations()[render.conversation]
    if render.null_content_as_text:
        messages = [{**m, "content": ""} if m.get("content", "") is None else m for m in messages]
    return messages, None if render.empty_tools_as_none and tools == [] else tools


def holds_null_content(render: Render) -> bool:
    return any(m.get("content", "") is None for m in conversations()[render.conversation][0])


def declares_empty_tools(render: Render) -> bool:
    return conversations()[render.conversation][1] == []


def special_tokens() -> dict[str, str]:
    """The named special tokens both renderers give every template (a tokenizer's `special_tokens_map`)."""
    return {"bos_token": corpus()["bos_token"], "eos_token": corpus()["eos_token"], "unk_token": "<unk>"}


def ours(source: str, render: Render, specials: dict[str, str]) -> str:
    messages, tools = render_inputs(render)
    return render_chat_template(
        source,
        messages,
        tools=tools,
        documents=DOCUMENTS if render.documents else None,
        add_generation_prompt=render.add_generation_prompt,
        continue_final_message=render.continue_final_message,
        special_tokens=specials,
        template_kwargs=dict(render.kwargs),
    )


def transformers_render(source: str, render: Render, specials: dict[str, str]) -> str:
    """transformers' `apply_chat_template(tokenize=False)`: its message normalization, then its Jinja renderer."""
    from transformers.utils.chat_template_utils import _normalize_chat_messages, render_jinja_template

    messages, tools = render_inputs(render)
    rendered, _ = render_jinja_template(
        [_normalize_chat_messages(messages)],
        tools=tools,
        documents=DOCUMENTS if render.documents else None,
        chat_template=source,
        add_generation_prompt=render.add_generation_prompt,
        continue_final_message=render.continue_final_message,
        **{**specials, **render.kwargs},
    )
    return rendered[0]


class FrozenClock(datetime):
    """`datetime` whose `now()` is FROZEN_NOW."""

    @classmethod
    def now(cls, tz: Any = None) -> datetime:
        return FROZEN_NOW


def outcome(render_fn: Any, *args: Any) -> str | None:
    """The render's text, or None when it raised."""
    try:
        return render_fn(*args)
    except Exception:  # noqa: BLE001 - either renderer may raise anything a template does
        return None


LACED_KWARGS = ("date_string", "model_identity", "developer_preamble", "custom_instructions", "default_system_message")
"""String template kwargs (chat_template_kwargs, client-written) that templates write as they are."""


@dataclass(frozen=True)
class Laced:
    """A request whose client strings spell control tokens (or its neutral twin)."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    kwargs: dict[str, Any]


def laced_conversations(tokens: list[str], neutral: str | None = None) -> dict[str, Laced]:
    """Name → a request whose client strings (contents, reasoning, tool definitions, call ids, arguments and their
    keys, tool results, string template kwargs) spell each of `tokens`, then end with the first one's first half
    (which the template might complete); with `neutral`, the twin: each spelling and the half that instead."""
    parts = [*tokens, tokens[0][: max(1, len(tokens[0]) // 2)]]

    def text(base: str) -> str:
        return " ".join([base, *([neutral] * len(parts) if neutral is not None else parts)])

    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": text("The weather."),
                "parameters": {
                    "type": "object",
                    "properties": {text("city"): {"type": "string", "description": text("A city.")}},
                },
            },
        }
    ]
    arguments = {text("city"): text("Paris"), "days": [text("d")]}
    call = {"id": text("call_1"), "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
    chat = [
        {"role": "system", "content": text("Be terse.")},
        {"role": "user", "content": text("Hi.")},
        {"role": "assistant", "content": text("Hello."), "reasoning_content": text("Greet.")},
        {"role": "user", "content": text("Weather?")},
    ]
    calling = [
        {"role": "system", "content": text("Be terse.")},
        {"role": "user", "content": text("Weather?")},
        {"role": "assistant", "content": text("Checking."), "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": text("21"), "name": "get_weather"},
        {"role": "assistant", "content": text("Warm.")},
    ]
    kwargs = {name: text(name) for name in LACED_KWARGS}
    return {
        "ask": Laced(chat[1:2], tools, kwargs),
        "chat": Laced(chat, [], {}),
        "calling": Laced(calling, tools, {}),
    }
