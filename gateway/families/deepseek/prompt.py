"""Native DeepSeek V4.1 and V4 prompt encoder (the models ship Python, not a Jinja template).

Layout: BOS; the system turn `<｜System｜>` + content + `## Tools` block (one
JSON object per tool and line) + `## Response Format:` block; user turns
`<｜User｜>…` into which tool results are merged as `<tool_result>…</tool_result>`
(parts joined by a blank line, results in the order of the calls); assistant
turns `reasoning</think>content` + `\n\n` + DSML calls + EOS; after each user
turn that an assistant answers, `<｜Assistant｜><think>` (thinking) or
`<｜Assistant｜></think>` (chat). In thinking mode the first turn is preceded
by a reasoning-effort line, and without tools the reasoning of assistant turns
before the last user turn is dropped.

V4 (`V4_STYLE`) differs only in: `<｜DSML｜tool_calls>` tags, no `<｜System｜>`
token, a system turn after the first is not answered, and the effort text is
V4's ("max" only). V3.2 has its own encoder (prompt_v32.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from gateway.grammars.json import response_schema
from gateway.types import ChatRequest

from .markers import ASSISTANT, BOS, EOS, SYSTEM, THINK_END, THINK_START, USER, V4, V41, Dialect

_EFFORT_LINE = "Reasoning Effort: {budget} (range 1-100, the higher the value, the more thorough the reasoning)\n\n"
_V4_MAX_EFFORT = (
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root cause, "
    "rigorously stress-testing your logic against all potential paths, edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n"
)
_RESPONSE_FORMAT = "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n{schema}"
_TOOLS = """## Tools

You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "{calls_open}" block like the following:

{calls_open}
{invoke_open}
{parameter_open}$PARAMETER_VALUE{parameter_close}
...
{invoke_close}
{invoke_open2}
...
{invoke_close}
{calls_close}

String parameters should be specified as is and set `string="true"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON format and set `string="false"`.

If thinking_mode is enabled (triggered by {think_start}), you MUST output your complete reasoning inside {think_start}...{think_end} BEFORE any tool calls or final response.

Otherwise, output directly after {think_end} with tool calls or final response.

### Available Tool Schemas

{schemas}

You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.
"""
_FUNCTION_KEY_ORDER = ("name", "description", "parameters")
_ASKS_FOR_ANSWER = ("user", "developer")


@dataclass
class _Turn:
    """One message after tool results are merged into user turns."""

    role: str
    content: str = ""
    reasoning: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    parts: list[tuple[str, str | None]] = field(default_factory=list)
    """User turns: (rendered part, tool_call_id of a tool result or None)."""
    declarations: str = ""
    """The system turn: the `## Tools` and `## Response Format:` blocks."""


@dataclass(frozen=True)
class Style:
    """What differs between the V4 and V4.1 encoders."""

    dialect: Dialect
    system_token: str
    """Written before the system turn's content (V4.1's `<｜System｜>`; V4 has none)."""
    effort_prefix: Callable[[int], str]
    """The first turn's reasoning-effort text in thinking mode, from the 1–100 budget."""
    system_asks: bool
    """Whether a system turn after the first is answered like a user turn (V4.1)."""


V41_STYLE = Style(V41, SYSTEM, lambda budget: _EFFORT_LINE.format(budget=budget), True)
V4_STYLE = Style(V4, "", lambda budget: _V4_MAX_EFFORT if budget >= 100 else "", False)
"""V4 (the "preview" effort profile): only `max` adds an effort text."""


