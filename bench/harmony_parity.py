"""gpt_oss prompts against openai-harmony's own renderer (the library vLLM renders gpt-oss prompts with).

openai-harmony is not a dependency: install it apart (`pip install --no-deps --target DIR openai-harmony==0.0.8`,
then PYTHONPATH=DIR) and point it at an o200k_base.tiktoken (TIKTOKEN_ENCODINGS_BASE=DIR; this script writes one
from quicktok's o200k ranks, byte-identical to OpenAI's, sha256 446a9538…). Each case is a request (tools, a
conversation) rendered by harmony and by the gpt_oss family; the table counts the equal renders, then prints the
first differences. `--write` records each request and harmony's render in tests/data/harmony_renders.json,
which tests/test_gpt_oss.py checks without harmony.

    TIKTOKEN_ENCODINGS_BASE=/tmp/tk PYTHONPATH=$PWD:/tmp/harmony python bench/harmony_parity.py [--write]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gateway.families.gpt_oss.prompt import render_prompt
from gateway.types import ChatRequest

RECORDED = ROOT / "tests/data/harmony_renders.json"
DATE = "2025-06-28"


def _tool(name: str, parameters: Any, description: str = "d") -> dict[str, Any]:
    function = {"name": name, "description": description}
    return {"type": "function", "function": function if parameters is None else {**function, "parameters": parameters}}


def _one(spec: dict[str, Any], required: bool = False) -> dict[str, Any]:
    return {"type": "object", "properties": {"p": spec}, **({"required": ["p"]} if required else {})}


FIELDS: dict[str, dict[str, Any]] = {
    "string": {"type": "string"}, "string default": {"type": "string", "default": "x \"q\""},
    "integer default": {"type": "integer", "default": 3}, "number default": {"type": "number", "default": 0.5},
    "object default": {"type": "object", "default": {"a": [1, "ü"]}}, "null default": {"type": "string", "default": None},
    "enum": {"type": "string", "enum": ["a", "b"]}, "enum default": {"type": "string", "enum": ["a", "b"], "default": "a"},
    "integer enum": {"type": "integer", "enum": [1, 2]}, "enum without type": {"enum": ["a", 1]},
    "mixed enum": {"type": "string", "enum": ["a", 1, None]}, "type list": {"type": ["string", "integer", "null"]},
    "anyOf": {"anyOf": [{"type": "string"}, {"type": "integer"}]}, "allOf": {"allOf": [{"type": "string"}]},
    "$ref": {"$ref": "#/$defs/x"}, "const": {"const": "k"}, "null": {"type": "null"}, "no type": {},
    "oneOf": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
    "oneOf described": {"description": "D", "oneOf": [{"type": "string", "description": "D"},
                                                      {"type": "integer", "description": "I", "default": 2}]},
    "oneOf own description": {"description": "P", "default": "z",
                              "oneOf": [{"type": "string", "description": "S"}, {"type": "null"}]},
    "oneOf with object": {"oneOf": [{"type": "object", "properties": {"k": {"type": "string"}}}, {"type": "string"}]},
    "oneOf nullable": {"oneOf": [{"type": "string", "nullable": True}, {"type": "integer"}]},
    "nullable": {"type": "string", "nullable": True}, "nullable type list": {"type": ["string", "null"], "nullable": True},
    "array": {"type": "array", "items": {"type": "integer"}}, "array without items": {"type": "array"},
    "array of enums": {"type": "array", "items": {"type": "string", "enum": ["x", "y"]}},
    "array of objects": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
    "array of arrays": {"type": "array", "items": {"type": "array", "items": {"type": "boolean"}}},
    "object": {"type": "object", "description": "O", "required": ["a"], "properties": {
        "a": {"type": "number", "description": "A"}, "b": {"type": "object", "properties": {"c": {"type": "boolean"}}}}},
    "empty object": {"type": "object"}, "boolean": {"type": "boolean"},
    "multi-line description": {"type": "string", "description": "l1\nl2"},
    "title and examples": {"type": "string", "title": "T", "description": "D", "examples": ["e1", 2, "e\"3"]},
    "unicode": {"type": "string", "description": "Zürich 東京 😀", "enum": ["ü", "東"]},
}  # fmt: skip
TOOLSETS: dict[str, list[dict[str, Any]]] = {
    **{f"field: {name}": [_tool("f", _one(spec))] for name, spec in FIELDS.items()},
    **{f"required field: {name}": [_tool("f", _one(spec, True))] for name in ("string", "oneOf", "object")
       for spec in [FIELDS[name]]},
    "no parameters": [_tool("f", None)],
    "empty properties": [_tool("f", {"type": "object", "properties": {}})],
    "parameters without a type": [_tool("f", {"properties": {"a": {"type": "string"}}})],
    "described parameters": [_tool("f", {"type": "object", "description": "top", "properties": {}})],
    "oneOf parameters": [_tool("f", {"oneOf": [{"type": "object", "properties": {"a": {"type": "string"}}},
                                               {"type": "object", "properties": {"b": {"type": "integer"}}}]})],
    "tool descriptions": [_tool("a", None, "line1\nline2\r\n\nline4\n"), _tool("b", None, ""),
                          _tool("fs.read-file_v2", _one(FIELDS["string"]), "x")],
}  # fmt: skip
CALLED = [_tool("get_weather", _one({"type": "string"}))]
ARGUMENTS = json.dumps({"p": "Paris"})
CONVERSATIONS: dict[str, list[dict[str, Any]]] = {
    "user": [{"role": "user", "content": "hi"}],
    "system and user": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
    "multi-turn": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                   {"role": "user", "content": "c"}],
    "old reasoning dropped": [{"role": "user", "content": "a"},
                              {"role": "assistant", "content": "b", "reasoning_content": "r"},
                              {"role": "user", "content": "c"}],
}  # fmt: skip


def cases() -> dict[str, ChatRequest]:
    """Every request, by name: each tool set with one user turn, then each conversation with and without tools."""
    requests = {
        f"tools / {name}": ChatRequest(messages=CONVERSATIONS["user"], tools=tools) for name, tools in TOOLSETS.items()
    }
    for name, messages in CONVERSATIONS.items():
        requests[f"conversation / {name}"] = ChatRequest(messages=messages)
        requests[f"conversation / {name} / tools"] = ChatRequest(messages=messages, tools=CALLED)
    for request in requests.values():
        request.template_kwargs = {"current_date": DATE}
    return requests


def harmony_render(request: ChatRequest) -> str:
    """openai-harmony's render of `request` (built as vLLM builds gpt-oss conversations), as text."""
    import openai_harmony as h

    encoding = h.load_harmony_encoding(h.HarmonyEncodingName.HARMONY_GPT_OSS)
    system = h.SystemContent.new().with_conversation_start_date(DATE).with_reasoning_effort(h.ReasoningEffort.MEDIUM)
    messages = [h.Message.from_role_and_content(h.Role.SYSTEM, system)]
    instructions = "\n\n".join(m["content"] for m in request.messages if m["role"] == "system")
    developer = h.DeveloperContent.new()
    if instructions:
        developer = developer.with_instructions(instructions)
    if request.tools:
        tools = [h.ToolDescription.new(t["function"]["name"], t["function"]["description"],
                                       parameters=t["function"].get("parameters")) for t in request.tools]  # fmt: skip
        developer = developer.with_function_tools(tools)
    if instructions or request.tools:
        messages.append(h.Message.from_role_and_content(h.Role.DEVELOPER, developer))
    last_user = max(i for i, m in enumerate(request.messages) if m["role"] == "user")
    for i, m in enumerate(request.messages):
        if m["role"] == "user":
            messages.append(h.Message.from_role_and_content(h.Role.USER, m["content"]))
        elif m["role"] == "assistant":
            if m.get("reasoning_content") and i > last_user:
                messages.append(
                    h.Message.from_role_and_content(h.Role.ASSISTANT, m["reasoning_content"]).with_channel("analysis")
                )
            messages.append(h.Message.from_role_and_content(h.Role.ASSISTANT, m["content"]).with_channel("final"))  # fmt: skip
    ids = encoding.render_conversation_for_completion(h.Conversation.from_messages(messages), h.Role.ASSISTANT)
    return encoding.decode(ids)


