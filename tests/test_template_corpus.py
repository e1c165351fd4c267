"""The gateway's chat-template rendering against held-out real templates (`tests/data/chat_templates/`, each citing
its source in `chat_templates.json`; with the gateway families' own templates and the embedded model's): every render
of the matrix in `tests/template_corpus.py` equals transformers' own, or both raise, but for the differences the
index's `ours` names with their why (a null content given as "", as vLLM gives it, where transformers leaves it out
and the template raises; `tools: []` rendered as no tools): there the render must equal transformers' of that shape.

The shield, as tests/shield_fuzz.py checks it for the families: client strings spelling each of the template's
control tokens (and ending with half of one) encode to their neutral twin's control-token ids. And Jinja semantics
probed against transformers' environment.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from backends.checkpoint import embedded_gguf_path, load_checkpoint
from backends.tiktoken_bpe import tokenizer_from_ranks
from gateway.prompts import template as gateway_template
from gateway.prompts.encoding import PromptEncoder
from gateway.prompts.shield import Shielder
from gateway.types import ChatRequest
from tests import template_corpus as tc

FAMILY_TEMPLATES = sorted(Path(__file__).parent.parent.glob("gateway/families/*/chat_template.jinja"))


def _entries() -> list[dict[str, Any]]:
    own = [{"id": f"gateway {p.parent.name}", "template": p.read_text(encoding="utf-8")} for p in FAMILY_TEMPLATES]
    return [*tc.corpus()["templates"], *own, {"id": "embedded SmolLM2", "template": None}]


ENTRIES = _entries()


def _source(entry: dict[str, Any]) -> str:
    return _embedded_template() if entry["template"] is None else entry["template"]


@cache
def _embedded_template() -> str:
    """The embedded model's template, read from its GGUF."""
    return load_checkpoint(str(embedded_gguf_path())).chat_template


@pytest.fixture(scope="module", autouse=True)
def frozen_clock() -> Iterator[None]:
    """Both renderers' `strftime_now` read the same instant."""
    from transformers.utils import chat_template_utils

    with (
        mock.patch.object(chat_template_utils, "datetime", tc.FrozenClock),
        mock.patch.object(gateway_template, "datetime", tc.FrozenClock),
    ):
        yield


def test_the_corpus_cites_its_sources_and_is_deduplicated() -> None:
    templates = tc.corpus()["templates"]
    assert len(templates) >= 40
    assert all(t["source"] and t["template"].strip() for t in templates)
    assert len({t["template"].strip() for t in templates}) == len(templates)
    assert len({t["id"] for t in templates}) == len(templates)


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["id"] for e in ENTRIES])
def test_renders_as_transformers(entry: dict[str, Any]) -> None:
    source = _source(entry)
    specials = tc.special_tokens()
    justified = tc.corpus()["ours"]
    differing = []
    for render in tc.renders(source):
        ours = tc.outcome(tc.ours, source, render, specials)
        theirs = tc.outcome(tc.transformers_render, source, render, specials)
        if ours != theirs and "empty_tools_as_none" in justified and tc.declares_empty_tools(render):
            theirs = tc.outcome(tc.transformers_render, source, replace(render, empty_tools_as_none=True), specials)
        if ours != theirs and theirs is None and "null_content_as_text" in justified and tc.holds_null_content(render):
            theirs = tc.outcome(tc.transformers_render, source, replace(render, null_content_as_text=True), specials)
        if ours != theirs:
            differing.append((render.name, ours, theirs))
    assert not differing, differing[0]


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["id"] for e in ENTRIES])
def test_client_spellings_never_become_control_tokens(entry: dict[str, Any]) -> None:
    """Encoded by the gateway's encoder on a byte vocabulary with the template's control tokens added, a laced
    conversation holds the control-token ids of its neutral twin, and decodes to its render, markers spelled back."""
    source = _source(entry)
    bos, eos = tc.corpus()["bos_token"], tc.corpus()["eos_token"]
    tokens = sorted({*entry.get("control_tokens", ()), bos, eos})
    specials = {256 + i: token for i, token in enumerate(tokens)}
    tokenizer = tokenizer_from_ranks({bytes([b]): b for b in range(256)}, specials, r"\s+|\S+")
    encoder, shielder = PromptEncoder(tokenizer), Shielder(tokens)
    cases, twins = tc.laced_conversations(tokens), tc.laced_conversations(tokens, neutral="N")
    for name, laced in cases.items():
        request = ChatRequest(messages=laced.messages, tools=laced.tools, template_kwargs=laced.kwargs)
        shielded, shield = shielder.shield(request)
        case = tc.outcome(_render, source, shielded.messages, shielded.tools, shielded.template_kwargs, bos, eos)
        twin = tc.outcome(_render, source, twins[name].messages, twins[name].tools, twins[name].kwargs, bos, eos)
        assert (case is None) == (twin is None), name
        if twin is not None:
            ids, twin_ids = encoder.encode_prompt(case, shield), encoder.encode_prompt(twin)
            assert _controls(ids) == _controls(twin_ids), (name, _controls(ids) - _controls(twin_ids))
            assert tokenizer.decode(ids, skip_special_tokens=False) == shield.restore(case)