def render_prompt(request: ChatRequest, thinking: bool, effort: int, style: Style = V41_STYLE) -> str:
    """The full prompt text of `request` in `style`; control tokens appear spelled out."""
    dialect = style.dialect
    messages = list(request.messages)
    prefill = messages.pop() if continues_final(request) else None
    turns = _merge_tool_results(messages)
    tools = request.tools if request.tool_choice != "none" else []
    declarations = _declarations(tools, response_schema(request.response_format), dialect)
    if declarations:
        if not turns or turns[0].role != "system":
            turns.insert(0, _Turn("system"))
        turns[0].declarations = declarations
    drop_old_reasoning = thinking and not tools
    if drop_old_reasoning:
        turns = _without_old_reasoning(turns, style.system_asks)
    last_user = _last_user_index(turns, style.system_asks)
    prefix = style.effort_prefix(effort) if thinking else ""
    out = [BOS]
    for index, turn in enumerate(turns):
        if index == 0 and (prefix or turn.role == "system"):
            out.append(style.system_token + prefix)
        keep_reasoning = thinking and (not drop_old_reasoning or index > last_user)
        out.append(_render_turn(turn, index, keep_reasoning, style))
        is_last = index == len(turns) - 1
        answered = (
            turns[index + 1].role == "assistant"
            if not is_last
            else request.add_generation_prompt or prefill is not None
        )
        if answered and _asks(turn, index, style.system_asks):
            opens_reasoning = thinking and (not drop_old_reasoning or index >= last_user)
            out.append(ASSISTANT + (THINK_START if opens_reasoning else THINK_END))
    if prefill is not None:
        out.append(render_prefill(prefill, thinking))
    return "".join(out)


def prompt_ends_in_reasoning(request: ChatRequest, thinking: bool) -> bool:
    """Whether the model's output starts inside the reasoning block."""
    if not thinking:
        return False
    return not (continues_final(request) and request.messages[-1].get("content"))


def render_calls(tool_calls: list[dict[str, Any]], dialect: Dialect = V41) -> str:
    """The DSML block of an assistant's calls (arguments already parsed into dicts)."""
    invokes = []
    for call in tool_calls:
        fn = call["function"]
        arguments = "\n".join(
            dialect.parameter_open(key, isinstance(value, str)) + _value_text(value) + dialect.parameter_close
            for key, value in fn["arguments"].items()
        )
        invokes.append(f"{dialect.invoke_open(fn['name'])}\n{arguments}\n{dialect.invoke_close}")
    return f"{dialect.calls_open}\n" + "\n".join(invokes) + f"\n{dialect.calls_close}"


def continues_final(request: ChatRequest) -> bool:
    return request.continue_final_message and bool(request.messages) and request.messages[-1]["role"] == "assistant"


def _value_text(value: Any) -> str:
    return value if isinstance(value, str) else _json(value)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _declarations(tools: list[dict[str, Any]], schema: dict[str, Any] | None, dialect: Dialect) -> str:
    blocks = []
    if tools:
        schemas = "\n".join(_json(_ordered_function(t["function"])) for t in tools)
        blocks.append(_tools_block(schemas, dialect))
    if schema is not None:
        blocks.append(_RESPONSE_FORMAT.format(schema=_json(schema)))
    return "".join("\n\n" + block for block in blocks)


def _tools_block(schemas: str, dialect: Dialect) -> str:
    return _tools_template(dialect).format(schemas=schemas)


@cache
def _tools_template(dialect: Dialect) -> str:
    """The tools block in `dialect`'s tags, with `{schemas}` still to fill."""
    return _TOOLS.format(
        calls_open=dialect.calls_open,
        calls_close=dialect.calls_close,
        invoke_open=dialect.invoke_open("$TOOL_NAME"),
        invoke_open2=dialect.invoke_open("$TOOL_NAME2"),
        invoke_close=dialect.invoke_close,
        parameter_open=dialect.parameter_named + '$PARAMETER_NAME" string="true|false">',
        parameter_close=dialect.parameter_close,
        think_start=THINK_START,
        think_end=THINK_END,
        schemas="{schemas}",
    )


