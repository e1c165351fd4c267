"""Rewrites of xgrammar's EBNF that keep its language: optional members as tail rules, equal rules merged."""

from __future__ import annotations

import itertools
import json
import re

import pytest
import xgrammar as xgr

from gateway.grammars.ebnf_rules import cheaper_rules, merged_rules, optional_tails, shared_text
from gateway.grammars.json import SchemaGrammarError, compact_json_ebnf, xml_arguments_ebnf
from gateway.grammars.safe_json import json_value_ebnf, xml_value_ebnf

SPELLINGS = ("<|im_end|>",)
_CASCADE = re.compile(r"^\S+ ::= \(\((\w+)\) \| \(.* \1\)\)$", re.MULTILINE)
"""A rule `A ::= ((T) | (X T))`: an optional member and its tail in one rule (what `optional_tails` rewrites)."""


_COMPILER = xgr.GrammarCompiler(xgr.TokenizerInfo([]), cache_enabled=False)


def _acceptor(ebnf: str):
    """Whether `ebnf` takes a whole text (compiled once, on no vocabulary)."""
    compiled = _COMPILER.compile_grammar(ebnf)

    def accepts(text: str) -> bool:
        matcher = xgr.GrammarMatcher(compiled, terminate_without_stop_token=True)
        return matcher.accept_string(text) and matcher.is_terminated()

    return accepts


def _is_grammar_accept_string(ebnf: str, text: str) -> bool:
    return _acceptor(ebnf)(text)


def _object(keys: str, required: str = "") -> dict:
    return {"type": "object", "properties": {k: {"type": "integer"} for k in keys}, "required": list(required)}


def _texts(keys: str) -> list[str]:
    """Objects of `keys` in every order and subset (each at most once), and with a doubled or trailing member."""
    texts = []
    for size in range(len(keys) + 1):
        for chosen in itertools.permutations(keys, size):
            texts.append("{" + ", ".join(f'"{k}": {i}' for i, k in enumerate(chosen)) + "}")
    return [*texts, '{"a": 1, "a": 2}', '{"a": 1, }', '{, "b": 1}', '{"b": 1, "b": 1}']


def _valid(text: str, keys: str, required: str) -> bool:
    """JSON Schema's answer for an object of `keys` (declared order kept, as xgrammar's grammar has it)."""
    pairs = json.loads(text, object_pairs_hook=list) if text.count(", }") + text.count("{,") == 0 else None
    if pairs is None:
        return False
    names = [k for k, _ in pairs]
    return len(set(names)) == len(names) and names == sorted(names, key=keys.index) and set(required) <= set(names)


def test_optional_members_keep_their_language_in_their_own_rules():
    for required in ("", "a", "c", "bd", "abcd"):
        main = compact_json_ebnf(_object("abcd", required), "p")
        rewritten = optional_tails(main)
        assert not _CASCADE.search(rewritten)  # fails before: every optional member shared its rule with its tail
        before, after = _acceptor(main), _acceptor(rewritten)
        for text in _texts("abcd"):
            expected = _valid(text, "abcd", required)
            assert before(text) == expected and after(text) == expected, (required, text)


def test_safe_json_writes_optional_members_as_tail_rules():
    ebnf = json_value_ebnf(_object("abcdefgh", "e"), SPELLINGS, "p", True)
    assert not _CASCADE.search(ebnf)  # fails before
    assert _is_grammar_accept_string(ebnf, '{"b": 1, "e": 2, "h": 3}')
    assert not _is_grammar_accept_string(ebnf, '{"b": 1, "h": 3}')
    assert not _is_grammar_accept_string(ebnf, '{"e": 2, "b": 1}')


def test_equal_rules_are_one_rule():
    code = {"type": "string", "pattern": "^[a-z]{2}[^<]$"}
    schema = {"type": "object", "properties": {k: code for k in "pqrs"}, "required": ["q"]}
    main = compact_json_ebnf(schema, "p")
    assert main.count("Regex(") == 4
    merged = merged_rules(main)
    assert merged.count("Regex(") == 1
    assert json_value_ebnf(schema, SPELLINGS, "p", True).count("Regex(") == 1  # fails before: four
    before, after = _acceptor(main), _acceptor(merged)
    for text in ('{"q": "ab1"}', '{"p": "zz9", "q": "ab1", "s": "cd2"}', '{"q": "ab"}', '{"p": "ab1"}', '{"q": "ab<"}'):
        assert before(text) == after(text), text