def _controls(ids: list[int]) -> Counter[int]:
    return Counter(i for i in ids if i >= 256)


def _render(source: str, messages: list[dict], tools: list[dict], kwargs: dict, bos: str, eos: str) -> str:
    specials = {"bos_token": bos, "eos_token": eos}
    return gateway_template.render_chat_template(
        source, messages, tools=tools, special_tokens=specials, template_kwargs=kwargs
    )


JINJA_PROBES = [
    "{% set ns = namespace(_x=1) %}{{ ns._x }}",
    "{% set ns = namespace(a=1) %}{% set ns._b = 2 %}{{ ns.a }}",
    "{% set ns = namespace(a=1) %}{% for m in messages %}{% set ns.a = ns.a + 1 %}{% endfor %}{{ ns.a }}",
    "{{ dict.fromkeys(['a', 'b'], 1) | tojson }} {{ dict(a=1, b=2) | tojson }} {{ dict(x) | tojson }}",
    "{% for m in messages %}{% generation %}{% break %}{% endgeneration %}{% endfor %}",
    "{% for m in messages %}{% generation %}{% set y = m.role %}{{ y }}{% endgeneration %}{{ y }}{% endfor %}",
    (
        "{% set ns = namespace(n=0) %}{% for m in messages %}{% generation %}{{ loop.index }}{{ m.role }}"
        "{% set ns.n = ns.n + 1 %}{% endgeneration %}{% endfor %}{{ ns.n }}"
    ),
    "{% for m in messages %}{% if loop.first %}{% continue %}{% endif %}{{ m.role }}{% break %}{% endfor %}",
    (
        "{% for m in messages %}{{ loop.previtem }}|{{ loop.nextitem }}|{{ loop.cycle('a', 'b') }}|{{ loop.depth }}"
        "|{{ loop.revindex0 }}|{{ loop.length }}{% endfor %}"
    ),
    "{{ x | tojson(indent=2, ensure_ascii=True) }} {{ x | tojson(separators=(',', ':'), sort_keys=true) }}",
    "{{ [1.0, 1e20, 0.1, true, none] | tojson }} {{ 'é\u2028<>&' | tojson }} {{ (1, 2) | tojson }}",
    "{{ x | items | list }} {{ x | dictsort }} {{ x.keys() | list }} {{ x.get('k', 'd') }} {{ x.get('no', 'd') }}",
    (
        "{{ messages | map(attribute='content') | join(',') }} {{ messages | selectattr('role', 'equalto', 'user') "
        "| list | length }} {{ messages | rejectattr('content') | list }} {{ messages | map('tojson') | list }}"
    ),
    (
        "{{ 'a b' | title }} {{ 'x' is string }} {{ 1 is number }} {{ none is none }} {{ x is mapping }} "
        "{{ [] is iterable }} {{ x is sameas x }} {{ 1 is integer }} {{ 1.5 is float }} {{ true is boolean }}"
    ),
    "{{ raise_exception('boom') }}",
    "{{ strftime_now('%d %b %Y %H:%M') }}",
    "  {%- if true -%}  x  {%- endif -%}  \n  {% if true %}\n  y\n  {% endif %}\n  {%+ if true %}z{% endif %}\n",
    "{% raw %}{{ x }}{% endraw %}{# comment #}\n{{ 'a' }}",
    (
        "{{ 'abc'[::-1] }} {{ 'a,b'.split(',') }} {{ '  x '.strip() }} {{ 'x'.startswith('x') }} {{ 'X'.lower() }} "
        "{{ 'ab'.replace('a', 'c') }} {{ 'a b'.split() }} {{ 'abc'.rstrip('c') }} {{ 'a'.upper() }} {{ 'ab'.endswith('b') }}"
    ),
    "{% set l = [1, 2] %}{{ l.append(3) }}",
    "{% set d = {} %}{{ d.update({'a': 1}) }}",
    "{{ dict.update(x, {'k': 1}) }}{{ x }}",
    "{{ dict.pop(x, 'k') }}{{ x }}",
    "{{ x.__class__.__name__ }}",
    "{{ '%s-%d' % ('a', 1) }} {{ '{}'.format(1) }} {{ x | string }} {{ 3 // 2 }} {{ 3 / 2 }} {{ 2 ** 10 }} {{ 7 % 3 }}",
    (
        "{{ [3, 1, 2] | sort | list }} {{ [1, 2, 2] | unique | list }} {{ [1, 2] | sum }} {{ [1, 2] | max }} "
        "{{ ['a', 'b'] | reverse | list }} {{ messages | sort(attribute='role') | map(attribute='role') | list }}"
    ),
    "{{ 'x' | truncate(1) }}",
    "{{ 'abc def' | wordcount }} {{ ' a ' | trim }} {{ 'a' | center(5) }} {{ 'a\nb' | indent(2) }} {{ '<b>' | e }}",
    "{%- macro f(a, b=2) -%}{{ a }}{{ b }}{{ varargs }}{{ kwargs }}{%- endmacro -%}{{ f(1, 3, 4, c=5) }}",
    "{{ messages[-1]['content'] | default('d') }} {{ nothing | default('u') }} {{ nothing is defined }}",
    "{{ nothing.attr }}",
    "{{ nothing + 'a' }}",
    "{{ x['k'] ~ 1 }} {{ none ~ 1 }} {{ x.k }} {{ x['no'] }}|{{ x.no }}",
    "{% filter upper %}abc{% endfilter %}{% with a = 1 %}{{ a }}{% endwith %}",
    "{% for k, v in x.items() %}{{ k }}={{ v }};{% endfor %}{% for i in range(5) if i % 2 %}{{ i }}{% else %}-{% endfor %}",
    (
        "{{ x | batch(1) | list }} {{ 'abc' | list }} {{ x | length }} {{ 12.5 | round }} {{ 12.5 | int }} "
        "{{ '3' | float }} {{ -1 | abs }} {{ x | first }} {{ 'a' * 3 }} {{ [1] + [2] }}"
    ),
    "{% set x = 'shadow' %}{{ x }}",
    "{{ messages[0].items() | list }} {{ messages[0].content.title() }} {{ messages | tojson(indent=1) }}",
]
"""Jinja semantics probed against transformers' own environment (its filters, tests, globals, loop controls,
whitespace control, `generation` block, namespace and tojson options)."""


@pytest.mark.parametrize("source", JINJA_PROBES)
def test_jinja_semantics_as_transformers(source: str) -> None:
    from transformers.utils.chat_template_utils import _compile_jinja_template

    context = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
    context["x"] = {"k": "v", "a": [1, "é"]}
    ours = tc.outcome(lambda: gateway_template.render_chat_template(source, **_named(context)))
    theirs = tc.outcome(lambda: _compile_jinja_template(source).render(**context, add_generation_prompt=True))
    assert ours == theirs


def _named(context: dict[str, Any]) -> dict[str, Any]:
    return {"messages": context["messages"], "template_kwargs": {"x": context["x"]}}
