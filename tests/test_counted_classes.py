"""A JSON string pattern of counted classes written as plain EBNF: the same strings as xgrammar's json_string regex
rule (and as Python's `re.fullmatch` with JSON's unescaped characters), sampled at random, valid and near-valid."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable

import pytest
import xgrammar as xgr

from gateway.grammars import safe_json
from gateway.grammars.counted_classes import COSTLY_SPAN, closed_value, json_string_ebnf
from gateway.grammars.patterns import narrowed
from gateway.grammars.safe_json import json_value_ebnf, prefixes, regex_grammar

SPELLINGS = ("<|im_end|>",)
_COMPILER = xgr.GrammarCompiler(xgr.TokenizerInfo([]), cache_enabled=False)
ALPHABET = 'abxyZ059 -_.@/é\u3000\U0001f600"\\\t\n\r\x1f\x7f<]\u2028\x85\ufeff'
"""Letters, digits, spaces, JSON's escaped characters, `<` and `]`, and characters ECMA and Python class differently
(`\\x85` is Python's `\\s` only, `\\ufeff` ECMA's only): these two are checked against xgrammar's rule, not `re`."""
_ECMA_ONLY = frozenset("\x85\ufeff")

PATTERNS = [  # (pattern, a class its counted characters come from, a head and a tail it must have)
    (narrowed(r"^.{1,100}$"), r"[^<]", "", ""),
    (r"^[^<]{1,100}$", r"[^<]", "", ""),
    (narrowed(r"^\S{1,12}$"), r"[^\s<]", "", ""),
    (narrowed(r"^.{0,40}$"), r"[^<]", "", ""),
    (r"^x[^<]{2,5}y$", r"[^<]", "x", "y"),
    (r'^[^a-c\]\\"<]{1,5}$', r"[^<a]", "", ""),
    (narrowed(r"^\D{2,5}x.{0,3}$"), r"[^0-9<]", "", ""),
    (narrowed(r"^.{3,}$"), r"[^<]", "", ""),
    (r"^[^<\s]{4}$", r"\S", "", ""),
    (r"^[a-z]{1,100}$", r"[a-z]", "", ""),  # narrow classes, written in chunks
    (r"^\w{3,30}$", r"\w", "", ""),
    (r"^x[a-c]{0,20}y$", r"[a-c]", "x", "y"),
    (r"^[A-Za-z0-9._-]{1,64}@example\.com$", r"[a-z.]", "", "@example.com"),
]


def _accepts(ebnf_or_compiled: str | xgr.CompiledGrammar) -> Callable[[str], bool]:
    compiled = _COMPILER.compile_grammar(ebnf_or_compiled) if isinstance(ebnf_or_compiled, str) else ebnf_or_compiled

    def accepts(text: str) -> bool:
        matcher = xgr.GrammarMatcher(compiled, terminate_without_stop_token=True)
        return matcher.accept_string(text) and matcher.is_terminated()

    return accepts


def _samples(
    pattern: str, takes: str, head: str, tail: str, rng: random.Random, count: int, raw: bool = False
) -> list[str]:
    """Strings at the pattern's length bounds and between, of characters it takes that JSON writes unescaped (any
    it takes, when `raw`), every third one character away (any of ALPHABET)."""
    counts = [int(n) for n in re.findall(r"\{(\d+)(?:,(\d*))?\}", pattern) for n in n if n]
    lengths = sorted({0, 1, 2, *counts, *(n + 1 for n in counts), *(n - 1 for n in counts if n)})
    chars = [c for c in ALPHABET if re.fullmatch(takes, c) and (raw or _json_raw(c))]
    out = []
    for i in range(count):
        length = lengths[i] if i < len(lengths) else rng.randint(0, max(counts) + 3)
        text = head + "".join(rng.choice(chars) for _ in range(length)) + tail
        if i % 3 == 2 and text:  # near-valid: one character swapped for any
            at = rng.randrange(len(text))
            text = text[:at] + rng.choice(ALPHABET) + text[at + 1 :]
        out.append(text)
    return out


