"""A chat choice's output parser is built at its first step, not while the backend request is being prepared."""

from __future__ import annotations

from gateway.api.chat import ChatRenderer
from gateway.types import ChatRequest, ChoiceStep, Piece


def test_each_choice_builds_its_parser_once_at_its_first_step(tokenize_only):
    chat = ChatRequest(messages=[{"role": "user", "content": "hi"}])
    built = []

    def parser():
        built.append(tokenize_only.family.parser(chat, ""))
        return built[-1]

    renderer = ChatRenderer(2, parser, None, 3, tokenize_only.count_tokens)
    assert len(renderer.opening()) == 2 and built == []  # nothing built before any output
    assert renderer.step(1, ChoiceStep([Piece("a")], completion_tokens=1))[0]["delta"] == {"content": "a"}
    assert len(built) == 1
    renderer.step(1, ChoiceStep([Piece("b")], completion_tokens=2))
    assert len(built) == 1  # choice 1 keeps its own
    renderer.step(0, ChoiceStep([Piece("c")], completion_tokens=1))
    assert len(built) == 2
    assert renderer.usage()["completion_tokens"] == 3