def test_merging_keeps_root_literals_and_recursion():
    ebnf = (
        'root ::= (("[" a b c "]"))\n'
        'a ::= (("x" a) | ("y"))\nb ::= (("x" b) | ("y"))\n'  # self-recursive, equal but for their own names
        'c ::= (("\\"a b\\"" [a-b]))\n'
        'd ::= (("b"))\ne ::= (("b"))\n'
    )
    merged = merged_rules(ebnf)
    assert merged.splitlines()[0] == 'root ::= (("[" a a c "]"))'
    assert "\nb ::=" not in merged and '"\\"a b\\""' in merged and "[a-b]" in merged
    assert merged.count('::= (("b"))') == 1
    for text in ('[yxxyy"a b"a]', '[xyy"a b"b]', '[yy"a b"c]'):
        assert _is_grammar_accept_string(merged, text) == _is_grammar_accept_string(ebnf, text), text


def test_a_rule_read_before_its_twin_merged_in_a_cycle_names_the_kept_one():
    """P is read before X (X -> P -> Y, X: P and X refer to each other), then X merges into its twin Y: P's
    reference to X must follow it (it named a rule no longer written: xgrammar refused the grammar)."""
    ebnf = 'root ::= ((X))\nX ::= (("a" P))\nP ::= ((Y X) | (""))\nY ::= (("a" P))\n'
    merged = merged_rules(ebnf)
    assert xgr.Grammar.from_ebnf(merged) is not None
    for text in ("a", "aa", "aaa", "aaaa", "b"):
        assert _is_grammar_accept_string(merged, text) == _is_grammar_accept_string(ebnf, text), text


def test_rules_that_are_not_plain_optional_tails_stay():
    ebnf = 'root ::= ((a) | ("x" a)) (=("y"))\na ::= ((b) | ("x" | "z" b))\nb ::= (("y"))\n'
    assert optional_tails(ebnf) == ebnf


def test_the_output_parses():
    ebnf = cheaper_rules(compact_json_ebnf({**_object("abc", "b"), "additionalProperties": {"type": "string"}}, "p"))
    assert xgr.Grammar.from_ebnf(ebnf) is not None


def test_xml_members_keep_their_language():
    """qwen_xml's members (led by whitespace) in their own rules, each shared with the alternative that writes it
    first: the same parameter lists in every order and subset."""
    for required in ("", "b"):
        main = xml_arguments_ebnf(_object("abc", required), "qwen_xml", "p")
        rewritten = optional_tails(main)
        assert not _CASCADE.search(rewritten)
        assert ("(root_part_0_member root_part_1)" in rewritten) == (not required)  # fails before
        before, after = _acceptor(main), _acceptor(rewritten)
        for size in range(4):
            for chosen in itertools.permutations("abc", size):
                for space in ("", "\n"):
                    text = space.join(f"<parameter={k}>\n{i}\n</parameter>" for i, k in enumerate(chosen))
                    assert before(text) == after(text), (required, text)
                    assert after(text) == (list(chosen) == sorted(chosen) and set(required) <= set(chosen))


def test_xml_tag_text_is_one_rule_and_the_language_stays():
    """The text around each parameter (`<parameter=`, `>` and a newline, a newline and `</parameter>`; GLM's key
    and value tags) is written once, each member referring to it: the same lists of parameters."""
    for style, write in (
        ("qwen_xml", lambda k, v, nl: f"<parameter={k}>{nl}{v}{nl}</parameter>"),
        ("glm_xml", lambda k, v, nl: f"<arg_key>{k}</arg_key>{nl}<arg_value>{v}</arg_value>"),
    ):
        for required in ("", "b"):
            ebnf = xml_value_ebnf(_object("abc", required), style, SPELLINGS, "p", True)
            assert '"<parameter=a"' not in ebnf and '"<arg_key>a"' not in ebnf  # fails before: a literal each
            accepts = _acceptor(ebnf)
            for size in range(4):
                for chosen in itertools.permutations("abc", size):
                    for nl in ("", "\n"):
                        text = nl.join(write(k, i, nl) for i, k in enumerate(chosen))
                        valid = list(chosen) == sorted(chosen) and set(required) <= set(chosen)
                        assert accepts(text) == valid, (style, required, text)


def test_shared_text_is_found_only_as_whole_elements():
    ebnf = (
        'root ::= (("x\\">" ("\\n" | "") ">" ("\\n" | "")* "<parameter=q"{2} [">"] "<parameter=r" ">" ("\\n" | "")))\n'
    )
    shared = shared_text(ebnf, ('">" ("\\n" | "")',), ("<parameter=",))
    assert shared.splitlines() == [
        'root ::= (("x\\">" ("\\n" | "") ">" ("\\n" | "")* "<parameter=q"{2} [">"] shared_text_1 "r" shared_text_0))',
        'shared_text_0 ::= ((">" ("\\n" | "")))',
        'shared_text_1 ::= (("<parameter="))',
    ]
    before, after = _acceptor(ebnf), _acceptor(shared)
    for text in ('x">\n>\n\n<parameter=q<parameter=q><parameter=r>\n', 'x">><parameter=q<parameter=q"<parameter=r>'):
        assert before(text) and after(text), text
    assert not after('x">><parameter=q>'), "a repeated literal keeps its repetition"