def _ordered_function(function: dict[str, Any]) -> dict[str, Any]:
    """The function declaration with OpenAI's field order first (the prompt shows it verbatim)."""
    ordered = {key: function[key] for key in _FUNCTION_KEY_ORDER if key in function}
    ordered.update((key, value) for key, value in function.items() if key not in ordered)
    return ordered


def _merge_tool_results(messages: list[dict[str, Any]]) -> list[_Turn]:
    """Turns with tool results and consecutive user messages merged into one user turn."""
    turns: list[_Turn] = []
    call_order: dict[str, int] = {}
    for message in messages:
        role = message["role"]
        if role in ("user", "tool"):
            if role == "tool":
                part = (f"<tool_result>{message.get('content') or ''}</tool_result>", message.get("tool_call_id") or "")
            else:
                part = (message.get("content") or "", None)
            if not turns or turns[-1].role != "user":
                turns.append(_Turn("user"))
            turns[-1].parts.append(part)
            continue
        _sort_results(turns, call_order)
        if role == "assistant" and message.get("tool_calls"):
            call_order = {call["id"]: i for i, call in enumerate(message["tool_calls"]) if call.get("id")}
        turns.append(
            _Turn(
                role,
                content=message.get("content") or "",
                reasoning=message.get("reasoning_content") or "",
                tool_calls=message.get("tool_calls") or [],
            )
        )
    _sort_results(turns, call_order)
    return turns


def _sort_results(turns: list[_Turn], call_order: dict[str, int]) -> None:
    """Put the tool results of the last user turn in the order the assistant made the calls."""
    if not turns or turns[-1].role != "user" or not call_order:
        return
    parts = turns[-1].parts
    slots = [i for i, (_, call_id) in enumerate(parts) if call_id is not None]
    if len(slots) < 2:
        return
    ordered = sorted((parts[i] for i in slots), key=lambda part: call_order.get(part[1], 0))
    for slot, part in zip(slots, ordered):
        parts[slot] = part


def _asks(turn: _Turn, index: int, system_asks: bool) -> bool:
    """Whether an assistant answers this turn (user, developer, and with V4.1 a later system turn)."""
    return turn.role in _ASKS_FOR_ANSWER or (system_asks and turn.role == "system" and index > 0)


def _last_user_index(turns: list[_Turn], system_asks: bool) -> int:
    for index in range(len(turns) - 1, -1, -1):
        if _asks(turns[index], index, system_asks):
            return index
    return -1


def _without_old_reasoning(turns: list[_Turn], system_asks: bool) -> list[_Turn]:
    """Before the last user turn: assistants lose their reasoning, developer turns go."""
    last_user = _last_user_index(turns, system_asks)
    kept = []
    for index, turn in enumerate(turns):
        if index >= last_user or turn.role in ("user", "system"):
            kept.append(turn)
        elif turn.role == "assistant":
            kept.append(_Turn("assistant", content=turn.content, tool_calls=turn.tool_calls))
    return kept


def _render_turn(turn: _Turn, index: int, keep_reasoning: bool, style: Style) -> str:
    if turn.role == "system":
        return (style.system_token if index > 0 else "") + turn.content + turn.declarations
    if turn.role == "developer":
        return USER + turn.content + turn.declarations
    if turn.role == "user":
        return USER + "\n\n".join(text for text, _ in turn.parts)
    if turn.role == "assistant":
        reasoning = turn.reasoning + THINK_END if keep_reasoning else ""
        calls = "\n\n" + render_calls(turn.tool_calls, style.dialect) if turn.tool_calls else ""
        return reasoning + turn.content + calls + EOS
    raise ValueError(f"the deepseek families cannot render role {turn.role!r}")


def render_prefill(message: dict[str, Any], thinking: bool) -> str:
    """The start of the answer the model continues (continue_final_message)."""
    content = message.get("content") or ""
    if not thinking:
        return content
    reasoning = message.get("reasoning_content") or ""
    return reasoning + THINK_END + content if content else reasoning
