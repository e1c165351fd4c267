"""A few seeded random walks per family through its grammar, parsed back: the contract holds on each (the long runs
are bench/grammar_walk.py's; tests/grammar_walks.py has the walk and the checks)."""

from __future__ import annotations

import random

import pytest
import xgrammar as xg

from tests.grammar_walks import ASKS, SUBJECTS, Ask, Parse, Subject, Walk, _contract, parse, problems, run_walks, walk

ASKED = {
    "hermes": ["auto", "required+think", "named", "auto+rf"],
    "glm47": ["auto", "required+single", "none+rf+think", "required+think"],
    "gemma4": ["auto", "required", "auto+rf"],
    "kimi_k3": ["required"],
}
"""Per family, the request shapes walked (bench/grammar_walk.py walks every family and shape; qwen3_xml compiles in
~1 s a shape, too slow here, and deepseek_v41's walk classes over its 129,280 ids take ~5 CPU-s: its walks' findings
are acceptance checks in tests/test_deepseek_v41_grammar.py)."""


@pytest.fixture(scope="module")
def hermes() -> Subject:
    return SUBJECTS["hermes"]()


@pytest.mark.parametrize("family", sorted(ASKED))
def test_seeded_walks_keep_the_contract(family: str, hermes: Subject) -> None:
    subject = hermes if family == "hermes" else SUBJECTS[family]()
    asks = [a for a in ASKS if a.label in ASKED[family]]
    tally = run_walks(subject, asks, walks_per_ask=6, seed=9)
    assert tally.walks == 6 * len(asks) and tally.finished > tally.walks // 2
    assert not tally.kinds, tally.examples


def test_the_checks_catch_a_broken_parse(hermes: Subject) -> None:
    """The checks can fail: an undeclared name, arguments off the schema, content under a forced call."""
    rng = random.Random(0)
    ask = Ask("required")
    ids = hermes.tokenizer.encode('Hi<tool_call>\n{"name": "get_weather", "arguments": {"unit": "kelvin"}}\n</tool_call>',
                                  add_special_tokens=False).ids  # fmt: skip
    found = problems(hermes, ask, Walk(ids, True), rng)
    assert [p.split(":")[0] for p in found] == ["SCHEMA", "FORCED"], found
    assert parse(hermes, ask, ids).calls == [("get_weather", '{"unit": "kelvin"}')]


def test_a_walk_is_a_path_the_grammar_takes(hermes: Subject) -> None:
    ask = Ask("required")
    grammar = hermes.family.grammar(ask.request(), hermes.prompt(ask))
    assert grammar is not None
    compiled = hermes.compiler.compile_structural_tag(grammar.text)

    result = walk(xg.GrammarMatcher(compiled), hermes.classes, hermes.stop_id, random.Random(3))
    matcher = xg.GrammarMatcher(compiled)
    assert result.finished
    assert all(matcher.accept_token(i) for i in result.ids) and matcher.accept_token(hermes.stop_id)


def test_a_preamble_before_a_forced_call_is_content_where_the_format_has_them() -> None:
    """Harmony's commentary preamble is shown to the user before the call it announces: "required" asks for a call,
    not for silence. Elsewhere content under a forced call is a FORCED problem, and so is no call at all."""
    preamble = Parse("Checking the weather.", "", [("ping", "{}")])
    kinds = lambda got, preambles: [p.split(":")[0] for p in _contract(Ask("required"), got, preambles)]
    assert kinds(preamble, False) == ["FORCED"] and kinds(preamble, True) == []
    assert kinds(Parse("Checking.", "", []), True) == ["FORCED"]


def test_a_walk_ends_at_any_stop_token_of_the_family() -> None:
    """Gemma 4 stops at `<turn|>` and at `<|tool_response>` (the backend ends the output at either)."""
    gemma = SUBJECTS["gemma4"]()
    assert gemma.classes.stops == {gemma.stop_id, gemma.tokenizer.token_to_id("<|tool_response>")}
