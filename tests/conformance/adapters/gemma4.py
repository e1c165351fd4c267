"""canitoolcall adapter: gemma4 fixtures through the gateway's Gemma 4 parser.

No package ships Gemma 4's vocabulary, so the recorded ids are decoded by
alignment with the fixture's text (tests/conformance/alignment.py), with the
control tokens found by lining up the fixtures' ids with their markers:
`<|tool_call>`=48, `<tool_call|>`=49, `<|"|>`=52, `<|channel>`=100,
`<channel|>`=101. Ordinary token boundaries are therefore synthetic; control
tokens are atomic.

    python -m canitoolcall run --engine tests.conformance.adapters.gemma4:Adapter --family gemma4
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from canitoolcall.adapters.base import ReplayInput, Support, ToolSpec

from gateway.families.gemma4 import Gemma4Parser
from gateway.families.gemma4.markers import CHANNEL, CHANNEL_END, QUOTE, TOOL_CALL, TOOL_CALL_END
from tests.conformance.alignment import AlignedPieces, AlignmentError, Vocabulary
from tests.conformance.common import GatewayAdapter

FAMILY = "gemma4"
ENGINE = "tests.conformance.adapters.gemma4:Adapter"
EXPECTED_FAILURES: dict[str, str] = {}
CONTROL = {48: TOOL_CALL, 49: TOOL_CALL_END, 52: QUOTE, 100: CHANNEL, 101: CHANNEL_END}


class Adapter(GatewayAdapter):
    """The gateway's Gemma 4 parser fed Pieces of the aligned ids, control tokens marked."""

    name = "llm-gateway-gemma4"

    def supports(self, family: str, model: str) -> Support:
        return Support(True) if family == FAMILY else Support(False, "the gemma4 family parses Gemma 4 only")

    def parser_config(self, raw: ReplayInput) -> dict[str, Any]:
        return {"parser": "gateway.families.gemma4.Gemma4Parser", "ids": "aligned with raw_output (no vocabulary)"}

    def units(self, raw: ReplayInput) -> list[int]:
        if raw.token_ids is None:
            raise AlignmentError(f"{raw.fixture_id} has no token ids and the Gemma 4 vocabulary is not available")
        return list(raw.token_ids)

    def special_token_ids(self, raw: ReplayInput) -> Collection[int]:
        return frozenset(CONTROL)

    def family_parser(self, raw: ReplayInput, tools: Sequence[ToolSpec]) -> Gemma4Parser:
        return Gemma4Parser()

    def pieces(self, raw: ReplayInput) -> AlignedPieces:
        return AlignedPieces(Vocabulary(CONTROL).texts(raw.text, self.units(raw)), CONTROL)
