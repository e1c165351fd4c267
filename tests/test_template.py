"""Sandboxed chat-template rendering: HF semantics, helpers, errors and bounds."""

from __future__ import annotations

import copy
import re
from functools import cache
from unittest import mock

import pytest

from backends.checkpoint import load_checkpoint
from gateway.prompts.template import (
    TemplateError,
    compile_template,
    render_chat_template,
    renders_purely,
    template_variables,
)
from tests.template_corpus import TEMPLATES_DIR

smollm2 = cache(load_checkpoint)


def render(source: str, messages: list | None = None, **kwargs) -> str:
    return render_chat_template(source, messages or [], **kwargs)


def test_smollm2_template_renders_like_transformers() -> None:
    source = smollm2().chat_template
    prompt = render(source, [{"role": "user", "content": "Hi"}])
    assert prompt == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_trim_and_lstrip_blocks_as_hf() -> None:
    source = "{% for m in messages %}\n    {% if m.role == 'user' %}\n[{{ m.content }}]\n    {% endif %}\n{% endfor %}"
    assert render(source, [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]) == "[a]\n[b]\n"


def test_tojson_keeps_unicode_and_markup_and_takes_hf_options() -> None:
    value = {"b": "café <tag> & 'q'", "a": [1, 2]}
    assert render("{{ v | tojson }}", template_kwargs={"v": value}) == '{"b": "café <tag> & \'q\'", "a": [1, 2]}'
    assert render("{{ v | tojson(sort_keys=true, separators=(',', ':')) }}", template_kwargs={"v": value}) == (
        '{"a":[1,2],"b":"café <tag> & \'q\'"}'
    )
    assert render("{{ v | tojson(indent=2) }}", template_kwargs={"v": {"a": 1}}) == '{\n  "a": 1\n}'


def test_raise_exception_becomes_template_error_with_its_message() -> None:
    with pytest.raises(TemplateError, match="^Conversation roles must alternate$"):
        render("{{ raise_exception('Conversation roles must alternate') }}")


def test_context_variables_and_helpers() -> None:
    source = (
        "{{ bos_token }}|{{ eos_token }}|{{ tools | length }}|{{ documents[0].title }}|"
        "{{ add_generation_prompt }}|{{ enable_thinking }}|{{ strftime_now('%Y') }}"
    )
    out = render(
        source,
        tools=[{"type": "function"}],
        documents=[{"title": "T"}],
        special_tokens={"bos_token": "<s>", "eos_token": "</s>"},
        add_generation_prompt=False,
        template_kwargs={"enable_thinking": False},
    )
    bos, eos, n_tools, title, agp, thinking, year = out.split("|")
    assert (bos, eos, n_tools, title, agp, thinking) == ("<s>", "</s>", "1", "T", "False", "False")
    assert re.fullmatch(r"20\d\d", year)


def test_no_tools_renders_as_none() -> None:
    assert render("{{ 'yes' if tools else 'no' }}", tools=[]) == "no"


def test_template_kwargs_cannot_override_named_arguments() -> None:
    out = render("{{ messages | length }}", [{"role": "user", "content": "x"}], template_kwargs={"messages": []})
    assert out == "1"


def test_loop_controls_and_generation_block() -> None:
    source = (
        "{% for m in messages %}{% if m.skip %}{% continue %}{% endif %}"
        "{% generation %}{{ m.content }}{% endgeneration %}{% if m.last %}{% break %}{% endif %}{% endfor %}"
    )
    messages = [{"content": "a"}, {"content": "b", "skip": True}, {"content": "c", "last": True}, {"content": "d"}]
    assert render(source, messages) == "ac"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("{% for x in %}", "syntax error at line 1"),
        ("{{ messages.append(1) }}", "chat template error"),
        ("{{ ''.__class__.__mro__ }}", "chat template error"),
        ("{{ 1 / 0 }}", "ZeroDivisionError"),
        ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "chat template error"),
        ("{% for m in messages %}{% macro f() %}{% break %}{% endmacro %}{% endfor %}", "syntax error"),
        ("{% if true %}" * 1000 + "x" + "{% endif %}" * 1000, "nested too deeply"),
        ("{{ " + "(" * 300 + "1" + ")" * 300 + " }}", "nested too deeply"),
    ],
)
def test_bad_templates_raise_template_error(source: str, message: str) -> None:
    with pytest.raises(TemplateError, match=re.escape(message)):
        render(source)


