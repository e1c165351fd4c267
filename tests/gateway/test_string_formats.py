"""String formats and patterns in the spelling-safe JSON grammars: a format whose xgrammar grammar could write a
control token's first character is our own pattern, and a pattern that could is narrowed, not dropped (checked
on xgrammar's own matcher, no vocabulary needed)."""

from __future__ import annotations

import json
import re

import pytest
import xgrammar as xgr
from xgrammar.testing import _is_grammar_accept_string

from gateway.grammars.json import SchemaGrammarError
from gateway.grammars.patterns import narrowed, scan
from gateway.grammars.safe_json import json_value_ebnf, safe_json_ebnf
from gateway.grammars.string_formats import OWN_PATTERNS

ANGLE = ("<|im_end|>",)
BRACKET = ("<|im_end|>", "[TOOL_CALLS]")

FORMAT_CASES = {  # format: (values it takes, values it refuses); xgrammar 0.2.9's own date, time, date-time, ipv4
    # take the refused ones of the first four rows
    "date": (["2024-02-29", "2000-02-29", "2023-12-31", "0001-01-01"], ["2023-02-29", "1900-02-29", "2024-06-31"]),
    "time": (["23:59:59Z", "08:30:00.5+05:30", "00:00:00z"], ["12:00:60Z", "24:00:00Z", "12:00:00", "1:00:00Z"]),
    "date-time": (
        ["2024-02-29T10:00:00Z", "2024-01-01t00:00:00-01:00"],
        ["2023-02-29T10:00:00Z", "2024-01-01T10:00:60Z"],
    ),
    "ipv4": (["1.2.3.4", "255.255.255.255", "0.0.0.0"], ["01.2.3.4", "256.1.1.1", "1.2.3"]),
    "email": (["a@b.co", "first.last+tag@ex-ample.com", "x@y", "o'neil@a.b"], ["a@", "@b", "a..b@c", "a b@c"]),
    "idn-email": (["用户@例子.广告", "a@b.co"], ["a@", "用户"]),
    "json-pointer": (["", "/a", "/a~0b/~1c", "/ x/"], ["a", "/~2"]),
    "relative-json-pointer": (["0", "1#", "2/a/b"], ["01", "#", "-1/a"]),
    "uri-template": (["http://ex.com/{id}", "/s{?q,lang}", "{+path:10}/x", "{var*}"], ["{}", "{a b}", "{a", "%zz"]),
}


def test_xgrammar_formats_replaced_by_ours_take_invalid_values():
    """Why date, time, date-time and ipv4 are patterns of ours: xgrammar 0.2.9's own grammars take these."""
    for fmt, value in [("date", "2023-02-29"), ("time", "12:00:60Z"), ("date-time", "2024-06-31T10:00:00Z")]:
        grammar = xgr.Grammar.from_json_schema(json.dumps({"type": "string", "format": fmt}))
        assert _is_grammar_accept_string(grammar, json.dumps(value)), fmt
    grammar = xgr.Grammar.from_json_schema(json.dumps({"type": "string", "format": "ipv4"}))
    assert _is_grammar_accept_string(grammar, '"01.2.3.4"')


def takes(ebnf: str, value: str) -> bool:
    return _is_grammar_accept_string(xgr.Grammar.from_ebnf(ebnf), value)


def value_ebnf(schema: dict, spellings: tuple[str, ...] = ANGLE, strict: bool = False) -> str:
    ebnf = json_value_ebnf({"type": "array", "items": schema}, spellings, "p", strict, exact=strict)
    assert ebnf is not None
    return ebnf


@pytest.mark.parametrize("fmt", sorted(FORMAT_CASES))
def test_own_format_patterns_match_their_rfc(fmt):
    good, bad = FORMAT_CASES[fmt]
    grammar = xgr.Grammar.from_regex(OWN_PATTERNS[fmt])
    for value in good:
        assert re.fullmatch(OWN_PATTERNS[fmt][1:-1], value) and _is_grammar_accept_string(grammar, value), value
    for value in bad:
        assert not re.fullmatch(OWN_PATTERNS[fmt][1:-1], value), value
        assert not _is_grammar_accept_string(grammar, value), value


