"""`StreamedCallParser`'s think-block handling, which the GLM and Qwen3 XML parsers share: `<think>` and `</think>`
count as structure only as added tokens, and only where reasoning can open or close."""

from __future__ import annotations

import pytest

from gateway.families.glm.parser import GlmParser
from gateway.families.qwen3_xml.parser import Qwen3XmlParser
from gateway.families.streams import StreamedCallParser
from gateway.types import Piece
from tests.family_checks import merged

PARSERS = [GlmParser, Qwen3XmlParser]


def _run(parser: StreamedCallParser, *pieces: Piece) -> dict:
    return merged(parser.feed(list(pieces)) + parser.finish())


def _token(text: str) -> Piece:
    return Piece(text, token_id=1)


@pytest.mark.parametrize("parser", PARSERS)
def test_think_tokens_open_and_close_reasoning(parser: type[StreamedCallParser]) -> None:
    out = _run(parser(), _token("<think>"), Piece("plan"), _token("</think>"), Piece("answer"))
    assert (out["reasoning"], out["content"]) == ("plan", "answer")


@pytest.mark.parametrize("parser", PARSERS)
def test_a_prompt_opened_think_block_closes_at_its_end_token(parser: type[StreamedCallParser]) -> None:
    out = _run(parser(in_reasoning=True), Piece("plan"), _token("</think>"), Piece("answer"))
    assert (out["reasoning"], out["content"]) == ("plan", "answer")


@pytest.mark.parametrize("parser", PARSERS)
def test_think_tokens_out_of_place_are_content(parser: type[StreamedCallParser]) -> None:
    out = _run(parser(), _token("</think>"), Piece("a"), _token("<think>"), Piece("b"))
    assert (out["reasoning"], out["content"]) == ("", "</think>a<think>b")