def test_output_size_is_capped() -> None:
    with pytest.raises(TemplateError, match="exceeds 1000 characters"):
        render("{% for i in range(100000) %}xxxxxxxxxx{% endfor %}", max_chars=1000)


def test_compiled_templates_are_cached_by_source() -> None:
    assert compile_template("{{ 1 }}") is compile_template("{{ 1 }}")


def test_template_variables_of_a_template_nested_too_deeply_is_a_template_error() -> None:
    with pytest.raises(TemplateError, match="nested too deeply"):
        template_variables("{% if true %}" * 1000 + "{% endif %}" * 1000)


def test_template_variables_lists_what_the_template_reads() -> None:
    assert "tools" in template_variables("{% if tools %}{{ tools | tojson }}{% endif %}")
    assert "tools" not in template_variables(smollm2().chat_template)


def test_continue_final_message_ends_after_its_content() -> None:
    source = smollm2().chat_template
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello, I am"}]
    prompt = render(source, messages, add_generation_prompt=False, continue_final_message=True)
    assert prompt.endswith("<|im_start|>assistant\nHello, I am")
    with pytest.raises(TemplateError, match="cannot both be set"):
        render(source, messages, continue_final_message=True)


@pytest.mark.parametrize("content", ["m", "<", "im_end", "Say hi", "Say hi  "])
def test_continue_final_message_cuts_where_the_content_ends(content: str) -> None:
    """Not at the content's last occurrence, which may lie in the template's own text after the message (a content
    "m" was cut inside `<|im_end|>`, leaving `<|im` in the prompt), or in an earlier message."""
    messages = [{"role": "user", "content": "Say hi"}, {"role": "assistant", "content": content}]
    prompt = render(smollm2().chat_template, messages, add_generation_prompt=False, continue_final_message=True)
    assert prompt.endswith("<|im_start|>assistant\n" + content)


def test_continue_final_message_of_an_empty_content_ends_after_the_assistants_header() -> None:
    """As transformers: an empty final message is continued from its start (it was refused)."""
    messages = [{"role": "user", "content": "Say hi"}, {"role": "assistant", "content": ""}]
    prompt = render(smollm2().chat_template, messages, add_generation_prompt=False, continue_final_message=True)
    assert prompt.endswith("<|im_start|>user\nSay hi<|im_end|>\n<|im_start|>assistant\n")


def test_continue_final_message_keeps_trailing_whitespace_the_template_keeps() -> None:
    """As transformers: the content's trailing whitespace stays where the template writes it as given, and goes
    where the template trims the content."""
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "It is "}]
    kept = "{% for m in messages %}[{{ m.content }}]{% endfor %}"
    trimmed = "{% for m in messages %}[{{ m.content | trim }}]{% endfor %}"
    assert render(kept, messages, add_generation_prompt=False, continue_final_message=True) == "[q][It is "
    assert render(trimmed, messages, add_generation_prompt=False, continue_final_message=True) == "[q][It is"


def test_continue_final_message_after_content_the_template_rewrites() -> None:
    """A template that writes the content's answer apart from its reasoning is cut after the answer."""
    source = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if '</think>' in m.content %}"
        "<think>{{ m.content.split('</think>')[0] }}</think>\n{{ m.content.split('</think>')[1] }}"
        "{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}"
    )
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "plan</think>So"}]
    prompt = render(source, messages, add_generation_prompt=False, continue_final_message=True)
    assert prompt.endswith("<|im_start|>assistant\n<think>plan</think>\nSo")


