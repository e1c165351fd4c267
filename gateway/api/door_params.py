"""Where a refusal the shared chat path makes points in the body a door received.

Grammars and the tenant's tool rules name chat's fields (`tools[i].function.parameters`, with `i` an index into the
tools the prompt declares, which `allowed_tools` may have narrowed; `response_format.json_schema.schema`); each door
names its own (`tools[j].input_schema` on /v1/messages, `text.format.schema` on /v1/responses), `j` counted in the
body's own `tools`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.grammars.json import RESPONSE_SCHEMA_PARAM
from gateway.types import ChatRequest

_CHAT_TOOL = re.compile(r"tools\[(\d+)\]\.function\.(name|parameters)")


@dataclass(frozen=True)
class DoorParams:
    """A door's names for a tool's fields and for the answer's schema, and how it reads a tool's name in its body."""

    tool: str
    """A tool in the body, `{i}` its index."""
    tool_schema: str
    response_schema: str
    tool_name: Callable[[Any], str]
    """The name of one of the body's tools (unique in a body: a tool the prompt declares is found by it)."""

    def of(self, param: str | None, chat: ChatRequest, body_tools: Sequence[Any] = ()) -> str | None:
        """`param`, a chat field of `chat`, as this door's body, declaring `body_tools` in this order, names it."""
        if param is None:
            return None
        if param.startswith(RESPONSE_SCHEMA_PARAM):
            return self.response_schema + param[len(RESPONSE_SCHEMA_PARAM) :]
        match = _CHAT_TOOL.match(param)
        if match is None:
            return param
        index = int(match[1])
        name = chat.tools[index]["function"]["name"] if index < len(chat.tools) else None
        declared = [self.tool_name(t) for t in body_tools]
        if name in declared:
            index = declared.index(name)
        field = self.tool_schema if match[2] == "parameters" else "name"
        return f"{self.tool.format(i=index)}.{field}{param[match.end() :]}"


def _chat_tool_name(tool: Any) -> str:
    return tool["function"]["name"]


def _tool_name(tool: Any) -> str:
    return tool["name"]


CHAT_PARAMS = DoorParams("tools[{i}].function", "parameters", RESPONSE_SCHEMA_PARAM, _chat_tool_name)
RESPONSES_PARAMS = DoorParams("tools[{i}]", "parameters", "text.format.schema", _tool_name)
MESSAGES_PARAMS = DoorParams("tools[{i}]", "input_schema", "output_config.format.schema", _tool_name)
