"""Structural-tag formats as one EBNF (gateway/grammars/ebnf_formats.py): the same language, shared grammars once."""

from __future__ import annotations

import json

import pytest
import xgrammar as xg
from xgrammar.testing import _get_matcher_from_grammar

from gateway.grammars.ebnf_formats import EbnfWriter
from gateway.grammars.safe_json import json_value_ebnf

NUMBER = {"type": "grammar", "grammar": json_value_ebnf({"type": "integer"}, ("<|",), "p", True)}
RAW = {
    "type": "dispatch",
    "rules": [["<tag", {"type": "regex", "pattern": r"[^<>]*>"}]],
    "loop": True,
    "excludes": ["</end", "<|"],
}
FORMAT = {
    "type": "sequence",
    "elements": [
        {"type": "any_text", "excludes": ["<call>", "<|"]},
        {"type": "const_string", "value": '<call>\n"q"'},
        {"type": "or", "elements": [NUMBER, {"type": "sequence", "elements": [
            {"type": "const_string", "value": "s="}, RAW]}]},
        {"type": "star", "content": {"type": "sequence", "elements": [{"type": "const_string", "value": ","}, NUMBER]}},
        {"type": "optional", "content": {"type": "const_string", "value": ";"}},
        {"type": "plus", "content": {"type": "const_string", "value": "!"}},
        {"type": "const_string", "value": "</end"},
    ],
}  # fmt: skip
OUTPUTS = [
    'hi <call>\n"q"12,3,-4!</end',
    '<call>\n"q"0;!!</end',
    '<call>\n"q"s=plain <tag a="b"> text!</end',
    '<call>\n"q"s=!</end',
    'x<call>\n"q"12!',
    'a <| b<call>\n"q"1!</end',
    '<call>\n"q"s=no </end here!</end',
    '<call>\n"q"s=<|x!</end',
    '<call>\n"q"012!</end',
    '<call>\n"q"1,,2!</end',
    '<call>\n"q"1;;!</end',
    '<call>\n"q"1</end',
    '<call>\n"q"s=<tag unclosed!</end',
]


def accepted(grammar: xg.Grammar, output: str) -> bool:
    matcher = _get_matcher_from_grammar(grammar)
    return matcher.accept_string(output) and matcher.is_terminated()


def test_the_ebnf_takes_exactly_what_the_structural_tag_takes() -> None:
    tag = xg.Grammar.from_structural_tag(json.dumps({"type": "structural_tag", "format": FORMAT}))
    ebnf = xg.Grammar.from_ebnf(EbnfWriter().grammar(FORMAT))
    verdicts = [(accepted(tag, o), accepted(ebnf, o)) for o in OUTPUTS]
    assert [t for t, _ in verdicts] == [e for _, e in verdicts]
    assert {t for t, _ in verdicts} == {True, False}  # the outputs tell the grammar's edges apart


def test_an_embedded_grammar_is_written_once_however_often_it_is_used() -> None:
    uses = [{"type": "sequence", "elements": [{"type": "const_string", "value": f"p{i}="}, NUMBER]} for i in range(50)]
    one = EbnfWriter().grammar(uses[0])
    fifty = EbnfWriter().grammar({"type": "sequence", "elements": uses})
    assert fifty.count("::=") == one.count("::=")
    assert len(fifty) - len(one) < 50 * 20  # a reference and the name's text per use, no copy of the JSON rules
    xg.Grammar.from_ebnf(fifty)


def test_a_format_object_used_twice_is_one_rule() -> None:
    call = {"type": "or", "elements": [{"type": "const_string", "value": "a" * 100}, NUMBER]}
    calls = {"type": "sequence", "elements": [call, {"type": "star", "content": {"type": "sequence", "elements": [
        {"type": "const_string", "value": "\n"}, call]}}]}  # fmt: skip
    assert EbnfWriter().grammar(calls).count("a" * 100) == 1


def test_tokens_are_token_edges() -> None:
    fmt = {"type": "sequence", "elements": [{"type": "token", "token": 7},
           {"type": "any_tokens", "exclude_tokens": [7, 8]}, {"type": "exclude_token", "exclude_tokens": [9]}]}  # fmt: skip
    ebnf = EbnfWriter().grammar(fmt)
    assert "Token(7)" in ebnf and "(ExcludeToken(7, 8))*" in ebnf and "ExcludeToken(9)" in ebnf
    xg.Grammar.from_ebnf(ebnf)