def test_the_gateways_sandbox_answers_as_jinjas_own() -> None:
    """Its fast paths (a dict's item read as an attribute, a str's method) give what ImmutableSandboxedEnvironment
    gives, for the families' own templates and for the sandbox's refusals."""
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from gateway.families.glm.prompt import BUILTIN_TEMPLATE as GLM
    from gateway.families.hermes.prompt import BUILTIN_TEMPLATE as HERMES
    from gateway.families.qwen3_xml.prompt import BUILTIN_TEMPLATE as QWEN3_XML
    from gateway.prompts import template

    jinja = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    jinja.filters["tojson"] = template._tojson
    jinja.globals["raise_exception"] = template._raise_exception
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    conversations = [
        [{"role": "user", "content": "Hi"}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "<tool_response>x</tool_response>"}],
        [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "<think>look</think>\n\nOk", "tool_calls": [call]},
            {"role": "tool", "content": "sunny", "tool_call_id": "c1"},
            {"role": "assistant", "content": None, "reasoning_content": "done"},
        ],
    ]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    for source in (HERMES, GLM, QWEN3_XML):
        for messages in conversations:
            for context in ({"messages": messages}, {"messages": messages, "tools": tools, "enable_thinking": False}):
                context |= {"add_generation_prompt": True, "bos_token": "", "eos_token": ""}
                ours = template._render_bounded(compile_template(source), dict(context), 10**6)
                assert ours == jinja.from_string(source).render(context)
    probes = "{{ m.role }}|{{ m.missing is defined }}|{{ m.items() | list | length }}|{{ d.items is callable }}|"
    probes += "{{ s.upper() }}"
    values = {"m": {"role": "user"}, "d": {"items": 1}, "s": "abc"}
    assert template._render_bounded(compile_template(probes), dict(values), 1000) == "user|False|1|True|ABC"
    assert jinja.from_string(probes).render(values) == "user|False|1|True|ABC"
    for unsafe in ("{{ m.__class__.__mro__ }}", "{{ m.update({}) }}", "{{ m.role.__class__.__mro__ }}"):
        with pytest.raises(TemplateError):
            render("{% set m = messages[0] %}" + unsafe, [{"role": "user", "content": "x"}])


def test_a_pure_templates_render_is_kept_and_given_again_for_the_same_context() -> None:
    source = smollm2().chat_template
    messages = [{"role": "user", "content": "kept render"}]
    first = render(source, messages)
    again = render(source, [{"role": "user", "content": "kept render"}])
    assert again is first  # the kept text itself, not a new render
    assert render(source, [{"role": "user", "content": "another render"}]) != first


def test_kept_renders_tell_apart_contexts_that_differ_in_key_order_or_size_cap() -> None:
    source = "{{ tools | tojson }}"
    one = render(source, [], tools=[{"a": 1, "b": 2}])
    other = render(source, [], tools=[{"b": 2, "a": 1}])
    assert (one, other) == ('[{"a": 1, "b": 2}]', '[{"b": 2, "a": 1}]')
    assert render(source, [], tools=[{"a": 1.0, "b": True}]) == '[{"a": 1.0, "b": true}]'
    with pytest.raises(TemplateError, match="exceeds 10 characters"):
        render(source, [], tools=[{"a": 1, "b": 2}], max_chars=10)


READS_EVERY_ARGUMENT = (
    "{{ bos_token }}|{{ x }}|{{ tools | tojson }}|{{ documents | tojson }}|{{ add_generation_prompt }}|"
    "{% for m in messages %}{{ m.role }}:{{ m.thinking }}:{{ m.content }};{% endfor %}"
)
"""A template whose text shows every argument of a render (the continued message's end too)."""
KEPT_BASE = {
    "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yes "}],
    "tools": [{"type": "function", "function": {"name": "f"}}],
    "documents": [{"text": "d"}],
    "add_generation_prompt": False,
    "continue_final_message": True,
    "special_tokens": {"bos_token": "<s>"},
    "template_kwargs": {"x": 1},
    "max_chars": 1000,
}
ONE_ARGUMENT_CHANGED = {
    "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "no "}],
    "reasoning": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "yes ", "reasoning_content": "r"},
    ],
    "tools": [{"type": "function", "function": {"name": "g"}}],
    "documents": [{"text": "e"}],
    "continue_final_message": False,
    "add_generation_prompt": True,
    "special_tokens": {"bos_token": "<bos>"},
    "template_kwargs": {"x": 2},
    "max_chars": 60,
}


