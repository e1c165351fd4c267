"""A family base for checkpoints that ship a Jinja chat template and write token-section tool calls
(DeepSeek V3 / V3.1, Kimi K2): the prompt is the checkpoint's own template, the parser
`token_sections.SectionParser`, the grammar `section_grammar.build_section_grammar`.

Options (model entry `options`): `chat_template` (a template to use instead of the checkpoint's).
"""

from __future__ import annotations

import json
import re
from abc import abstractmethod
from functools import cached_property
from typing import Any, ClassVar

from backends.base import Grammar
from gateway.families.base import Family, OutputParser
from gateway.families.section_grammar import CallLayout, SectionIds, build_section_grammar
from gateway.families.token_sections import CallSplitter, SectionMarkers, SectionParser
from gateway.prompts.template import TemplateError, render_chat_template
from gateway.types import ChatRequest


class TemplatedSectionFamily(Family):
    """The checkpoint's chat template in, token-section tool calls out."""

    markers: ClassVar[SectionMarkers]
    stop_tokens: ClassVar[tuple[str, ...]]
    """Spellings of the tokens that end an assistant turn (besides the checkpoint's eos ids)."""

    @abstractmethod
    def call_splitter(self, request: ChatRequest) -> CallSplitter:
        """How `request`'s calls are read: (header, body) of one call → (tool name, JSON arguments), or None when
        malformed."""

    @abstractmethod
    def call_layout(self) -> CallLayout:
        """How the grammar writes one call of a named tool."""

    @cached_property
    def template(self) -> str:
        template = self.context.options.get("chat_template") or self.context.chat_template
        if not template:
            raise TemplateError(
                f"the {self.name} family renders the checkpoint's chat template and this checkpoint has none; "
                "set the model's options.chat_template"
            )
        return template

    @cached_property
    def ids(self) -> SectionIds:
        return SectionIds.of(self.context.tokenizer, self.markers)

    @cached_property
    def argument_objects(self) -> bool:
        """Whether the template takes a call's arguments as an object (see `takes_argument_objects`)."""
        return takes_argument_objects(self.template)

    def render(self, request: ChatRequest) -> str:
        return render_chat_template(
            self.template,
            request.messages if self.argument_objects else with_argument_strings(request.messages),
            tools=request.tools if request.tool_choice != "none" else None,
            add_generation_prompt=request.add_generation_prompt,
            continue_final_message=request.continue_final_message,
            special_tokens=self.context.special_tokens_map,
            template_kwargs=dict(request.template_kwargs),
        )

    def stop_token_ids(self) -> list[int]:
        own = [self.context.tokenizer.token_to_id(t) for t in self.stop_tokens]
        return list(dict.fromkeys([*(i for i in own if i is not None), *self.context.eos_token_ids]))

    def grammar(self, request: ChatRequest, prompt: str) -> Grammar | None:
        return build_section_grammar(request, self.in_reasoning(prompt), self.ids, self.call_layout())

    def parser(self, request: ChatRequest, prompt: str) -> OutputParser:
        return SectionParser(self.markers, self.call_splitter(request), self.in_reasoning(prompt))

    def in_reasoning(self, prompt: str) -> bool:
        """Whether the prompt ends inside a `<think>` block (a thinking generation prompt)."""
        return prompt.endswith(self.markers.think_start)


_ARGUMENTS_TOJSON = re.compile(r"""arguments['"]?\]?\s*\|\s*tojson""")
_ARGUMENTS_STRING_TEST = re.compile(r"""arguments['"]?\]?\s+is\s+(not\s+)?string""")


def takes_argument_objects(template: str) -> bool:
    """Whether `template` writes a call's arguments through `tojson` without testing for a string first (vLLM's and
    llama.cpp's DeepSeek V3.1 templates, llama.cpp's Kimi K2): it wants them as an object, as vLLM hands them, where
    their JSON text would come out quoted a second time. Other templates get the text (the official DeepSeek ones
    concatenate it; Kimi K2's own tests for a string)."""
    return bool(_ARGUMENTS_TOJSON.search(template)) and not _ARGUMENTS_STRING_TEST.search(template)


def with_argument_strings(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages whose tool calls carry their arguments as JSON text, as clients send them and as these models'
    templates write them (DeepSeek V3 / V3.1 concatenate `function.arguments` as a string)."""
    return [{**m, "tool_calls": [_encoded(c) for c in m["tool_calls"]]} if m.get("tool_calls") else m for m in messages]


def _encoded(call: dict[str, Any]) -> dict[str, Any]:
    fn = call.get("function")
    if not isinstance(fn, dict) or isinstance(fn.get("arguments"), str):
        return call
    return {**call, "function": {**fn, "arguments": json.dumps(fn.get("arguments") or {}, ensure_ascii=False)}}
