"""XML-style arguments (`glm_xml`, `qwen_xml`): a free parameter name (`additionalProperties`) or pattern key
(`patternProperties`) is never a declared name of its object, and no declared parameter is written twice; a declared
name's prefix and extensions stay free names."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import xgrammar as xg

from gateway.grammars.free_names import _tail_rules, free_name_rules
from gateway.grammars.json import SchemaGrammarError
from gateway.grammars.key_patterns import key_pattern_rules
from gateway.grammars.safe_json import xml_value_ebnf
from gateway.grammars.unmatched_names import unmatched_name_rules

ROOT = Path(__file__).resolve().parents[1]

SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer"}, "name": {"type": "string"}},
    "required": ["n"],
    "additionalProperties": True,
}
LAYOUT = {  # a parameter as each style writes it
    "glm_xml": lambda k, v: f"<arg_key>{k}</arg_key><arg_value>{v}</arg_value>",
    "qwen_xml": lambda k, v: f"<parameter={k}>\n{v}\n</parameter>\n",
}


def _taker(ebnf: str) -> Callable[[str], bool]:
    """Whether the grammar `ebnf` takes a text whole (compiled once, without a vocabulary: only the text counts)."""
    compiled = xg.GrammarCompiler(xg.TokenizerInfo([]), cache_enabled=False).compile_grammar(ebnf)

    def takes(text: str) -> bool:
        matcher = xg.GrammarMatcher(compiled, terminate_without_stop_token=True)
        return matcher.accept_string(text) and matcher.is_terminated()

    return takes


def _takes(ebnf: str, text: str) -> bool:
    return _taker(ebnf)(text)


def _arguments(style: str, schema: dict[str, Any], *parameters: tuple[str, str]) -> bool:
    ebnf = xml_value_ebnf(schema, style, ("<|im_end|>",), "p", True)
    return _takes(ebnf, "".join(LAYOUT[style](k, v) for k, v in parameters))


@pytest.mark.parametrize("style", ["glm_xml", "qwen_xml"])
def test_a_declared_name_is_no_free_name(style: str) -> None:
    """xgrammar's styles let a free parameter take a declared name: `n` again with an empty value (no integer), or
    the optional `name` after a free parameter, its schema unchecked (both taken before)."""
    assert _arguments(style, SCHEMA, ("n", "1"), ("extra", "x"))
    assert not _arguments(style, SCHEMA, ("n", "1"), ("n", ""))
    assert not _arguments(style, SCHEMA, ("n", "1"), ("extra", "x"), ("name", "[1]"))
    assert not _arguments(style, SCHEMA, ("n", "1"), ("name", "a"), ("name", "b"))


@pytest.mark.parametrize("style", ["glm_xml", "qwen_xml"])
def test_a_declared_name_s_prefixes_and_extensions_stay_free(style: str) -> None:
    for free in ("na", "nam", "n_", "name1", "names", "N", "_n", "x"):
        assert _arguments(style, SCHEMA, ("n", "1"), (free, "v")), free


@pytest.mark.parametrize("style", ["glm_xml", "qwen_xml"])
def test_no_declared_parameter_twice_without_free_names(style: str) -> None:
    closed = {**SCHEMA, "additionalProperties": False}
    assert _arguments(style, closed, ("n", "1"), ("name", "a"))
    assert not _arguments(style, closed, ("n", "1"), ("n", "2"))
    assert not _arguments(style, closed, ("n", "1"), ("name", "a"), ("name", "b"))


def test_free_names_within_the_bound() -> None:
    """qwen_xml's free names stay within 64 characters; one that leaves the declared names' prefixes after its
    first character may come up to 7 short (the tails share their rules), never a declared name."""
    ebnf = "root ::= name\n" + free_name_rules(["n", "name", "na1", "x_y", "Z"], 64, "name")
    for name in ("q" * 64, "n" + "q" * 56, "nam" + "e" * 54, "x_" + "y" * 55, "Zz", "na", "nam", "na12", "x_", "x"):
        assert _takes(ebnf, name), name
    for name in ("q" * 65, "n" + "q" * 64, "n", "name", "na1", "x_y", "Z", "", "1a", "a-b"):
        assert not _takes(ebnf, name), name
    unbounded = "root ::= name\n" + free_name_rules(["n", "name"], None, "name")
    assert _takes(unbounded, "n" + "q" * 300) and not _takes(unbounded, "name")


def test_an_any_of_branch_s_free_names_exclude_only_its_own_declared_ones() -> None:
    """A branch's free names exclude its own declared names, not another branch's: `b`, declared only in the second
    branch, is a free name of the first (refused before: every branch excluded every branch's names)."""
    branch = {"type": "object", "required": ["a"], "additionalProperties": True}
    schema = {"anyOf": [{**branch, "properties": {"a": {"type": "integer"}}}, {**branch, "required": ["b"],
              "properties": {"b": {"type": "integer"}}}]}  # fmt: skip
    for style in LAYOUT:
        assert _arguments(style, schema, ("a", "1"), ("c", "x"))
        assert _arguments(style, schema, ("a", "1"), ("b", "x"))
        assert _arguments(style, schema, ("b", "1"), ("a", "x"))
        assert not _arguments(style, schema, ("a", "1"), ("a", "x"))
        assert not _arguments(style, schema, ("b", "1"), ("b", "x"))


@pytest.mark.parametrize("style", ["glm_xml", "qwen_xml"])
def test_a_pattern_key_is_no_declared_name(style: str) -> None:
    """A `patternProperties` key that matches a declared name wrote it again (`n` twice, the last a string where
    `n` is an integer: the parser keeps the last)."""
    schema = {"properties": {"n": {"type": "integer"}}, "required": ["n"],
              "patternProperties": {"^[a-z]+$": {"type": "string"}, "^x_[0-9]+$": {"type": "integer"}}}  # fmt: skip
    assert _arguments(style, schema, ("n", "1"), ("nn", "x"), ("x_1", "2"))
    assert not _arguments(style, schema, ("n", "1"), ("n", "x"))
    assert not _arguments(style, schema, ("n", "1"), ("nn1", "x"))  # the pattern's own language still holds
    declared = {**schema, "properties": {"n": {"type": "integer"}, "x_1": {"type": "string"}}}
    assert _arguments(style, declared, ("n", "1"), ("x_1", "s"), ("x_12", "2"))
    assert not _arguments(style, declared, ("n", "1"), ("x_1", "s"), ("x_1", "2"))


@pytest.mark.parametrize("style", ["glm_xml", "qwen_xml"])
def test_free_names_behind_a_root_ref_exclude_its_declared_ones(style: str) -> None:
    schema = {"$ref": "#/$defs/A", "$defs": {"A": {**SCHEMA, "type": "object"}}}
    assert _arguments(style, schema, ("n", "1"), ("extra", "x"))
    assert not _arguments(style, schema, ("n", "1"), ("n", "x"))  # taken before
    legacy = {"anyOf": [{"$ref": "#/definitions/B"}], "definitions": {"B": {"$ref": "#/definitions/A"}, "A": SCHEMA}}
    assert not _arguments(style, legacy, ("n", "1"), ("name", "a"), ("name", "b"))
    branch = {"properties": {"b": {"type": "integer"}}, "required": ["b"], "additionalProperties": True}
    branches = {"anyOf": [{"$ref": "#/$defs/A"}, branch], "$defs": {"A": SCHEMA}}
    assert _arguments(style, branches, ("b", "1"), ("n", "x"))  # `n` is declared in the other branch only
    assert not _arguments(style, branches, ("n", "1"), ("name", "a"), ("name", "b"))


PATTERNS = ["^[a-z]+$", "^x_[0-9]{1,3}$", "^(foo|bar)_\\d*$", "^n$", "^n.*$", "a|bc?", "^[^<>]{0,4}$", "^\\w+\\s?$"]


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("most", [None, 5])
def test_a_key_pattern_s_rules_take_its_full_matches_but_the_declared_names(pattern: str, most: int | None) -> None:
    """With `most` (qwen_xml), none longer and none with `>` or a newline (its parser reads neither back)."""
    names = ["n", "name", "na1", "x_1", "x_12", "foo_", "bar_9", "a", "b", "", "ab", "a b"]
    unreadable = [(0x0A, 0x0A), (0x3E, 0x3E)] if most else []
    rules = key_pattern_rules(pattern, names, "key", most, unreadable)
    ours = _taker("root ::= key\n" + (rules or str(xg.Grammar.from_regex(pattern)).replace("root ::=", "key ::=")))
    regex = _taker(str(xg.Grammar.from_regex(pattern)))
    rng = random.Random(pattern)
    alphabet = sorted(set("".join(names)) | set("abz019_<> \n"))
    words = set(names) | {"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8))) for _ in range(200)}
    for word in sorted(words):
        readable = most is None or (len(word) <= most and ">" not in word and "\n" not in word)
        assert ours(word) == (regex(word) and word not in names and readable), repr(word)


def test_a_key_pattern_of_other_syntax_or_that_matches_no_declared_name_keeps_xgrammars() -> None:
    for pattern in ("(?i)^n$", "^a(?=b)", "^(a)\\1$", "a^b", "^[a-z]{1,3000}$", "^m+$"):
        assert key_pattern_rules(pattern, ["n"], "key") is None, pattern


def test_qwen_xml_pattern_keys_are_as_short_as_free_names_and_readable() -> None:
    """qwen_xml wrote a pattern key of any length (`<parameter=` + 300 `a`: the parser reads a name within 256
    characters) and with `>` (`<parameter=a>b>` reads as `a`); GLM's keys stay unbounded."""
    schema = {"type": "object", "patternProperties": {"^[a-z]+$": {"type": "string"}, "^q[^<]q$": {"type": "integer"}}}
    assert _arguments("qwen_xml", schema, ("a" * 64, "x"), ("q_q", "1"))
    assert not _arguments("qwen_xml", schema, ("a" * 65, "x"))
    assert not _arguments("qwen_xml", schema, ("a" * 300, "x"))
    assert not _arguments(
        "qwen_xml", {"type": "object", "patternProperties": {"^q[^<]q$": {"type": "integer"}}}, ("q>q", "1")
    )
    assert _arguments("glm_xml", schema, ("a" * 300, "x"), ("q>q", "1"))


@pytest.mark.parametrize("style", ["glm_xml", "qwen_xml"])
def test_a_free_name_a_pattern_matches_is_no_free_name(style: str) -> None:
    """`additionalProperties` types only names no pattern key matches: `x_a` = 5 was taken as a free integer where
    the pattern's schema says boolean."""
    schema = {"type": "object", "properties": {"n": {"type": "integer"}},
              "patternProperties": {"^x_[a-z]+$": {"type": "boolean"}, "b": {"type": "boolean"}},
              "additionalProperties": {"type": "integer"}}  # fmt: skip
    assert _arguments(style, schema, ("n", "1"), ("x_a", "true"), ("x_", "5"), ("x_a1", "5"), ("y", "5"))
    for name in ("x_a", "x_abc", "b", "ab", "abc"):  # `b` unanchored: any name holding it
        assert not _arguments(style, schema, ("n", "1"), (name, "5")), name


UNMATCHED = [["^x_[a-z]+$"], ["b"], ["^a", "z$"], ["^[a-c]{2}$", "_\\d"], ["^(ab|c)*d$"], ["^$"]]


@pytest.mark.parametrize("patterns", UNMATCHED)
@pytest.mark.parametrize("most", [None, 6])
def test_free_names_are_the_names_no_pattern_matches(patterns: list[str], most: int | None) -> None:
    declared = ["n", "ab", "x_a1"]
    rules, tails = unmatched_name_rules(patterns, declared, most, "name") or ("", {})
    ours = _taker("\n".join(["root ::= name", rules, *_tail_rules(tails, "name")]))
    rng = random.Random(repr((patterns, most)))
    words = {"".join(rng.choice("abcdxz_019A") for _ in range(rng.randint(0, 8))) for _ in range(600)}
    for word in sorted(words | set(declared) | {"x_a1b", "x_ab1", "x_a1_", "aaa1b", "bA", "Ab", "x_A", "a_1b"}):
        free = bool(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", word)) and (most is None or len(word) <= most)
        expected = free and word not in declared and not any(re.search(p, word) for p in patterns)
        assert ours(word) == expected, (word, patterns)


def test_free_names_beside_a_pattern_not_followed_are_refused_under_strict() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}},
              "patternProperties": {"^x[a-z]{1,3000}$": {"type": "string"}}, "additionalProperties": True}  # fmt: skip
    for style in ("glm_xml", "qwen_xml"):  # past the automaton's bound: not searched in `n` either (claimed_names)
        with pytest.raises(SchemaGrammarError) as refused:
            xml_value_ebnf(schema, style, ("<|im_end|>",), "p", True, exact=True)
        assert refused.value.param == "p.patternProperties"
        assert xml_value_ebnf(schema, style, ("<|im_end|>",), "p", True) is not None  # best effort: the gap stays