@pytest.mark.parametrize("changed", list(ONE_ARGUMENT_CHANGED))
def test_a_kept_render_is_given_only_for_the_same_arguments(changed: str) -> None:
    """Each argument of a render changed alone after a render with all of them was kept: the render is a fresh
    render's, never the kept one (a key that left an argument out would give the kept text back)."""
    from gateway.prompts import template

    argument = "messages" if changed == "reasoning" else changed
    others = {**KEPT_BASE, argument: ONE_ARGUMENT_CHANGED[changed]}
    if changed == "add_generation_prompt":
        others["continue_final_message"] = False  # the two cannot both be set
    with mock.patch.object(template, "_RENDERS", template._Renders()):
        kept = render(READS_EVERY_ARGUMENT, **KEPT_BASE)
        assert render(READS_EVERY_ARGUMENT, **copy.deepcopy(KEPT_BASE)) is kept
        try:
            again = render(READS_EVERY_ARGUMENT, **others)
        except TemplateError as e:  # the smaller size cap
            again = str(e)
    with mock.patch.object(template, "_RENDERS", template._Renders(entries=0)):
        try:
            fresh = render(READS_EVERY_ARGUMENT, **others)
        except TemplateError as e:
            fresh = str(e)
    assert again == fresh != kept


@pytest.mark.parametrize(
    "source",
    [
        "{{ strftime_now('%H:%M:%S.%f') }}",
        "{{ [1, 2, 3] | random }}",
        "{{ [[1, 2]] | map('random') | list }}",
        "{{ lipsum(1) }}",
    ],
)
def test_a_template_that_reads_the_clock_or_chance_is_rendered_afresh(source: str) -> None:
    from gateway.prompts import template

    assert not renders_purely(source)
    assert template._RENDERS.find(source, ([],), 1000) == (None, None)
    assert template._RENDERS.find("{{ messages }}", ([],), 1000)[0] is not None
    render(source)  # renders (nothing kept)


def test_the_families_templates_render_purely() -> None:
    from gateway.families.hermes.prompt import BUILTIN_TEMPLATE as HERMES

    assert renders_purely(HERMES) and renders_purely(smollm2().chat_template)


CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {}}}


def test_null_values_are_left_out_as_transformers_does() -> None:
    """An assistant's `content: null` beside its calls: transformers 5 leaves the key out, so a template that writes
    the content writes nothing (GLM-5.1's wrote `None`), and one that iterates it skips it (Qwen2.5-VL's raised)."""
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": None, "tool_calls": [CALL]}]
    assert render("{% for m in messages %}[{{ m.content }}]{% endfor %}", messages) == "[q][]"
    iterating = "{% for m in messages %}{% if m.content is string %}{{ m.content }}{% else %}{% for p in m.content %}"
    iterating += "{{ p.text }}{% endfor %}{% endif %}|{% endfor %}"
    assert render(iterating.replace("is string", "is string or m.content is not defined"), messages) == "q||"


def test_a_template_that_reads_every_content_gets_a_null_one_as_vllm_gives_it() -> None:
    """DeepSeek's templates write `'<｜Assistant｜>' + message['content']` unless `message['content'] is none`, Qwen3's
    split it: with the key left out (transformers) that raises, so the render is made again with the null content
    given as "" (as vLLM gives it). An error that is not about the content still raises."""
    source = (
        "{% for m in messages %}{% if m.role == 'assistant' %}{% if m['content'] is none %}<none>"
        "{% else %}{{ '<A>' + m['content'] + '<calls>' }}{% endif %}{% else %}{{ m['content'] }}{% endif %}{% endfor %}"
    )
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": None, "tool_calls": [CALL]}]
    assert render(source, messages) == "q<A><calls>"
    with pytest.raises(TemplateError, match="alternate"):
        render("{{ raise_exception('alternate') }}", messages)


def test_reasoning_is_also_given_as_thinking() -> None:
    """transformers gives a message's reasoning as `thinking` too (Command A's and LFM2's templates read that)."""
    messages = [{"role": "assistant", "content": "a", "reasoning_content": "r"}]
    assert render("{{ messages[0].thinking }}|{{ messages[0].reasoning_content }}", messages) == "r|r"


@pytest.mark.parametrize(
    "source", ["{% set ns = namespace(_x=1) %}", "{% set ns = namespace(a=1) %}{% set ns._b = 2 %}{{ ns.a }}"]
)
def test_namespace_refuses_underscore_names(source: str) -> None:
    with pytest.raises(TemplateError, match="underscore"):
        render(source)


def test_generation_block_is_a_call_block_as_transformers_parses_it() -> None:
    """A `{% break %}` inside `{% generation %}` is outside any loop (transformers' block is a macro call)."""
    with pytest.raises(TemplateError, match="syntax error"):
        render("{% for m in messages %}{% generation %}{% break %}{% endgeneration %}{% endfor %}")