def test_rule_names_are_renamed_only_where_they_are_rules() -> None:
    inner = 'root ::= "root item" item [item]\nitem ::= "x" | "\\"item\\""'
    ebnf = EbnfWriter().grammar({"type": "grammar", "grammar": inner})
    assert 'g0_root ::= "root item" g0_item [item]' in ebnf and 'g0_item ::= "x" | "\\"item\\""' in ebnf
    assert accepted(xg.Grammar.from_ebnf(ebnf), 'root item"item"i')


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="no EBNF"):
        EbnfWriter().grammar({"type": "tags_with_separator", "tags": []})


def test_a_chain_of_shared_tails_is_a_rule_each_however_long() -> None:
    """Gemma 4's optional members: tail k is held by tail k - 1 and by the alternative starting at k; 1,000 of them
    are a few flat rules each (nested, or written by recursion, they would pass Python's recursion limit)."""
    tails = [{"type": "const_string", "value": ""}]
    for i in range(1000):
        later = {"type": "optional", "content": {"type": "const_string", "value": f",m{i}"}}
        tails.append({"type": "sequence", "elements": [later, tails[-1]]})
    alternatives = [{"type": "sequence", "elements": [{"type": "const_string", "value": f"m{i}"}, t]} for i, t in
                    enumerate(tails[1:])]  # fmt: skip
    ebnf = EbnfWriter().grammar({"type": "or", "elements": alternatives})
    assert ebnf.count("::=") <= 3 * 1000 and max(line.count("(") for line in ebnf.splitlines()[1:]) <= 4
    assert accepted(xg.Grammar.from_ebnf(ebnf), "m999,m998,m5")


def test_equal_formats_built_apart_are_one_rule() -> None:
    """DeepSeek builds each string parameter's raw text afresh: each was its own TagDispatch rule, and each costs a
    pass over the vocabulary to compile (a 5-tool request: ~340 ms on DeepSeek V4's, not ~90)."""
    raw = lambda: json.loads(json.dumps(RAW))  # an equal format, a new object each time
    ebnf = EbnfWriter().grammar(
        {"type": "sequence", "elements": [raw(), {"type": "const_string", "value": "|"}, raw()]}
    )
    assert ebnf.count("TagDispatch(") == 1


def test_what_repeats_is_written_once_after_xgrammar_normalizes_it() -> None:
    """xgrammar writes `(x)+` as `r ::= x r | x`: Kimi K3's tools section (one or more calls of five tools) was
    compiled twice over (~20 % more compile); each token-excluding run inline was its own rule too."""
    calls = {"type": "or", "elements": [{"type": "const_string", "value": "a" * 50}, NUMBER]}
    text = {"type": "any_tokens", "exclude_tokens": [1, 2]}
    fmt = {"type": "sequence", "elements": [{"type": "plus", "content": calls}, text, {"type": "const_string",
           "value": "|"}, {"type": "any_tokens", "exclude_tokens": [1, 2]}]}  # fmt: skip
    normalized = str(xg.Grammar.from_ebnf(EbnfWriter().grammar(fmt)))
    assert normalized.count("a" * 50) == 1 and normalized.count("ExcludeToken(1, 2)") == 1


def test_each_optional_or_repeated_part_is_its_own_rule() -> None:
    """As xgrammar's structural-tag conversion writes them: DeepSeek's 400 optional parameters written inline as
    one sequence of `(…)?` compiled in ~0.67 s on its vocabulary, growing with the square of their number (main's
    structural tag: 0.36 s; a rule each: 0.26 s)."""
    lines = [{"type": "optional", "content": {"type": "sequence", "elements": [
        {"type": "const_string", "value": f"p{i}="}, NUMBER]}} for i in range(20)]  # fmt: skip
    ebnf = EbnfWriter().grammar({"type": "sequence", "elements": lines})
    assert all(line.count(")?") <= 1 for line in ebnf.splitlines())