def test_free_names_beside_a_pattern_stay_within_the_bound() -> None:
    """qwen_xml's bound holds where a pattern may still match (a chain counted in blocks of 8, never longer)."""
    rules, tails = unmatched_name_rules(["^[a-z]+$"], ["n"], 64, "name") or ("", {})
    ours = _taker("\n".join(["root ::= name", rules, *_tail_rules(tails, "name")]))
    assert ours("a" * 40 + "B") and ours("B" + "a" * 63) and ours("a1") and ours("n1")
    assert not ours("a" * 64) and not ours("a" * 64 + "B") and not ours("B" + "a" * 64) and not ours("n")
    rules, tails = unmatched_name_rules(["^x_[a-z]+$", "b"], [], 64, "name") or ("", {})
    chained = _taker("\n".join(["root ::= name", rules, *_tail_rules(tails, "name")]))  # a chain into a chain
    assert chained("x_a1" + "a" * 53) and chained("x_" + "a" * 30 + "1" + "a" * 20) and chained("x_a_")
    assert not chained("x_a1" + "a" * 61) and not chained("x_ab1") and not chained("x_a1b") and not chained("x_a")


def test_free_name_rules_are_the_same_under_every_hash_seed():
    """The rules (and so a grammar's text, its cache key) do not depend on the order a set of names iterates in."""
    script = (
        "from gateway.grammars.free_names import free_name_rules\n"
        "print(free_name_rules(['alpha', 'beta', 'bet', 'gamma', 'al', 'zeta', 'zed'], 12, 'r'))\n"
    )
    texts = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONHASHSEED": str(seed), "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in range(1, 5)
    }
    assert len(texts) == 1
