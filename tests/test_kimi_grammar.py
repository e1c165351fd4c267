"""Kimi K3 structural tags, checked with xgrammar on a synthetic Kimi vocabulary whose control tokens are real added tokens."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import xgrammar as xg

from backends.kimi_tokenizer import load_kimi_tokenizer
from gateway.families.kimi.grammar import ControlIds, build_grammar
from gateway.families.kimi.markers import CLOSE, END_OF_MSG, OPEN, SEP
from gateway.families.kimi.parser import typed_value
from gateway.prompts.encoding import PromptEncoder
from gateway.types import ChatRequest
from tests.schema_language import atoms, sample
from tests.test_any_of_siblings import CONTACT, TYPED
from tests.test_kimi_tokenizer import write_synthetic_checkpoint

_CONTROL = re.compile("(" + "|".join(map(re.escape, (OPEN, CLOSE, SEP, END_OF_MSG))) + ")")


class Spelled(str):
    """Text that spells markers with ordinary tokens."""


Vocab = tuple[PromptEncoder, xg.GrammarCompiler, ControlIds, int]


@pytest.fixture(scope="module")
def vocab(tmp_path_factory: pytest.TempPathFactory) -> Vocab:
    return synthetic_vocab(tmp_path_factory.mktemp("kimi-grammar"))


def synthetic_vocab(directory: Path) -> Vocab:
    """The encoder, an xgrammar compiler (control tokens are text to it, as SGLang's and vLLM's), the control
    ids and the stop id of a synthetic Kimi checkpoint written to `directory`."""
    specials = write_synthetic_checkpoint(directory)
    tokenizer = load_kimi_tokenizer(directory)
    size = tokenizer.get_vocab_size()
    strings = [tokenizer.id_to_token(i) for i in range(size)]
    info = xg.TokenizerInfo(strings, vocab_type=xg.VocabType.BYTE_LEVEL, stop_token_ids=[specials["[EOS]"]])
    return PromptEncoder(tokenizer), xg.GrammarCompiler(info), ControlIds.of(tokenizer), specials["[EOS]"]


def tool(name: str, parameters: dict[str, Any], strict: bool | None = None) -> dict[str, Any]:
    fn: dict[str, Any] = {"name": name, "parameters": parameters}
    if strict is not None:
        fn["strict"] = strict
    return {"type": "function", "function": fn}


WEATHER = tool(
    "get_weather",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "units": {"type": "string", "enum": ["c", "f"]},
        },
        "required": ["city", "days"],
    },
)
TIME = tool("get_time", {"type": "object", "properties": {}})


def request(*tools: dict[str, Any], **kwargs: Any) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": "hi"}], tools=list(tools), **kwargs)


def ids_of(encoder: PromptEncoder, *parts: str) -> list[int]:
    """Control tokens where a str spells a marker; a `Spelled` part is all ordinary tokens."""
    out: list[int] = []
    for part in parts:
        if isinstance(part, Spelled):
            out += encoder.encode_plain(part)
            continue
        for chunk in _CONTROL.split(part):
            if chunk in encoder.added:
                out.append(encoder.added[chunk])
            elif chunk:
                out += encoder.encode_plain(chunk)
    return out


def accepts(vocab, req: ChatRequest, *parts: str, channel: str = "response", always_strict: bool = False) -> bool:
    """Whether the grammar for `req` takes exactly this output (then the end of generation)."""
    encoder, compiler, ids, eos = vocab
    grammar = build_grammar(req, channel, ids, always_strict)
    assert grammar is not None and grammar.kind == "structural_tag"
    matcher = xg.GrammarMatcher(compiler.compile_structural_tag(grammar.text))
    return all(matcher.accept_token(t) for t in ids_of(encoder, *parts)) and matcher.accept_token(eos)


def call(name: str, *arguments: str, index: str = "1") -> str:
    return f'{OPEN}call tool="{name}" index="{index}"{SEP}' + "".join(arguments) + f"{CLOSE}call{SEP}"


def arg(key: str, kind: str, value: str) -> str:
    return f'{OPEN}argument key="{key}" type="{kind}"{SEP}{value}{CLOSE}argument{SEP}'


def section(*calls: str) -> str:
    return f"{OPEN}tools{SEP}" + "".join(calls) + f"{CLOSE}tools{SEP}"


END = f"{CLOSE}message{SEP}{END_OF_MSG}"
PARIS = call("get_weather", arg("city", "string", "Paris"), arg("days", "number", "3"))


def test_no_tools_no_format_means_no_grammar(vocab) -> None:
    assert build_grammar(request(), "think", vocab[2]) is None
    assert build_grammar(request(WEATHER, tool_choice="none"), "think", vocab[2]) is None


def test_auto_leaves_ordinary_text_unconstrained(vocab) -> None:
    text = Spelled(f"Any text {{at all}} even {OPEN}tools{SEP} spelled out, 你好 😀")
    assert accepts(vocab, request(WEATHER), text, f"{CLOSE}response{SEP}", END)
    assert accepts(
        vocab,
        request(WEATHER),
        "reasoning ",
        text,
        f"{CLOSE}think{SEP}{OPEN}response{SEP}",
        text,
        f"{CLOSE}response{SEP}",
        END,
        channel="think",
    )
    assert accepts(vocab, request(WEATHER), f"plain{CLOSE}response{SEP}")


def test_auto_activates_after_the_tools_marker(vocab) -> None:
    assert accepts(vocab, request(WEATHER), f"Let me check.{CLOSE}response{SEP}", section(PARIS), END)
    assert accepts(
        vocab,
        request(WEATHER),
        f"why{CLOSE}think{SEP}{OPEN}response{SEP}{CLOSE}response{SEP}",
        section(PARIS),
        END,
        channel="think",
    )
    assert accepts(vocab, request(WEATHER), f"why{CLOSE}think{SEP}", section(PARIS), END, channel="think")
    assert not accepts(vocab, request(WEATHER), f"x{CLOSE}response{SEP}{OPEN}tools{SEP}nonsense{CLOSE}tools{SEP}")


def test_spelled_markers_cannot_stand_for_control_tokens(vocab) -> None:
    assert not accepts(vocab, request(WEATHER), f"x{CLOSE}response{SEP}", Spelled(section(PARIS)), f"{CLOSE}tools{SEP}")
    spelled_close = Spelled(f"Paris{CLOSE}argument{SEP}")
    assert not accepts(
        vocab,
        request(WEATHER),
        f'{CLOSE}response{SEP}{OPEN}tools{SEP}{OPEN}call tool="get_weather" index="1"{SEP}{OPEN}argument key="city" type="string"{SEP}',
        spelled_close,
        arg("days", "number", "3"),
        f"{CLOSE}call{SEP}{CLOSE}tools{SEP}",
    )


def test_only_declared_tools_with_positive_indices(vocab) -> None:
    head = f"{CLOSE}response{SEP}"
    assert not accepts(
        vocab,
        request(WEATHER),
        head,
        section(call("get_wether", arg("city", "string", "Paris"), arg("days", "number", "3"))),
    )
    assert not accepts(
        vocab,
        request(WEATHER),
        head,
        section(call("get_weather", arg("city", "string", "P"), arg("days", "number", "3"), index="0")),
    )
    assert accepts(
        vocab,
        request(WEATHER),
        head,
        section(call("get_weather", arg("city", "string", "P"), arg("days", "number", "3"), index="12")),
    )


def test_parallel_tool_calls(vocab) -> None:
    head = f"{CLOSE}response{SEP}"
    assert accepts(vocab, request(WEATHER, TIME), head, section(PARIS, call("get_time")))
    assert not accepts(vocab, request(WEATHER, TIME, parallel_tool_calls=False), head, section(PARIS, call("get_time")))
    assert accepts(vocab, request(WEATHER, TIME, parallel_tool_calls=False), head, section(call("get_time")))


def test_required_strings_are_non_empty_optional_ones_may_be_empty(vocab) -> None:
    head = f"{CLOSE}response{SEP}"
    assert not accepts(
        vocab,
        request(WEATHER),
        head,
        section(call("get_weather", arg("city", "string", ""), arg("days", "number", "3"))),
    )
    notes = tool(
        "note",
        {"type": "object", "properties": {"text": {"type": "string"}, "tag": {"type": "string"}}, "required": ["text"]},
    )
    assert accepts(
        vocab, request(notes), head, section(call("note", arg("text", "string", "x"), arg("tag", "string", "")))
    )


EITHER = {
    "type": "object",
    "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
    "anyOf": [{"required": ["a"]}, {"required": ["b"]}],
}


@pytest.mark.parametrize(
    ("schema", "kind", "value", "ok"),
    [
        ({"type": "integer"}, "number", "15", True),
        ({"type": "integer"}, "number", "1.5", False),
        ({"type": "integer"}, "integer", "15", False),
        ({"type": "integer"}, "string", "15", False),
        ({"type": "number", "minimum": 0}, "number", "21.5", True),
        ({"type": "number", "minimum": 0}, "number", "-1", False),
        ({"type": "boolean"}, "boolean", "false", True),
        ({"type": "boolean"}, "boolean", "no", False),
        ({"type": "null"}, "null", "null", True),
        ({"type": "array", "items": {"type": "string"}}, "array", '["a", "b"]', True),
        ({"type": "array", "items": {"type": "string"}}, "array", "[1]", False),
        (
            {"type": "object", "properties": {"lat": {"type": "number"}}, "required": ["lat"]},
            "object",
            '{"lat": 47.3}',
            True,
        ),
        ({"type": "object", "properties": {"lat": {"type": "number"}}, "required": ["lat"]}, "object", "{}", False),
        ({"type": ["integer", "null"]}, "null", "null", True),
        ({"type": ["integer", "null"]}, "number", "5", True),
        ({"type": ["integer", "null"]}, "string", "5", False),
        ({"anyOf": [{"type": "string"}, {"type": "null"}]}, "string", "x", True),
        ({"anyOf": [{"type": "string"}, {"type": "null"}]}, "null", "null", True),
        ({"oneOf": [{"type": "integer"}, {"type": "boolean"}]}, "boolean", "true", True),
        ({"enum": ["c", "f"]}, "string", "c", True),
        ({"enum": ["c", "f"]}, "string", "k", False),
        ({"enum": [1, "one"]}, "number", "1", True),
        ({"const": "fixed"}, "string", "fixed", True),
        ({"const": "fixed"}, "string", "other", False),
        ({"allOf": [{"type": "integer"}, {"maximum": 9}]}, "number", "7", True),
        ({"allOf": [{"type": "integer"}, {"maximum": 9}]}, "number", "70", False),
        # the assertions beside a union hold for each branch (all_of.folded_branch)
        ({"anyOf": [{"type": "integer"}, {"type": "null"}], "minimum": 5}, "number", "3", False),
        ({"anyOf": [{"type": "integer"}, {"type": "null"}], "minimum": 5}, "number", "7", True),
        ({"anyOf": [{"type": "integer"}, {"type": "null"}], "minimum": 5}, "null", "null", True),
        ({"anyOf": [{"type": "string"}, {"type": "null"}], "minLength": 3}, "string", "ab", False),
        ({"anyOf": [{"type": "string"}, {"type": "integer"}], "type": "integer"}, "string", "abc", False),
        (EITHER, "object", "{}", False),
        (EITHER, "object", '{"b": "q"}', True),
        # listed values only where the keywords beside them admit them; a branch admitting none left out
        ({"enum": ["ab", "b"], "pattern": "^a"}, "string", "ab", True),
        ({"enum": ["ab", "b"], "pattern": "^a"}, "string", "b", False),
        ({"enum": ["a", "bb"], "maxLength": 1}, "string", "bb", False),
        ({"anyOf": [{"enum": ["a"], "maxLength": 0}, {"type": "integer"}]}, "string", "a", False),
        ({"anyOf": [{"enum": ["a"], "maxLength": 0}, {"type": "integer"}]}, "number", "4", True),
    ],
)
def test_typed_arguments(vocab, schema: dict, kind: str, value: str, ok: bool) -> None:
    f = tool("f", {"type": "object", "properties": {"x": schema}, "required": ["x"]})
    assert accepts(vocab, request(f), f"{CLOSE}response{SEP}", section(call("f", arg("x", kind, value)))) is ok


DEFS = {
    "type": "object",
    "$defs": {
        "Address": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        "Node": {
            "type": "object",
            "properties": {
                "value": {"type": "string"},
                "next": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/Node"}]},
            },
        },
        "Unit": {"enum": ["c", "f"]},
    },
    "definitions": {"Count": {"type": "integer", "minimum": 1}},
    "properties": {
        "address": {"$ref": "#/$defs/Address"},
        "node": {"$ref": "#/$defs/Node"},
        "unit": {"$ref": "#/$defs/Unit"},
        "count": {"$ref": "#/definitions/Count"},
        "tags": {"type": "array", "items": {"$ref": "#/$defs/Unit"}},
    },
    "required": ["address", "node", "unit", "count", "tags"],
}


def test_refs_defs_and_recursive_definitions(vocab) -> None:
    args = [
        arg("address", "object", '{"city": "Rome"}'),
        arg("node", "object", '{"value": "a", "next": {"value": "b", "next": null}}'),
        arg("unit", "string", "c"),
        arg("count", "number", "2"),
        arg("tags", "array", '["c", "f"]'),
    ]
    f = tool("f", DEFS)
    assert accepts(vocab, request(f), f"{CLOSE}response{SEP}", section(call("f", *args)))
    bad = [*args[:3], arg("count", "number", "0"), args[4]]
    assert not accepts(vocab, request(f), f"{CLOSE}response{SEP}", section(call("f", *bad)))
    assert not accepts(
        vocab, request(f), f"{CLOSE}response{SEP}", section(call("f", *args[:2], arg("unit", "string", "k"), *args[3:]))
    )


def test_root_pointer_and_dangling_pointers(vocab) -> None:
    tree = tool(
        "tree",
        {"type": "object", "properties": {"name": {"type": "string"}, "child": {"$ref": "#"}}, "required": ["name"]},
    )
    nested = '{"name": "leaf", "child": {"name": "leaf2"}}'
    assert accepts(
        vocab,
        request(tree),
        f"{CLOSE}response{SEP}",
        section(call("tree", arg("name", "string", "root"), arg("child", "object", nested))),
    )
    assert not accepts(
        vocab,
        request(tree),
        f"{CLOSE}response{SEP}",
        section(call("tree", arg("name", "string", "root"), arg("child", "object", '{"child": {}}'))),
    )
    assert not accepts(
        vocab,
        request(tree),
        f"{CLOSE}response{SEP}",
        section(call("tree", arg("name", "string", "root"), arg("child", "string", "leaf"))),
    )
    dangling = tool(
        "d",
        {
            "type": "object",
            "properties": {"x": {"type": "array", "items": {"$ref": "#/$defs/Missing"}}},
            "required": ["x"],
        },
    )
    assert accepts(
        vocab,
        request(dangling),
        f"{CLOSE}response{SEP}",
        section(call("d", arg("x", "array", "[1]"), arg("y", "string", "loose"))),
    )


def test_required_arguments_in_canonical_order_and_no_duplicate_required_key(vocab) -> None:
    f = tool(
        "f",
        {
            "type": "object",
            "properties": {"a": {"type": "string"}, "b": {"type": "string"}, "c": {"type": "number"}},
            "required": ["b", "a"],
        },
    )
    head = f"{CLOSE}response{SEP}"
    assert accepts(
        vocab,
        request(f),
        head,
        section(call("f", arg("b", "string", "1"), arg("a", "string", "2"), arg("c", "number", "3"))),
    )
    assert not accepts(vocab, request(f), head, section(call("f", arg("a", "string", "2"), arg("b", "string", "1"))))
    assert not accepts(
        vocab,
        request(f),
        head,
        section(call("f", arg("b", "string", "1"), arg("a", "string", "2"), arg("b", "string", "again"))),
    )
    assert not accepts(
        vocab,
        request(f),
        head,
        section(call("f", arg("b", "string", "1"), arg("a", "string", "2"), arg("zzz", "string", "?"))),
    )


def test_optional_only_schema_may_have_an_empty_body(vocab) -> None:
    f = tool("f", {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "boolean"}}})
    head = f"{CLOSE}response{SEP}"
    assert accepts(vocab, request(f), head, section(call("f")))
    assert accepts(vocab, request(f), head, section(call("f", arg("b", "boolean", "true"), arg("a", "string", "x"))))
    assert accepts(vocab, request(TIME), head, section(call("get_time")))


def test_ambiguous_schema_falls_back_to_parser_compatible_xtml(vocab) -> None:
    f = tool(
        "f", {"type": "object", "properties": {"anything": {}, "text": {"type": "string"}}, "required": ["anything"]}
    )
    head = f"{CLOSE}response{SEP}"
    assert accepts(
        vocab, request(f), head, section(call("f", arg("anything", "object", '{"k": 1}'), arg("other", "number", "2")))
    )
    assert not accepts(vocab, request(f), head, section(call("f", f'{OPEN}argument key="a"{SEP}v{CLOSE}argument{SEP}')))


def test_named_tool_choice(vocab) -> None:
    named = {"type": "function", "function": {"name": "get_time"}}
    req = request(WEATHER, TIME, tool_choice=named)
    assert accepts(vocab, req, f"{CLOSE}response{SEP}", section(call("get_time")), END)
    assert accepts(vocab, req, f"ok{CLOSE}think{SEP}", section(call("get_time")), channel="think")
    assert not accepts(vocab, req, f"{CLOSE}response{SEP}", section(PARIS))
    assert not accepts(vocab, req, f"no call{CLOSE}response{SEP}", END)
    two = section(call("get_time"), call("get_time", index="2"))  # a named tool is one call (tests/grammar_walks.py)
    assert not accepts(vocab, req, f"{CLOSE}response{SEP}", two, END)


def test_required_tool_choice_forces_a_call(vocab) -> None:
    req = request(WEATHER, TIME, tool_choice="required")
    assert not accepts(vocab, req, f"just text{CLOSE}response{SEP}", END)
    assert accepts(vocab, req, f"think{CLOSE}think{SEP}", section(PARIS), END, channel="think")


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_forced_calls_come_at_once_with_no_response_text(vocab, choice) -> None:
    """Under a forced tool_choice the tools section comes at once: no text in the response channel, which closes
    empty; after the reasoning an empty response channel or none (tests/grammar_walks.py FORCED)."""
    req = request(WEATHER, TIME, tool_choice=choice)
    assert accepts(vocab, req, f"{CLOSE}response{SEP}", section(PARIS), END)
    assert not accepts(vocab, req, f"Sure.{CLOSE}response{SEP}", section(PARIS), END)
    opened = f"{CLOSE}think{SEP}{OPEN}response{SEP}"
    assert not accepts(vocab, req, f"hm{opened}Sure.{CLOSE}response{SEP}", section(PARIS), END, channel="think")
    assert accepts(vocab, req, f"hm{opened}{CLOSE}response{SEP}", section(PARIS), END, channel="think")
    assert accepts(vocab, req, f"hm{CLOSE}think{SEP}", section(PARIS), END, channel="think")


def test_strict_policy(vocab) -> None:
    wrong = section(call("get_weather", arg("city", "number", "1"), arg("days", "string", "three")))
    relaxed = tool("get_weather", WEATHER["function"]["parameters"], strict=False)
    declared = tool("get_weather", WEATHER["function"]["parameters"], strict=True)
    assert accepts(vocab, request(relaxed), f"{CLOSE}response{SEP}", wrong)
    assert not accepts(vocab, request(declared), f"{CLOSE}response{SEP}", wrong)
    assert not accepts(vocab, request(WEATHER), f"{CLOSE}response{SEP}", wrong)
    assert not accepts(vocab, request(relaxed), f"{CLOSE}response{SEP}", section(call("other")))
    # the operator's strict mode overrides a tool's strict: false
    assert not accepts(vocab, request(relaxed), f"{CLOSE}response{SEP}", wrong, always_strict=True)


def test_response_format_json(vocab) -> None:
    fmt = {
        "type": "json_schema",
        "json_schema": {
            "name": "a",
            "schema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
        },
    }
    assert accepts(vocab, request(response_format=fmt), f'{{"n": 1}}{CLOSE}response{SEP}', END)
    assert not accepts(vocab, request(response_format=fmt), f"hello{CLOSE}response{SEP}")
    assert accepts(vocab, request(WEATHER, response_format=fmt), f"{CLOSE}response{SEP}", section(PARIS))


def test_response_format_with_auto_tools_is_the_json_or_calls(vocab) -> None:
    """Under auto with tools, a response_format answer is EITHER its JSON OR a tools section, never an empty
    response (tests/grammar_walks.py ANSWER)."""
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    req = request(WEATHER, response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}})
    assert accepts(vocab, req, f'{{"n": 1}}{CLOSE}response{SEP}', END)
    assert not accepts(vocab, req, f"{CLOSE}response{SEP}", END)
    assert not accepts(vocab, req, f'{{"n": 1}}{CLOSE}response{SEP}', section(PARIS), END)
    opened = f"{CLOSE}think{SEP}{OPEN}response{SEP}"
    assert accepts(vocab, req, f'hm{opened}{{"n": 1}}{CLOSE}response{SEP}', END, channel="think")
    assert accepts(vocab, req, f"hm{CLOSE}think{SEP}", section(PARIS), END, channel="think")
    assert accepts(vocab, req, f"hm{opened}{CLOSE}response{SEP}", section(PARIS), END, channel="think")
    assert not accepts(vocab, req, f"hm{opened}{CLOSE}response{SEP}", END, channel="think")


def test_grammar_uses_integer_token_ids_only(vocab) -> None:
    """Markers are token ids; a spelling appears only in the exclusion lists of text regions."""
    text = build_grammar(request(WEATHER, tool_choice="required"), "think", vocab[2]).text
    tokens = re.findall(r'"token": ([^,}]+)', text)
    assert tokens and all(t.strip().isdigit() for t in tokens)
    assert json.loads(text)["type"] == "structural_tag"
    outside_exclusions = re.sub(r"excludes=\(.*?\)\)", "", text)
    assert "excludes=" in text and not any(s in outside_exclusions for s in (OPEN, CLOSE, SEP, END_OF_MSG))


def test_nested_any_of_is_looked_into_once_per_level(monkeypatch) -> None:
    """Each `anyOf` branch was looked into twice, so a chain of nested `anyOf` cost 2^depth (18 levels: 0.7 s)."""
    from gateway.families.kimi.argument_types import SchemaDocument

    node: dict[str, Any] = {"type": "string"}
    for _ in range(12):
        node = {"anyOf": [node]}
    calls = []
    looked_into = SchemaDocument._alternatives
    monkeypatch.setattr(SchemaDocument, "_alternatives", lambda self, *a: calls.append(1) or looked_into(self, *a))
    alternatives = SchemaDocument({"type": "object", "properties": {"a": node}}).alternatives(node)
    assert [a.xtml_type for a in alternatives] == ["string"] and len(calls) == 13  # 2^13 - 1 before


def test_many_alternatives_of_one_type_make_one_flat_any_of(vocab) -> None:
    """300 object branches nested 300 `anyOf`s deep, one per branch: a RecursionError (a 503 from the compile
    child, a 500 without one)."""
    branches = [{"type": "object", "properties": {f"x{i}": {"type": "string"}}} for i in range(300)]
    grammar = build_grammar(request(tool("f", {"type": "object", "properties": {"a": {"anyOf": branches}}})), "think",
                            vocab[2])  # fmt: skip
    assert grammar is not None and "x299" in grammar.text


def test_references_that_fan_out_are_looked_into_at_most_max_steps_times(monkeypatch) -> None:
    """Each level's `$ref` used twice doubled the paths looked into (20 levels: 75 s); past MAX_STEPS the argument
    is ambiguous (free), as one naming no type."""
    from gateway.families.kimi import argument_types

    defs: dict[str, Any] = {"d30": {"type": "string"}}
    for i in range(30):
        defs[f"d{i}"] = {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}]}]}
    monkeypatch.setattr(argument_types, "MAX_STEPS", 1000)
    document = argument_types.SchemaDocument({"type": "object", "$defs": defs})
    assert document.alternatives({"$ref": "#/$defs/d0"}) is None
    assert document.alternatives({"$ref": "#/$defs/d29"}) is None  # the document's steps are spent


def parameters_tool(count: int, schema: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """One tool of `count` required parameters of `schema` (each with its own description)."""
    props = {f"p{j}": {**schema, "description": f"parameter {j}"} for j in range(count)}
    return tool("many", {"type": "object", "properties": props, "required": list(props), **extra})


def test_each_argument_adds_a_reference_not_a_copy_of_its_value_grammar(vocab) -> None:
    """1,000 integer arguments: ~2 KB of grammar each before (each its own copy of the JSON rules)."""

    def size(count: int) -> int:
        return len(build_grammar(request(parameters_tool(count, {"type": "integer"})), "response", vocab[2]).text)

    assert (size(1000) - size(10)) / 990 < 150


def test_a_deep_definition_is_written_once_for_all_its_arguments(vocab) -> None:
    """200 arguments of one 40-level `$defs` chain (2 MB before: the chain's rules in each), compiled."""
    defs = {"d40": {"type": "integer"}} | {
        f"d{i}": {"type": "object", "properties": {"v": {"type": "integer"}, "next": {"$ref": f"#/$defs/d{i + 1}"}}}
        for i in range(40)
    }
    grammar = build_grammar(request(parameters_tool(200, {"$ref": "#/$defs/d0"}, **{"$defs": defs})), "think", vocab[2])
    assert len(grammar.text) < 60_000
    vocab[1].compile_structural_tag(grammar.text)


UNION_SIBLINGS = [
    {"anyOf": [{"type": "integer"}, {"type": "null"}], "minimum": 5},
    {"anyOf": [{"type": "string"}, {"type": "null"}], "minLength": 2},
    {"anyOf": [{"type": "integer"}, {"type": "string", "minLength": 2}], "minimum": 5},
    {"anyOf": [{"$ref": "#/$defs/Word"}, {"type": "integer"}], "minLength": 3, "maximum": 4},
    EITHER,
    CONTACT,
    TYPED,
]
XTML_OF = {str: "string", bool: "boolean", type(None): "null", int: "number", float: "number", list: "array"}


@pytest.mark.parametrize("schema", UNION_SIBLINGS)
def test_union_sibling_values_are_taken_iff_their_read_back_validates(vocab, schema: dict) -> None:
    """Seeded values near the schema, written as K3 writes them and read back as the parser does (raw strings,
    typed_value): the grammar takes one iff jsonschema validates it (before the fold, each schema here had some
    taken wrongly: the union read alone, or the argument left free)."""
    encoder, compiler, ids, eos = vocab
    params = {"type": "object", "properties": {"x": schema}, "required": ["x"], "$defs": {"Word": {"type": "string"}}}
    grammar = build_grammar(request(tool("f", params, strict=True)), "response", ids, False)
    compiled = compiler.compile_structural_tag(grammar.text)
    validator = jsonschema.Draft202012Validator(params)
    names: list[str] = []
    values: list[Any] = []
    atoms(schema, names, values)
    rng = random.Random(17)
    drawn = {json.dumps(v) for v in (sample(rng, names, values) for _ in range(120)) if v != ""}  # required: non-empty
    wrong = []
    for text in drawn:
        value = json.loads(text)
        kind = XTML_OF.get(type(value), "object")
        body = value if kind == "string" else json.dumps(value, separators=(", ", ": "))
        matcher = xg.GrammarMatcher(compiled)
        output = ids_of(encoder, f"{CLOSE}response{SEP}", section(call("f", arg("x", kind, body))))
        taken = all(matcher.accept_token(t) for t in output) and matcher.accept_token(eos)
        back = body if kind == "string" else typed_value(body)
        if taken != validator.is_valid({"x": back}):
            wrong.append(body)
    assert not wrong, wrong