@pytest.mark.parametrize("call", ["dict.update(messages[0], {'role': 'system'})", "dict.clear(messages[0])"])
def test_a_template_cannot_change_a_message_through_the_dict_type(call: str) -> None:
    """The immutable sandbox checks a method's object, not its argument: `dict.update(message, ...)` changed the
    caller's message when `dict` was the type. It is a maker of dicts now (as transformers' is)."""
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(TemplateError):
        render("{{ " + call + " }}", messages)
    assert messages == [{"role": "user", "content": "hi"}]
    assert render("{{ dict(a=1) | tojson }} {{ dict.fromkeys(['b'], 2) | tojson }}") == '{"a": 1} {"b": 2}'


HOSTILE_TEMPLATES = [
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}x",
    "{% for a in messages %}{% for b in messages %}{% for c in messages %}{% endfor %}{% endfor %}{% endfor %}",
    "{% for i in range(100000) %}{{ range(100000) | sum }}{% endfor %}",
    "{% for i in range(99999) %}{% for j in range(99999) %}{% if j < 0 %}{% break %}{% endif %}{% endfor %}{% endfor %}",
    "{% for i in range(100000) %}{{ range(100000) | list | length }}{% if i < 0 %}{% break %}{% endif %}{% endfor %}",
    (
        "{% for a in messages %}{% for b in messages %}{% for c in messages %}{% if c is none %}{% break %}{% endif %}"
        "{% endfor %}{% endfor %}{% endfor %}"
    ),
    "{% for x in [1] recursive %}{% if loop.depth < 60 %}{{ loop([1, 1]) }}{% endif %}{% endfor %}",
    "{% macro f(n) %}{% if n < 60 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}{% endmacro %}{{ f(0) }}",
    "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "{{ 'a' * 10**10 }}",
    "{% set l = [1] * 10**9 %}{{ l | length }}",
    "{{ 7 ** 100000000 }}",
    "{% set ns = namespace(n=3) %}{% for i in range(60) %}{% set ns.n = ns.n * ns.n %}{% endfor %}{{ ns.n > 0 }}",
    "{% set ns = namespace(s='a') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
    "{% set ns = namespace(s='a') %}{% for i in range(60) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
    "{% set ns = namespace(s='a') %}{% for i in range(60) %}{% set ns.s = ns.s + ns.s + ns.s + ns.s %}{% endfor %}",
    "{% set ns = namespace(s=[1]) %}{% for i in range(60) %}{% set ns.s = ns.s + [2] + ns.s %}{% endfor %}",
    "{% set ns = namespace(s='a') %}{% for i in range(60) %}{% set ns.s = [ns.s, ns.s] | join %}{% endfor %}",
    "{% set ns = namespace(s='a') %}{% for i in range(60) %}{% set ns.s = ns.s.join([ns.s, ns.s]) %}{% endfor %}",
    "{% set s = 'a' * 1000 %}{{ s.replace('a', s) | length }}",
    "{% set s = 'a' * 1000 %}{{ s | replace('a', s) | length }}",
    "{{ '%0999999999d' % 1 }}",
    "{{ '%*d' % (10**9, 1) }}",
    "{{ '{:>999999999}'.format(1) }}",
    "{{ '{:{w}}'.format(1, w=10**9) }}",
    "{{ 'x' | center(10**10) }}",
    "{{ 'a'.ljust(10**10) }}",
    "{{ ('\\t' * 100).expandtabs(10**7) }}",
    "{{ ('a\\n' * 1000) | indent(100000) | length }}",
    "{{ [1] | batch(10**9, 'x') | list | length }}",
    "{{ [1] | slice(10**8) | list | length }}",
    "{{ messages | tojson(indent=10**9) }}",
    "{{ '%s' | format('a' * 10**9) }}",
    "{{ lipsum(10**6) }}",
    "{% set ns = namespace(s='\"') %}{% for i in range(60) %}{% set ns.s = ns.s | tojson %}{% endfor %}{{ ns.s|length }}",
    "{% set ns = namespace(s='a') %}{% for i in range(60) %}{% set ns.s = [ns.s, ns.s] | string %}{% endfor %}",
    "{% set ns = namespace(s='a') %}{% for i in range(60) %}{% set ns.s = '{}{}'.format(ns.s, ns.s) %}{% endfor %}",
    "{% set ns = namespace(s='a') %}{% for i in range(60) %}{% set ns.s = '%s%s' % (ns.s, ns.s) %}{% endfor %}",
    "{% set l = ['a' * 60000] * 1000 %}{{ l | string | length }}",
    "{% set l = ['a' * 60000] * 1000 %}{{ l | tojson | length }}",
    "{% set l = [['a' * 60000] * 1000] %}{{ l | upper | length }}",
]
"""Templates that loop for ever, recurse without end or build a value far past the prompt's size: each must stop
with a TemplateError (within the render's step budget and size limit, not after it took the CPU or the memory)."""


