"""Each family's own rendering of past calls, cut out as the model's output and parsed back: the same calls.

For every family on its offline vocabulary (tests/test_parser_corpus.py's tokenizers) and, where the family renders
a checkpoint's template, a real template from tests/data/chat_templates/: a conversation whose assistant turn holds
one or two calls (arguments with unicode, escapes, empty strings, nested objects and arrays, null, numbers,
booleans) is rendered as history; the text after the generation prompt (the family's stop token and trailing
whitespace dropped) is what the model would write, and the family's parser must return those calls, whole and
token by token, with thinking off and on. The table gives the round trips and the mismatches, then the first
mismatch of each family (text, wanted, got).

    python bench/family_roundtrip.py [--family deepseek_v31 ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.detokenizer import Detokenizer
from gateway.families import get_family
from gateway.families.base import Family, FamilyContext
from gateway.prompts.encoding import PromptEncoder
from gateway.prompts.shield import Shielder
from gateway.types import ChatRequest
from tests.family_checks import added_tokens, feed, joined_calls
from tests.template_corpus import TEMPLATES_DIR
from tests.test_parser_corpus import tokenizer

DS = ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>")
SUBJECTS: dict[str, tuple[str, str, str | None, tuple[str | None, str | None]]] = {
    # label: (family, tokenizer, template file or None for a native encoder, (bos, eos))
    "hermes": ("hermes", "qwen", "Qwen-Qwen3-0.6B.jinja", (None, "<|im_end|>")),
    "qwen3_xml": ("qwen3_xml", "qwen", "Qwen-Qwen3-Coder-30B-A3B-Instruct.jinja", (None, "<|im_end|>")),
    "qwen3.5_xml": ("qwen3_xml", "qwen", "Qwen-Qwen3.5-4B.jinja", (None, "<|im_end|>")),
    "glm45": ("glm45", "glm", "llama.cpp-GLM-4.6.jinja", (None, None)),
    "glm47": ("glm47", "glm", "zai-org-GLM-5.1.jinja", (None, None)),
    "deepseek_v3": ("deepseek_v3", "deepseek", "deepseek-ai-DeepSeek-R1.jinja", DS),
    "deepseek_v31": ("deepseek_v31", "deepseek", "vllm-deepseekv31.jinja", DS),
    "deepseek_v31_llama.cpp": ("deepseek_v31", "deepseek", "llama.cpp-deepseek-ai-DeepSeek-V3.1.jinja", DS),
    "deepseek_v32": ("deepseek_v32", "deepseek", None, DS),
    "deepseek_v4": ("deepseek_v4", "deepseek", None, DS),
    "deepseek_v41": ("deepseek_v41", "deepseek", None, DS),
    "kimi_k2": ("kimi_k2", "kimi", "moonshotai-Kimi-K2-Thinking.jinja", (None, None)),
    "kimi_k2_llama.cpp": ("kimi_k2", "kimi", "llama.cpp-moonshotai-Kimi-K2.jinja", (None, None)),
    "gpt_oss": ("gpt_oss", "harmony", None, (None, None)),
    "llama3_json": ("llama3_json", "llama3", None, (None, None)),
    "mistral": ("mistral", "tekken", None, (None, None)),
    "gemma4": ("gemma4", "gemma", "google-gemma-4-31B-it.jinja", ("<bos>", None)),
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "d", "parameters": {
        "type": "object", "properties": {
            "city": {"type": "string"}, "days": {"type": "integer"}, "opts": {"type": "object"},
            "tags": {"type": "array", "items": {"type": "string"}}, "ratio": {"type": "number"},
            "ok": {"type": "boolean"}, "note": {"type": ["string", "null"]}},
        "required": ["city"]}}},
    {"type": "function", "function": {"name": "ping", "description": "d", "parameters": {"type": "object",
                                                                                        "properties": {}}}},
]  # fmt: skip
Turn = tuple[str, str, list[tuple[str, dict[str, Any]]]]
"""An assistant turn: its content, its reasoning and its calls (name, arguments)."""
CALLS: list[list[tuple[str, dict[str, Any]]]] = [
    [("ping", {})],
    [("get_weather", {"city": "Zürich 東京 😀", "days": 3})],
    [("get_weather", {"city": 'a"b\\c\nd\t', "ratio": -0.5, "ok": False})],
    [("get_weather", {"city": "", "note": None})],
    [("get_weather", {"city": " spaced ", "tags": ["x", "y z", ""]})],
    [("get_weather", {"city": '{"json": [1, 2]}', "opts": {"nested": {"deep": [1, {"k": "v"}]}, "e": {}}})],
    [("get_weather", {"city": "line1\n\nline2\n", "days": 0})],
    [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome", "opts": {"a": "ü", "b": [True, None]}})],
    [("ping", {}), ("get_weather", {"city": "x"})],
]  # fmt: skip


def subject(
    label: str, subjects: dict[str, tuple[str, str, str | None, tuple[str | None, str | None]]] = SUBJECTS
) -> Family:
    family, vocabulary, template, (bos, eos) = subjects[label]
    tok = tokenizer(vocabulary)
    source = (TEMPLATES_DIR / template).read_text(encoding="utf-8") if template else None
    return get_family(family)(FamilyContext(tok, source, bos, eos, [], sorted(added_tokens(tok))))


def round_trip(family: Family, calls: list[tuple[str, dict[str, Any]]], thinking: bool) -> tuple[str, Any, Any]:
    """(the output cut from the history, the calls wanted, the calls parsed whole or, where it differs, chunked)."""
    tok = family.context.tokenizer
    asked, head, ids = turn_ids(family, TOOLS, ("", "", calls), thinking)
    detokenizer = lambda: Detokenizer(tok, added_tokens(tok))
    got = [_parsed(c) for c in joined_calls(feed(family.parser(asked, head), detokenizer(), ids))]
    each = [_parsed(c) for c in joined_calls(feed(family.parser(asked, head), detokenizer(), ids, range(1, len(ids))))]
    return tok.decode(ids, skip_special_tokens=False), [list(c) for c in calls], got if each == got else (got, each)


def turn_ids(
    family: Family, tools: list[dict[str, Any]], turn: Turn, thinking: bool
) -> tuple[ChatRequest, str, list[int]]:
    """(the request, its generation prompt, the assistant's `turn` (content, reasoning, calls) rendered as history
    and cut out as the model would write it, in ids: client strings shielded as the gateway encodes them, the stop
    token and trailing whitespace dropped)."""
    content, reasoning, calls = turn
    tok = family.context.tokenizer
    kwargs = {"thinking": thinking, "enable_thinking": thinking}
    user = [{"role": "user", "content": "hi"}]
    history = [{"id": f"functions.{name}:{i}", "type": "function", "function": {"name": name, "arguments": args}}
               for i, (name, args) in enumerate(calls)]  # fmt: skip
    asked = ChatRequest(messages=user, tools=tools, template_kwargs=kwargs)
    head = family.render(asked)
    said = {"role": "assistant", "content": content, "tool_calls": history}
    if thinking and reasoning:
        said["reasoning_content"] = reasoning
    answered = ChatRequest(messages=[*user, said], tools=tools, template_kwargs=kwargs, add_generation_prompt=False)
    # As the gateway does: client strings that spell an added token stay plain text (a model writes them so).
    shielded, shield = Shielder(added_tokens(tok).values()).shield(answered, family.keep_in_assistant)
    full = family.render(shielded)
    at = len(head) if full.startswith(head) else _turn_start(head, full, added_tokens(tok).values())
    ids = PromptEncoder(tok).encode_prompt(full[at:], shield)
    stops = set(family.stop_token_ids())
    while ids and (ids[-1] in stops or not tok.decode(ids[-1:], skip_special_tokens=False).strip()):
        ids.pop()
    return asked, head, ids


def _turn_start(head: str, full: str, spellings: Any) -> int:
    """Where the assistant's turn starts in `full` when the history does not repeat the generation prompt (vLLM's
    V3.1 template indents the history's tags): after the added token the generation prompt ends with, and the
    whitespace the template put after it; else where the two renders part."""
    at = _common_prefix(head, full, spellings)
    closing = next((s for s in spellings if head.endswith(s)), None)
    found = full.find(closing, at) if closing else -1
    if found == -1:
        return at
    end = found + len(closing)
    return end + len(full[end:]) - len(full[end:].lstrip(" "))


def _common_prefix(head: str, full: str, spellings: Any) -> int:
    """Where `full` leaves `head`, moved back to the start of an added token's spelling it would cut."""
    at = next((i for i, (a, b) in enumerate(zip(head, full, strict=False)) if a != b), min(len(head), len(full)))
    for spelling in spellings:
        start = full.rfind(spelling, 0, at + len(spelling))
        if start != -1 and start < at < start + len(spelling):
            at = start
    return at


def _parsed(call: tuple[str, str]) -> list[Any]:
    try:
        return [call[0], json.loads(call[1])]
    except ValueError:
        return [call[0], call[1], "unparsed"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", action="append", choices=sorted(SUBJECTS), help="repeatable; default: all")
    args = parser.parse_args()
    print("| family | round trips | mismatched |\n|---|---:|---:|")
    notes: list[str] = []
    for label in args.family or list(SUBJECTS):
        family = subject(label)
        results = [round_trip(family, calls, thinking) for thinking in (False, True) for calls in CALLS]
        bad = [r for r in results if r[1] != r[2]]
        print(f"| {label} | {len(results)} | {len(bad)} |", flush=True)
        if bad:
            text, want, got = bad[0]
            notes.append(f"    {label}: output {text[-400:]!r}\n        want {want}\n        got  {got}")
    print("\n".join(notes))


if __name__ == "__main__":
    main()