def o200k_file(folder: Path) -> None:
    """Writes OpenAI's o200k_base.tiktoken (base64 token, rank per line) from quicktok's o200k ranks."""
    from backends.quicktok_vocab import quicktok_data, read_vocab

    ranks = read_vocab(quicktok_data() / "o200k.vocab")
    folder.mkdir(parents=True, exist_ok=True)
    lines = (base64.b64encode(token) + b" " + str(rank).encode() for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]))  # fmt: skip
    (folder / "o200k_base.tiktoken").write_bytes(b"\n".join(lines) + b"\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"record harmony's renders in {RECORDED}")
    parser.add_argument("--show", type=int, default=5, help="differences printed")
    args = parser.parse_args()
    folder = Path(os.environ.setdefault("TIKTOKEN_ENCODINGS_BASE", "/tmp/harmony_encodings"))
    if not (folder / "o200k_base.tiktoken").exists():
        o200k_file(folder)
    renders = {name: harmony_render(request) for name, request in cases().items()}
    ours = {name: render_prompt(request) for name, request in cases().items()}
    differ = [name for name in renders if renders[name] != ours[name]]
    print(f"| cases | equal to openai-harmony | differ |\n|---:|---:|---:|\n| {len(renders)} | "
          f"{len(renders) - len(differ)} | {len(differ)} |")  # fmt: skip
    for name in differ[: args.show]:
        print(f"    {name}:\n        harmony {renders[name]!r}\n        ours    {ours[name]!r}")
    if args.write:
        recorded = {name: {"messages": request.messages, "tools": request.tools, "date": DATE, "harmony": renders[name]}
                    for name, request in cases().items()}  # fmt: skip
        RECORDED.write_text(json.dumps(recorded, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
