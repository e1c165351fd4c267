"""Where a refusal the shared chat path makes points in the body a door received.

Grammars and the tenant's tool rules name chat's fields (`tools[i].function.parameters`, with `i` an index into the
tools the prompt declares, which `allowed_tools` may have narrowed; `response_format.json_schema.schema`); each door
names its own (`tools[j].input_schema` on /v1/messages, `text.format.schema` on /v1/responses), `j` counted in the
body's own `tools`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from gateway.grammars.json import RESPONSE_SCHEMA_PARAM
from gateway.types import ChatRequest

_CHAT_TOOL = re.compile(r"tools\[(\d+)\]\.function\.(name|parameters)")


@dataclass(frozen=True)
class DoorParams:
    """A door's names for a tool's fields and for the answer's schema, and the tool names its body declared."""

    tool: str
    """A tool in the body, `{i}` its index."""
    tool_schema: str
    response_schema: str
    declared: tuple[str, ...] = ()
    """The tool names in the body's order (a tool the prompt declares is found by its name, unique in a body)."""

    def declaring(self, names: Sequence[str]) -> DoorParams:
        """These params for a body that declared tools of these names, in this order."""
        return replace(self, declared=tuple(names))

    def of(self, param: str | None, chat: ChatRequest) -> str | None:
        """`param`, a chat field of `chat`, as this door's body names it."""
        if param is None:
            return None
        if param.startswith(RESPONSE_SCHEMA_PARAM):
            return self.response_schema + param[len(RESPONSE_SCHEMA_PARAM) :]
        match = _CHAT_TOOL.match(param)
        if match is None:
            return param
        index = int(match[1])
        name = chat.tools[index]["function"]["name"] if index < len(chat.tools) else None
        if name in self.declared:
            index = self.declared.index(name)
        field = self.tool_schema if match[2] == "parameters" else "name"
        return f"{self.tool.format(i=index)}.{field}{param[match.end() :]}"


CHAT_PARAMS = DoorParams("tools[{i}].function", "parameters", RESPONSE_SCHEMA_PARAM)
RESPONSES_PARAMS = DoorParams("tools[{i}]", "parameters", "text.format.schema")
MESSAGES_PARAMS = DoorParams("tools[{i}]", "input_schema", "output_config.format.schema")