@pytest.mark.parametrize("spellings", [ANGLE, BRACKET], ids=["angle", "bracket"])
@pytest.mark.parametrize("fmt", sorted(FORMAT_CASES))
def test_formats_that_could_write_a_first_character_are_enforced_without_it(fmt, spellings):
    """Before: dropped from the schema, any string passed."""
    ebnf = value_ebnf({"type": "string", "format": fmt}, spellings)
    good, bad = FORMAT_CASES[fmt]
    for value in good:
        assert takes(ebnf, json.dumps([value], ensure_ascii=False)) is not any(s[0] in value for s in spellings)
    for value in bad:
        assert not takes(ebnf, json.dumps([value], ensure_ascii=False)), value
    assert not takes(ebnf, '["/<|im_end|>"]') and not takes(ebnf, '["a[b]"]' if spellings == BRACKET else '["<"]')


@pytest.mark.parametrize(
    ("pattern", "chars", "expected"),
    [
        ("^\\S+$", "<", "^[^\\s\\u003c]+$"),
        ("^.*$", "<", "^[^\\n\\r\\u2028\\u2029\\u003c]*$"),
        ("^[^-a]+$", "<", "^[^\\u003c\\-a]+$"),
        ("^[^a]+$", "<", "^[^\\u003ca]+$"),  # not `\\x3ca`: xgrammar read U+03CA
        ("^[!-~]+$", "<[", "^[\\u0021-\\u003b\\u003d-Z\\u005c-\\u007e]+$"),
        ("^[a<b]+$", "<", "^[ab]+$"),
        ("^(a|\\W)$", "<", "^(a|[^\\w\\u003c])$"),
        ("^[a-z]+$", "<", "^[a-z]+$"),
        ("^<a>$", "<", None),  # a literal
        ("^\\x3c$", "<", None),
        ("^[<]$", "<", None),  # nothing left
        ("^[\\S]$", "<", None),  # a class escape inside a class
        ("^(?=a)a$", "<", None),  # not understood
    ],
)
def test_narrowed_excludes_the_characters_and_keeps_the_rest(pattern, chars, expected):
    result = narrowed(pattern, chars)
    assert result == expected
    if result is not None:
        assert not scan(result, chars).may_match
        grammar = xgr.Grammar.from_regex(result)
        for sample in ("abc", "a>b", "A~", "a b", "<", "a<", "["):
            if not any(c in sample for c in chars):
                assert _is_grammar_accept_string(grammar, sample) == bool(re.fullmatch(pattern[1:-1], sample))
            else:  # xgrammar's reading of the narrowed pattern, not only ours, excludes them
                assert not _is_grammar_accept_string(grammar, sample)


def test_a_pattern_that_could_write_a_first_character_is_narrowed_not_dropped():
    ebnf = value_ebnf({"type": "string", "pattern": "^\\S+$"})
    assert takes(ebnf, '["a>b"]') and not takes(ebnf, '["a<b"]')
    assert not takes(ebnf, '["has space"]')  # before: the pattern was dropped and this passed


def test_a_pattern_that_needs_a_first_character_is_dropped_or_refused_under_strict():
    schema = {"type": "string", "pattern": "^<\\w+>$"}
    assert takes(value_ebnf(schema), '["anything"]')  # best effort: dropped
    with pytest.raises(SchemaGrammarError) as error:
        json_value_ebnf({"type": "object", "properties": {"t": schema}}, ANGLE, "p", False, exact=True)
    assert error.value.param == "p.properties.t.pattern" and '"<"' in str(error.value)
    with pytest.raises(SchemaGrammarError):
        safe_json_ebnf({"type": "object", "properties": {"t": schema}}, ANGLE, "p", strict=True)
    assert takes(safe_json_ebnf({"type": "object", "properties": {"t": schema}}, ANGLE, "p", False), '{"t": "x y"}')