def _json_raw(text: str) -> bool:
    """Whether a JSON string writes `text` with no escape (xgrammar's json_string regex takes no escape)."""
    return not any(c in '"\\' or ord(c) < 0x20 for c in text)


@pytest.mark.parametrize(("pattern", "takes", "head", "tail"), PATTERNS)
def test_the_written_pattern_takes_exactly_the_strings_of_xgrammars_rule(
    pattern: str, takes: str, head: str, tail: str
) -> None:
    schema = {"type": "string", "pattern": pattern}
    ours = json_value_ebnf(schema, SPELLINGS, "p", strict=True, exact=True)
    assert ours is not None and "Regex(" not in ours  # written as EBNF (main kept xgrammar's regex rule here)
    theirs = _accepts(_COMPILER.compile_json_schema(json.dumps(schema), any_whitespace=False))
    mine = _accepts(ours)
    rng = random.Random(pattern)
    samples = _samples(pattern, takes, head, tail, rng, 160)
    taken = 0
    for text in samples:
        written = json.dumps(text, ensure_ascii=False)
        assert mine(written) == theirs(written), (pattern, text)
        taken += theirs(written)
        if not _ECMA_ONLY & set(text):
            flags = re.ASCII if "\\w" in pattern else 0  # ECMA's \w is ASCII; its \s is Unicode, as Python's
            assert mine(written) == bool(re.fullmatch(pattern, text, flags) and _json_raw(text)), (pattern, text)
    assert 5 <= taken <= len(samples) - 5  # both sides of the language are sampled


@pytest.mark.parametrize(
    "pattern",
    [r"^(ab){1,3}$", r"^(?:a|b){2,4}$", r"^.+$", r"^a\d*b$", r"^[a-z]+x{2}$", r"^\"{1,3}$", r"^[\x00-\x1f]{2}$"],
)
def test_other_shapes_stay_xgrammars(pattern: str) -> None:
    assert json_string_ebnf(regex_grammar(pattern)) is None


def test_patterns_that_need_no_escape_are_written_as_before() -> None:
    ebnf = json_value_ebnf(
        {"type": "string", "pattern": r"^[A-Z]{2}\d{4,10}$"}, SPELLINGS, "p", strict=True, exact=True
    )
    assert ebnf is not None and "root_1 ::= ((root_1_re_root))" in ebnf


