"""canitoolcall adapter that replays qwen3-hermes fixtures through the gateway's hermes parser.

The fixtures' token ids are Qwen3 ids and no Qwen tokenizer is available
offline, so (contract rule 1 fallback) the units are the embedded SmolLM2
tokenizer's encoding of `raw_output`, added-token spellings matched. Chunks
are detokenized with `gateway.generation.detokenizer.Detokenizer`, the gateway's own
incremental detokenizer, and fed to `HermesParser` as the gateway feeds it.

Run the whole family with:
    python -m canitoolcall run --engine tests.conformance.adapters.qwen3_hermes:Adapter --family qwen3-hermes
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from canitoolcall.adapters.base import ReplayInput, Support, ToolSpec
from canitoolcall.results import ParseResult

from gateway.families.hermes import HermesParser
from gateway.families.hermes.markers import prompt_opens_reasoning
from gateway.types import Piece
from tests.conformance.common import CheckpointAdapter, accumulate

FAMILY = "qwen3-hermes"
ENGINE = "tests.conformance.adapters.qwen3_hermes:Adapter"
_CUT_CALL = (
    "a call cut off by the end of the output: the hermes parser streams the call's name and argument fragments "
    "as they arrive and cannot take them back, while the fixture expects no call"
)
EXPECTED_FAILURES: dict[str, str] = {
    "qwen3-hermes/bug-sglang-30480-truncated-mid-arguments": _CUT_CALL,
    "qwen3-hermes/vllm-invalid-json-missing-brace": _CUT_CALL,
    "qwen3-hermes/truncated-mid-arguments-no-thinking": _CUT_CALL,
    "qwen3-hermes/truncated-mid-arguments-thinking": _CUT_CALL,
    "qwen3-hermes/truncated-second-parallel-call": _CUT_CALL,
}


class Adapter(CheckpointAdapter):
    """The gateway's hermes family parser, driven the way the gateway drives it."""

    name = "llm-gateway-hermes"

    def supports(self, family: str, model: str) -> Support:
        if family == FAMILY:
            return Support(True)
        return Support(False, f"the hermes parser serves {FAMILY} only")

    def parser_config(self, raw: ReplayInput) -> dict[str, Any]:
        return {
            "parser": "gateway.families.hermes.HermesParser",
            "in_reasoning": _opens_reasoning(raw),
            "tool_calls": True,
            "units": "embedded SmolLM2 tokenizer encoding of raw_output (fixture ids are Qwen3 ids; no Qwen tokenizer offline)",
            "detokenizer": "gateway.generation.detokenizer.Detokenizer",
            "tokenizer": str(self.checkpoint.path.name),
        }

    def units(self, raw: ReplayInput) -> list[int]:
        return self.encode(raw.text)

    def parse(self, raw: ReplayInput, tools: Sequence[ToolSpec]) -> ParseResult:
        """The whole raw text fed as one Piece (no ids, no detokenizer)."""
        parser = self.family_parser(raw, tools)
        return accumulate(parser.feed([Piece(raw.text)]) + parser.finish())

    def family_parser(self, raw: ReplayInput, tools: Sequence[ToolSpec]) -> HermesParser:
        return HermesParser(tool_calls=bool(tools), in_reasoning=_opens_reasoning(raw))


def _opens_reasoning(raw: ReplayInput) -> bool:
    return prompt_opens_reasoning(raw.generation_prompt or "")
