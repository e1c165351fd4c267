"""canitoolcall adapter that replays GLM fixtures (4.5, 4.7, 5.3 renders) through the gateway's glm parser.

No registry package ships a GLM vocabulary, so the recorded ids are aligned to their text
(`tests.conformance.alignment`): the tag tokens are known ids (GLM-4.5's published added tokens, which 4.7
keeps: `<think>`=151350 … `</arg_value>`=151359; GLM-5.x has the same run from 154841); every other
id's text is learnt from the fixtures.
Each id then becomes a Piece (tag tokens marked), fed to `GlmParser` in the strategy's chunks; the
non-streaming parse is the same path in one chunk.

    python -m canitoolcall run --engine tests.conformance.adapters.glm:Adapter --family glm
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from functools import cached_property
from typing import Any

from canitoolcall.adapters.base import ReplayInput, Support, ToolSpec
from canitoolcall.fixtures import load_fixtures

from gateway.families.glm import GlmParser
from gateway.families.glm.markers import prompt_opens_reasoning
from tests.conformance.alignment import AlignedPieces, AlignmentError, Vocabulary
from tests.conformance.common import GatewayAdapter, sent_before_its_end

FAMILY = "glm"
ENGINE = "tests.conformance.adapters.glm:Adapter"
EXPECTED_FAILURES: dict[str, str] = {
    "glm/glm47-truncated-inside-arg-value": sent_before_its_end(
        "inside its second value", "get_weather", '{"city": "Berlin", "unit": "'
    ),
    "glm/glm47-truncated-before-close-call": sent_before_its_end(
        "before its </tool_call>", "get_weather", '{"city": "Berlin", "unit": "celsius"'
    ),
    "glm/glm45-truncated-after-arg-key": sent_before_its_end(
        "after its second key", "get_weather", '{"city": "Berlin"'
    ),
}
_TAGS = (
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
)
CONTROL_IDS: dict[int, str] = {
    **dict(enumerate(_TAGS, start=151350)),  # GLM-4.5, 4.6, 4.7
    **dict(enumerate(_TAGS, start=154841)),  # GLM-5.x
}


class Adapter(GatewayAdapter):
    """The gateway's glm parser, fed Pieces the way the gateway's detokenizer produces them."""

    name = "llm-gateway-glm"

    def supports(self, family: str, model: str) -> Support:
        if family == FAMILY:
            return Support(True)
        return Support(False, f"the glm family serves {FAMILY} only")

    def parser_config(self, raw: ReplayInput) -> dict[str, Any]:
        return {
            "parser": "gateway.families.glm.GlmParser",
            "in_reasoning": _opens_reasoning(raw),
            "ids": "fixture output_token_ids, texts aligned (no GLM tokenizer offline)",
        }

    def units(self, raw: ReplayInput) -> list[int]:
        if not raw.token_ids:
            raise AlignmentError(f"{raw.fixture_id} has no token ids and no GLM vocabulary is available")
        return list(raw.token_ids)

    def special_token_ids(self, raw: ReplayInput) -> Collection[int]:
        return frozenset(CONTROL_IDS)

    @cached_property
    def vocabulary(self) -> Vocabulary:
        """Ordinary GLM id texts learnt from every GLM fixture."""
        vocabulary = Vocabulary(CONTROL_IDS)
        fixtures = load_fixtures(None, families=[FAMILY])
        vocabulary.learn([(f.raw_output, f.output_token_ids) for f in fixtures if f.output_token_ids])
        return vocabulary

    def family_parser(self, raw: ReplayInput, tools: Sequence[ToolSpec]) -> GlmParser:
        return GlmParser(tools, tool_calls=bool(tools), in_reasoning=_opens_reasoning(raw))

    def pieces(self, raw: ReplayInput) -> AlignedPieces:
        return AlignedPieces(self.vocabulary.texts(raw.text, self.units(raw)), frozenset(CONTROL_IDS))


def _opens_reasoning(raw: ReplayInput) -> bool:
    return prompt_opens_reasoning(raw.generation_prompt or "")