def test_a_pattern_that_cannot_write_a_quote_escape_or_control_is_plain_ebnf():
    """xgrammar compiles a `Regex(…, json_string=true)` rule state by state (~9 ms a pattern on a 150k vocabulary):
    a pattern that cannot write what json_string takes out is its `from_regex` EBNF, the same strings."""
    for pattern, texts in (
        ("^[a-z]{2}\\d$", ('"ab1"', '"ab"', '"AB1"', '"ab12"', '"a"1"')),
        ("^\\$\\d+(,\\d{3})*\\?$", ('"$1,000?"', '"$1,00?"', '"$1"', '"$12,345,678?"')),
    ):
        schema = {"type": "string", "pattern": pattern}
        plain = json_value_ebnf(schema, SPELLINGS, "p", True)
        assert "Regex(" not in plain  # fails before: the pattern compiled as a regex rule
        before, after = _acceptor(compact_json_ebnf(schema, "p")), _acceptor(plain)
        for text in texts:
            assert before(text) == after(text), (pattern, text)
    for pattern in ("^a[^<]b$", "^a\\sb+$", "^[ -;]$", '^(a|")$', "^[a\\\\]+$"):  # may write one: kept
        assert "Regex(" in json_value_ebnf({"type": "string", "pattern": pattern}, SPELLINGS, "p", True), pattern


def test_a_class_that_negates_one_first_character_may_write_another():
    """Mistral's spellings start with `<` or `[`: `[^<]` can write `[TOOL_CALLS]`, so the pattern is narrowed to
    `[^[<]` (still enforced, no `[` at all)."""
    schema = {"type": "string", "pattern": "^[^<]*$"}
    accepts = _acceptor(json_value_ebnf(schema, ("<s>", "[TOOL_CALLS]"), "p", True))
    assert not accepts('"a[TOOL_CALLS]"')  # fails before the pattern was dropped: the pattern kept it
    assert accepts('"a>b"') and not accepts('"a[TOOL"') and not accepts('"a<b"')


@pytest.mark.parametrize("pattern", ['^a"b$', "^a\\nb$", "^x\\\\$", "^a\\u0022b$"])
def test_a_pattern_xgrammar_writes_as_raw_literals_is_refused_or_dropped(pattern):
    """xgrammar 0.2.9 writes a plain-text pattern's quote, backslash or control character raw inside the JSON
    string (`"a"b"`, no JSON): strict, a 400 naming the pattern; else the pattern is not enforced."""
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": pattern}}, "required": ["s"]}
    with pytest.raises(SchemaGrammarError) as info:  # fails before: a grammar taking `{"s": "a"b"}`
        json_value_ebnf(schema, SPELLINGS, "tools[0].function.parameters", True)
    assert info.value.param == "tools[0].function.parameters.properties.s.pattern"
    accepts = _acceptor(json_value_ebnf(schema, SPELLINGS, "p", False))
    assert not accepts('{"s": "a"b"}') and not accepts('{"s": "a\nb"}') and not accepts('{"s": "x\\"}')
    assert accepts('{"s": "a\\"b"}') and accepts('{"s": "x\\\\"}')


@pytest.mark.parametrize(
    ("style", "name"), [("qwen_xml", "a>b"), ("qwen_xml", "a\nb"), ("glm_xml", " a"), ("glm_xml", "")]
)
def test_a_parameter_name_the_parser_cannot_read_back_is_refused(style, name):
    """qwen3_xml's parser reads `<parameter=([^>\\n]*)>` (`<parameter=a>b>` is parameter `a`), GLM's strips the
    key and takes no empty one: such a name is a 400 naming the parameters, not a grammar for other names."""
    schema = {"type": "object", "properties": {name: {"type": "integer"}}, "required": [name]}
    with pytest.raises(SchemaGrammarError) as info:  # fails before: a grammar writing the name as it is
        xml_value_ebnf(schema, style, SPELLINGS, "tools[0].function.parameters", True)
    assert info.value.param == "tools[0].function.parameters.properties"
    assert xml_value_ebnf(_object("ab"), style, SPELLINGS, "p", True) is not None