@pytest.mark.parametrize("source", HOSTILE_TEMPLATES)
def test_a_hostile_template_stops_with_a_template_error(source: str) -> None:
    from gateway.prompts.template_bounds import render_budget

    messages = [{"role": "user", "content": "hi"}] * 100
    bounded = "exceeded its limit of 200,000 steps|would make|past its limit|recursion too deep"
    with render_budget(steps=200_000, chars=10_000), pytest.raises(TemplateError, match=bounded):
        render(source, messages=messages, max_chars=10_000)


def test_a_finite_render_past_the_step_limit_is_refused_naming_the_limit_and_the_conversation() -> None:
    """A template whose work grows as the square of the messages (Gemma 4's does) ends, but past the step limit on a
    long conversation: the refusal says the limit and how long the conversation was, not "a loop without end"."""
    from gateway.prompts.template_bounds import render_budget

    quadratic = "{% for m in messages %}{% for n in messages %}.{% endfor %}{% endfor %}"
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    with render_budget(steps=5_000, chars=10_000), pytest.raises(TemplateError) as refused:
        render(quadratic, [{"role": "user", "content": "hi"}] * 100, tools=tools, max_chars=20_000)
    assert str(refused.value) == (
        "chat template error: the template's work for this conversation (100 messages, 1 tool) exceeded its limit "
        "of 5,000 steps"
    )


GEMMA4_SCAN = (
    "{% for m in messages %}{% set ns = namespace(found=false) %}"
    "{% for j in range(loop.index0 + 1, messages | length) %}{% if not ns.found %}"
    "{% if messages[j].role != 'tool' %}{% set ns.found = true %}{{ j }}{% endif %}{% endif %}{% endfor %}"
    ".{% endfor %}"
)
"""Gemma 4's forward scan: for every message, the later ones up to the next that is no tool result (the gateway
stops the loop there, prompts/loop_exit.py); n²/2 items as written, about 2n as it runs."""


@pytest.mark.parametrize(
    "source",
    [
        GEMMA4_SCAN,
        "{% for m in messages %}{% for j in range(loop.index0, 100000) %}{{ j }}{% break %}{% endfor %}{% endfor %}",
        (
            "{% for m in messages %}{% for n in messages %}{% if n is mapping %}{% break %}{% endif %}{% endfor %}"
            ".{% endfor %}"
        ),
        "{% for m in messages %}{% for c in m.content * 1000 %}{{ c }}{% break %}{% endfor %}{% endfor %}",
    ],
)
def test_a_loop_that_ends_early_is_charged_the_items_it_ran(source: str) -> None:
    """A loop with a `break` of its own is charged an item as it takes it, a loop's `range(...)` only so: 200
    messages each scanning a few items render within 5,000 steps (charged whole, the inner loops took 20,000+)."""
    from gateway.prompts.template_bounds import render_budget

    with render_budget(steps=5_000, chars=100_000):
        assert render(source, [{"role": "user", "content": "hi"}] * 200, max_chars=100_000)


def test_gemma4_on_a_long_chat_is_charged_its_scans_as_they_run() -> None:
    """Gemma 4's template on 300 messages: about 11,000 steps as it runs (101,000 with each scan's range charged
    whole: 5,000 messages came to 25,000,000, past the render's limit, in a third of a CPU-second)."""
    from gateway.prompts.template_bounds import render_budget

    source = (TEMPLATES_DIR / "google-gemma-4-31B-it.jinja").read_text(encoding="utf-8")
    messages = [{"role": ("user", "assistant")[i % 2], "content": f"message {i}"} for i in range(300)]
    with render_budget(steps=50_000, chars=1_000_000):
        prompt = render(source, messages, max_chars=1_000_000)
    assert prompt.count("message ") == 300