@pytest.mark.parametrize("least", [0, 3])
def test_a_narrow_count_written_negated_takes_every_length_of_its_span_and_no_other(least: int) -> None:
    """`[a-c]{m,n}` as `[^\\x00-\\x60d-\\U0010ffff]{m,n}`: xgrammar settles a negated class's count cheaply (~5 ms of
    compile for `[a-z]{1,100}` on Qwen3's vocabulary, ~250 ms positive, ~50 ms in chunks at ~2 ms a token mask)."""
    for span in range(COSTLY_SPAN, 2 * COSTLY_SPAN):
        ebnf = json_string_ebnf(regex_grammar(f"^[a-c]{{{least},{least + span}}}$"))
        assert ebnf is not None and "[^" in ebnf and "_chunk" not in ebnf
        accepts = _accepts(ebnf)
        taken = [n for n in range(least + span + 3) if accepts("abc" * (n // 3) + "abc"[: n % 3])]
        assert taken == list(range(least, least + span + 1)), span
        assert not accepts("abd") and not accepts("ab\u00e9") and not accepts("ab`")


@pytest.mark.parametrize("pattern", [r"^.{0,256}$", r"^[a-z]{0,300}$", r"^x.{200,300}$"])
def test_counts_past_xgrammars_unzipping_stay_its_regex_rule(pattern: str) -> None:
    """xgrammar compiles these as a repeat (~5 ms); its printed EBNF cost ~480 ms (`[a-z]{0,300}`, Qwen3's)."""
    ebnf = json_value_ebnf({"type": "string", "pattern": pattern}, SPELLINGS, "p", strict=True, exact=True)
    assert ebnf is not None and "Regex(" in ebnf


XML_SPELLINGS = ("<tool_call>", "</tool_call>", "<|im_end|>", "<|im_start|>")
XML_PARAMETERS = {  # style: a parameter `a` of `value` as the style writes it, with the whitespace around it
    "qwen_xml": lambda value, before, after: f"<parameter=a>{before}{value}{after}</parameter>",
    "glm_xml": lambda value, before, after: f"<arg_key>a</arg_key>\n<arg_value>{before}{value}{after}</arg_value>",
}


def _xml_ebnf(schema: dict, style: str, rewritten: bool, monkeypatch: pytest.MonkeyPatch) -> str:
    """The arguments grammar of `schema` in `style`, uncached (its values' counted classes inlined before their
    closing tag, or not: as before that rewrite, qwen_xml's value between the style's optional newlines)."""
    with monkeypatch.context() as patched:
        if not rewritten:
            patched.setattr(safe_json, "sequence_writer", lambda ebnf, newline: lambda name: None)
            patched.setattr(safe_json, "_may_write_newline", lambda value, bodies, classes: False)
        ebnf = safe_json._converted_value_ebnf(
            json.dumps(schema), style, XML_SPELLINGS, prefixes(XML_SPELLINGS), "p", (True, True)
        )
    assert ebnf is not None
    return ebnf


@pytest.mark.parametrize("style", sorted(XML_PARAMETERS))
@pytest.mark.parametrize(("pattern", "takes", "head", "tail"), PATTERNS)
def test_a_raw_xml_value_of_counted_classes_takes_exactly_the_strings_it_took(
    style: str, pattern: str, takes: str, head: str, tail: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The value inlined before its closing tag (twice, with and without qwen3_xml's stripped newline: ~2.5 s -> ~30
    ms of compile on Qwen3's vocabulary for `^.{1,100}$`) takes what the grammar of its own rules took; qwen_xml's
    only where the qwen3_xml parser reads a value the pattern matches, its leading newline written (the grammar of
    its own rules took `\n` for `[^<]{1,100}`, which reads as "")."""
    schema = {
        "type": "object",
        "properties": {"a": {"type": ["string", "null"], "pattern": pattern}, "b": {"type": "integer"}},
        "required": ["a"],
    }
    ours = _xml_ebnf(schema, style, True, monkeypatch)
    before = _xml_ebnf(schema, style, False, monkeypatch)
    assert ours != before
    mine, theirs, matches = _accepts(ours), _accepts(before), _accepts(regex_grammar(pattern))
    rng = random.Random(pattern + style)
    texts = [*_samples(pattern, takes, head, tail, rng, 60, raw=True), "null"]
    taken = 0
    for text in texts:
        for around in ("", "\n"), ("\n", ""), ("\n", "\n"), ("", ""), (" ", ""):
            written = XML_PARAMETERS[style](text, *around)
            body = "".join((around[0], text, around[1]))
            read = body.removeprefix("\n").removesuffix("\n")  # the qwen3_xml parser's
            reads_back = read == "null" or body[:1] == "\n" and matches(read)
            assert mine(written) == (theirs(written) and (style != "qwen_xml" or reads_back)), (pattern, written)
            taken += theirs(written)
    assert 5 <= taken <= 5 * len(texts) - 5


@pytest.mark.parametrize("style", ["json", *sorted(XML_PARAMETERS)])
def test_best_effort_enforces_a_narrowed_pattern_it_writes_as_plain_ebnf_and_drops_the_rest(style: str) -> None:
    """Without the client's strict, a pattern that could write `<` and counts past 4 was dropped (its json_string
    regex cost ~1.5 s to compile); written as counted classes it costs ~20-40 ms, so it is narrowed and enforced."""

    def accepts(pattern: str, value: str) -> bool:
        schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": pattern}}, "required": ["a"]}
        if style == "json":
            ebnf = json_value_ebnf(schema, XML_SPELLINGS, "p", strict=True, exact=False)
            return _accepts(ebnf)(json.dumps({"a": value}, separators=(", ", ": ")))
        ebnf = safe_json.xml_value_ebnf(schema, style, XML_SPELLINGS, "p", strict=True, exact=False)
        return _accepts(ebnf)(XML_PARAMETERS[style](value, "\n" if style == "qwen_xml" else "", ""))

    assert accepts(r"^.{1,100}$", "x" * 100) and not accepts(r"^.{1,100}$", "x" * 101)
    assert not accepts(r"^.{1,100}$", "a<b")  # narrowed
    assert accepts(r"^(a.){1,30}$", "free text")  # a group: still dropped
    assert accepts(r"^.{1,100}x$", "free text")  # `x` does not end the count cheaply (~2.5 s): dropped
    assert accepts(r"^[^a]{1,100}$", "a")  # qwen_xml's optional newline does not either: dropped


@pytest.mark.parametrize("pattern", [r"^[^<]{1,20}$", "^[a-z\\n]{1,20}$"])
def test_a_qwen_xml_value_ending_in_a_class_that_holds_the_newline_takes_it_before_the_tag_only_at_full_count(
    pattern: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`c{1,20}` then qwen3_xml's optional newline, c holding it: written `c' "</parameter>"`, `c{2,20}
    "</parameter>"` or `c{20} "\\n</parameter>"` after the leading newline (the newline never continues the count:
    ~2.3 s -> ~130 ms at {1,100}), the full count of the class as written (negated: `[a-z\\n]` is
    `[^\\x00-\\x09\\x0b-\\x60\\x7b-\\U0010ffff]`): what the grammar of its own rules took where the parser
    reads 1 to 20 characters back (it took `\\n`, read as "")."""
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": pattern}}, "required": ["a"]}
    ours = _xml_ebnf(schema, "qwen_xml", True, monkeypatch)
    assert "_chunk_" in ours and ("_negated_chunk_" in ours) == ("a-z" in pattern)
    mine, theirs = _accepts(ours), _accepts(_xml_ebnf(schema, "qwen_xml", False, monkeypatch))
    for n in range(23):
        for value in "a" * n, "a" * (n - 1) + "\n", "\n" * n, "\n" + "a" * (n - 1):
            for around in ("", ""), ("\n", ""), ("", "\n"), ("\n", "\n"), ("", "\n\n"):
                written = XML_PARAMETERS["qwen_xml"](value, *around)
                body = around[0] + value + around[1]
                reads_back = body[:1] == "\n" and 1 <= len(body[1:].removesuffix("\n")) <= 20
                assert mine(written) == (theirs(written) and reads_back), repr(written)


def _dsml_calls(value: str) -> str:
    """A DeepSeek V4.1 calls block of one call `f(a=value)`, `a` a raw string, every tag as text."""
    from gateway.families.deepseek.markers import CALLS_CLOSE, CALLS_OPEN, INVOKE_CLOSE, PARAMETER_CLOSE, V41

    line = V41.parameter_open("a", True) + value + PARAMETER_CLOSE
    return f"\n\n{CALLS_OPEN}\n{V41.invoke_open('f')}\n{line}\n{INVOKE_CLOSE}\n{CALLS_CLOSE}"


def _dsml_grammar(pattern: str, rewritten: bool, monkeypatch: pytest.MonkeyPatch) -> str:
    """DeepSeek V4.1's grammar (tags as text) for one tool `f` of a required raw string `a` of `pattern`, its counts
    written up to the parameter's closing tag (or not: as before that rewrite)."""
    from gateway.families.deepseek import grammar
    from gateway.types import ChatRequest

    parameters = {"type": "object", "properties": {"a": {"type": "string", "pattern": pattern}}, "required": ["a"]}
    tool = {"type": "function", "function": {"name": "f", "parameters": parameters, "strict": True}}
    request = ChatRequest(messages=[{"role": "user", "content": "hi"}], tools=[tool], tool_choice="required")
    with monkeypatch.context() as patched:
        if not rewritten:
            patched.setattr(grammar, "closed_value", lambda ebnf, close: None)
        grammar._grammar.cache_clear()
        built = grammar.build_grammar(request, False)
    grammar._grammar.cache_clear()
    assert built is not None and built.kind == "structural_tag"
    return built.text


@pytest.mark.parametrize(("pattern", "takes", "head", "tail"), PATTERNS[:6] + PATTERNS[7:])  # 60 samples: one of
# `\D{2,5}x.{0,3}` rarely places its `x`
def test_a_deepseek_raw_value_of_counted_classes_takes_exactly_the_strings_it_took(
    pattern: str, takes: str, head: str, tail: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The value written with its closing tag `</｜DSML｜ parameter>` in its count's rule (~1.9 s -> ~16 ms of compile
    on DeepSeek V4's vocabulary for `^.{1,100}$`) takes what the value in its own rule took, and what `re` does."""
    ours, before = (_dsml_grammar(pattern, rewritten, monkeypatch) for rewritten in (True, False))
    assert ours != before
    mine, theirs = (_accepts(_COMPILER.compile_structural_tag(g)) for g in (ours, before))
    rng = random.Random(pattern + "dsml")
    taken, samples = 0, _samples(pattern, takes, head, tail, rng, 60, raw=True)
    for text in samples:
        written = _dsml_calls(text)
        assert mine(written) == theirs(written), (pattern, text)
        taken += theirs(written)
        if not _ECMA_ONLY & set(text):
            flags = re.ASCII if "\\w" in pattern else 0
            assert mine(written) == bool(re.fullmatch(pattern, text, flags) and "<" not in text), (pattern, text)
    assert 5 <= taken <= len(samples) - 3  # both sides of the language are sampled


@pytest.mark.parametrize(("pattern", "takes", "head", "tail"), PATTERNS[:6] + PATTERNS[7:])
def test_a_raw_value_with_its_classes_negated_takes_exactly_the_strings_it_took(
    pattern: str, takes: str, head: str, tail: str
) -> None:
    """Kimi's raw value (no close in its rule: a token): `closed_value` with no close, the same strings as the
    pattern's grammar, and as `re` (`[a-z]{1,64} "@example.com"` ~145 -> ~5 ms of compile on Qwen3's vocabulary)."""
    before = safe_json.raw_pattern_ebnf(pattern, "p", True)
    assert before is not None
    ours = closed_value(before) or before
    assert ("_negated" in ours) == bool(re.search(r"::= \(\(\[[^^]", before))  # each positive class, only those
    mine, theirs = _accepts(ours), _accepts(before)
    rng = random.Random(pattern + "raw")
    taken, samples = 0, _samples(pattern, takes, head, tail, rng, 60, raw=True)
    for text in samples:
        assert mine(text) == theirs(text), (pattern, text)
        taken += theirs(text)
        if not _ECMA_ONLY & set(text):
            flags = re.ASCII if "\\w" in pattern else 0
            assert mine(text) == bool(re.fullmatch(pattern, text, flags) and "<" not in text), (pattern, text)
    assert 5 <= taken <= len(samples) - 3


def test_a_closed_raw_value_writes_a_short_count_that_varies_up_to_its_close() -> None:
    """Closed by its tag, a narrow class's count that varies is negated in the close's rule however short (before,
    only from `COSTLY_SPAN`: `[a-z]{2,8}` cost a ~0.65 ms token mask on DeepSeek's vocabulary, ~0.01 so); a short
    fixed count stays as it was (negated it costs more), and so does any value with no close."""
    close = '"</x>"'
    assert (
        closed_value(regex_grammar("^[a-z]{2,8}$"), close).splitlines()[0] == 'root ::= ((root_1_negated{2, 8} "</x>"))'
    )
    assert closed_value(regex_grammar("^[a-z]+$"), close) is None  # a recursion, not a count
    assert closed_value(regex_grammar(r"^\d{3}-\d{4}$"), close) is None
    assert closed_value(regex_grammar("^[a-z]{2,8}$")) is None