def test_a_loop_that_ends_early_keeps_its_length_and_its_range_stays_the_templates() -> None:
    """The count as it runs leaves `loop.length`, `loop.last` and `loop.revindex` as they were, and a `range` the
    template defined itself is called as written."""
    source = (
        "{% for i in range(5) %}{{ i }}{{ loop.length }}{{ loop.revindex }}{{ loop.last }}"
        "{% if i == 1 %}{% break %}{% endif %}{% endfor %}|"
        "{% for m in messages %}{{ loop.length }}{{ loop.last }}{% if loop.index == 2 %}{% break %}{% endif %}"
        "{% endfor %}|{% for k in {'a': 1, 'b': 2} %}{{ k }}{{ loop.length }}{% break %}{% endfor %}|"
        "{% macro range(n) %}ab{% endmacro %}{% for c in range(1) %}{{ c }}{% break %}{% endfor %}"
    )
    out = render(source, [{"role": "user", "content": "a"}] * 3)
    assert out == "055False154False|3False3False|a2|a"


def test_a_render_past_its_budget_is_not_rendered_again_for_a_null_content(monkeypatch) -> None:
    """A template that fails on a null content is rendered again with "" for it (as vLLM gives it); one that ran out
    of steps or CPU is not: the second render would cost as much again (10 s of CPU twice)."""
    from gateway.prompts import template as template_module
    from gateway.prompts.template_bounds import render_budget

    renders = []
    bounded = template_module._render_bounded
    monkeypatch.setattr(template_module, "_render_bounded", lambda *a: renders.append(1) or bounded(*a))
    quadratic = "{% for m in messages %}{% for n in messages %}{{ n.content }}{% endfor %}{% endfor %}"
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None}] * 50
    with render_budget(steps=5_000, chars=100_000), pytest.raises(TemplateError, match="exceeded its limit"):
        render(quadratic, messages, max_chars=100_000)
    assert len(renders) == 1


def test_the_bounds_leave_a_templates_semantics_alone() -> None:
    source = (
        "{% for m in messages %}{{ loop.index }}/{{ loop.length }}{{ m.content ~ '!' }}{% endfor %}"
        "{% for x in [] %}no{% else %}empty{% endfor %}{{ 'ab' * 2 }}{{ [1] * 2 }}{{ 2 ** 10 }}{{ '%3d' % 7 }}"
        "{{ '{:>4}'.format('x') }}{{ 'x' | center(5) }}{{ ['a', 'b'] | join('-') }}{{ 'aXa' | replace('X', 'yy') }}"
    )
    out = render(source, messages=[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    assert out == "1/2a!2/2b!emptyabab[1, 1]1024  7   x  x  a-bayya"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("{% for m in messages %}{{ '<' + m.role + ':' + m['content'] + '>' }}{% endfor %}", "<user:a><user:b>"),
        ("{{ [1] + [2] + [3] }}{{ 1 + 2 + 3.5 }}{{ (1, ) + (2, ) + (3, ) }}", "[1, 2, 3]6.5(1, 2, 3)"),
        ("{{ ('<' | escape) + '<' + '&' }}", "&lt;&lt;&amp;"),
        ("{% set x = 'a' %}{{ x + x + x | upper }}", "aaA"),
    ],
)
def test_a_chain_of_plus_adds_left_to_right_as_jinja_does(source: str, expected: str) -> None:
    assert render(source, messages=[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]) == expected


@pytest.mark.parametrize(
    ("source", "error"),
    [
        ("{{ 'a' + 1 + missing.x }}", "TypeError"),  # the first `+` fails before `missing.x` is read
        ("{{ 'a' + messages[0].role + 1 + messages[0].role }}", "TypeError"),
        ("{{ 'a' + 'b' + missing.x }}", "undefined"),
    ],
)
def test_a_chain_of_plus_raises_the_error_its_first_failing_step_does(source: str, error: str) -> None:
    with pytest.raises(TemplateError, match=error):
        render(source, messages=[{"role": "user", "content": "a"}])
