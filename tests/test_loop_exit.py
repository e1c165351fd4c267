"""Scans stopped once they have found what they look for (gateway/prompts/loop_exit.py): which loops the pass
rewrites and which it must leave alone, and that every render is the same with and without it: the detector's cases
over contexts chosen to reach their edges, and every template of the corpus (tests/template_corpus.py's matrix, and
long conversations: chats, agents' tool loops, parallel calls, reasoning) that the pass rewrites."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from jinja2 import nodes

from gateway.prompts import template as gateway_template
from gateway.prompts import template_bounds as bounds
from gateway.prompts.loop_exit import finished_scan
from gateway.prompts.template_bounds import TemplateError
from tests import template_corpus as tc

_PLAIN = gateway_template._environment(end_finished_scans=False)


def _first_loop(source: str) -> nodes.For:
    return next(_PLAIN.parse(source).find_all(nodes.For))


NS = "{% set ns = namespace(found=false, role=none, n=0) %}"
REWRITTEN = {
    "flag first in an and": "{% for x in xs %}{% if not ns.found and x > 1 %}{% set ns.role = x %}"
    "{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.role }}",
    "flag set deeper, output in the branch": "{% for x in xs %}{% if not ns.found %}{{ x }}{% if x > 1 %}"
    "{% set ns.found = true %}{% endif %}{% endif %}{% endfor %}",
    "flag set to a non-constant": "{% for x in xs %}{% if not ns.found %}{{ x }}{% set ns.found = x > 2 %}"
    "{% endif %}{% endfor %}",
    "flag set false to stop": "{% set ns.found = true %}{% for x in xs %}{% if ns.found and x > 1 %}"
    "{% set ns.found = false %}{% set ns.role = x %}{% endif %}{% endfor %}{{ ns.role }}",
    "flag compared": "{% for x in xs %}{% if ns.found == false and x > 1 %}{% set ns.found = true %}{{ x }}"
    "{% endif %}{% endfor %}",
    "flag tested": "{% for x in xs %}{% if ns.role is none and x > 1 %}{% set ns.role = x %}{% endif %}{% endfor %}"
    "{{ ns.role }}",
    "empty first branch": "{% for x in xs %}{% if ns.found %}{% elif x > 2 %}{% set ns.found = true %}"
    "{% else %}{{ x }}{% endif %}{% endfor %}",
    "loop.last in the guard": "{% for x in xs %}{% if not ns.found and (x > 1 or loop.last) %}{{ loop.index }}"
    "{% set ns.found = true %}{% endif %}{% endfor %}",
    "counter before the if": "{% for x in xs[::-1] %}{% set i = (xs | length - 1) - loop.index0 %}"
    "{% if not ns.found and x > 1 %}{% set ns.found = true %}{% set ns.n = i %}{% endif %}{% endfor %}{{ ns.n }}",
    "later items would fail the rest of the guard": "{% for x in xs %}{% if not ns.found and x + 1 > 2 %}"
    "{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.found }}",
    "continue in the branch": "{% for x in xs %}{% if not ns.found %}{% if x < 2 %}{% continue %}{% endif %}"
    "{% set ns.found = true %}{{ x }}{% endif %}{% endfor %}",
}
LEFT_ALONE = {
    "output outside the if": "{% for x in xs %}{{ x }}{% if not ns.found %}{% set ns.found = true %}{% endif %}"
    "{% endfor %}",
    "statement after the if": "{% for x in xs %}{% if not ns.found %}{% set ns.found = true %}{% endif %}"
    "{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}",
    "else branch": "{% for x in xs %}{% if not ns.found %}{% set ns.found = true %}{% else %}{{ x }}{% endif %}"
    "{% endfor %}",
    "elif branch": "{% for x in xs %}{% if not ns.found %}{% set ns.found = true %}{% elif x %}{{ x }}{% endif %}"
    "{% endfor %}",
    "first branch not empty": "{% for x in xs %}{% if ns.found %}{{ x }}{% else %}{% set ns.found = true %}"
    "{% endif %}{% endfor %}",
    "flag read second": "{% for x in xs %}{% if x > 1 and not ns.found %}{% set ns.found = true %}{% endif %}"
    "{% endfor %}",
    "flag is the loop's own": "{% for x in xs %}{% if not loop.first %}{{ x }}{% endif %}{% endfor %}",
    "flag read through a call": "{% for x in xs %}{% if not ns.found.get('k') %}{{ x }}{% endif %}{% endfor %}",
    "flag compared to a variable": "{% for x in xs %}{% if ns.role == x %}{% else %}{{ x }}{% endif %}{% endfor %}",
    "namespace rebound in the loop": "{% for x in xs %}{% if not ns.found %}{% set ns = namespace(found=x > 1) %}"
    "{{ x }}{% endif %}{% endfor %}",
    "namespace is the loop's target": "{% for ns in [ns, ns] %}{% if not ns.found %}{{ 1 }}{% endif %}{% endfor %}",
    "attribute before the if": "{% for x in xs %}{% set y = x.real %}{% if not ns.found %}{{ y }}"
    "{% set ns.found = true %}{% endif %}{% endfor %}",
    "product before the if": "{% for x in xs %}{% set y = 'a' * loop.index %}{% if not ns.found %}{{ y }}"
    "{% set ns.found = true %}{% endif %}{% endfor %}",
    "a later item fails what comes before the if": "{% for x in xs %}{% set y = x + 1 %}{% if not ns.found %}"
    "{% set ns.found = true %}{% endif %}{% endfor %}",
    "namespace attribute before the if": "{% for x in xs %}{% set y = ns.n + 1 %}{% if not ns.found %}"
    "{% set ns.found = true %}{% endif %}{% endfor %}",
    "recursive loop": "{% for x in xs recursive %}{% if not ns.found %}{% set ns.found = true %}{% endif %}"
    "{% endfor %}",
    "filtered loop": "{% for x in xs if x > 0 %}{% if not ns.found %}{% set ns.found = true %}{% endif %}{% endfor %}",
    "loop with else": "{% for x in xs %}{% if not ns.found %}{% set ns.found = true %}{% endif %}{% else %}-"
    "{% endfor %}",
}
CONTEXTS = [
    {"xs": []},
    {"xs": [0]},
    {"xs": [0, 1, 2, 3, 4, 5]},
    {"xs": [5, 0, 3, 1]},
    {"xs": [0, 3, "text", None]},
    {"xs": [0, 0, 0]},
    {"xs": [1.5, 2.5]},
    {"xs": ["a", "b"]},
]


@pytest.mark.parametrize("source", REWRITTEN.values(), ids=REWRITTEN.keys())
def test_a_finished_scan_is_found(source: str) -> None:
    assert finished_scan(_first_loop(NS + source)) is not None


@pytest.mark.parametrize("source", LEFT_ALONE.values(), ids=LEFT_ALONE.keys())
def test_a_loop_it_cannot_prove_is_left_alone(source: str) -> None:
    assert finished_scan(_first_loop(NS + source)) is None


def _outcomes(environment: Any, source: str) -> list[str]:
    """The template's render of each of CONTEXTS, or its error."""
    template, out = environment.from_string(source), []
    for context in CONTEXTS:
        try:
            out.append(gateway_template._render_bounded(template, context, 1 << 20))
        except TemplateError as e:
            out.append(f"error: {e}")
    return out


@pytest.mark.parametrize("source", [*REWRITTEN.values(), *LEFT_ALONE.values()], ids=[*REWRITTEN, *LEFT_ALONE])
def test_every_case_renders_the_same_with_and_without_the_break(source: str) -> None:
    assert _outcomes(gateway_template._environment(), NS + source) == _outcomes(_PLAIN, NS + source)


def _steps(environment: Any, source: str, context: dict[str, Any]) -> int:
    """The steps a render charged (a lazy sequence's items are charged as the loop takes them)."""
    with bounds.render_budget(1000, 1 << 20):
        "".join(environment.from_string(source).generate(context))
        return 1000 - bounds._STATE.budget.steps


def test_the_break_stops_the_loop() -> None:
    source = NS + REWRITTEN["flag set deeper, output in the branch"].replace("in xs", "in xs | map('int')")
    context = {"xs": [0, 3, 0, 0, 0, 0]}
    assert _steps(gateway_template._environment(), source, context) < _steps(_PLAIN, source, context)


FLAGS = ("not ns.found", "ns.found", "ns.found == false", "ns.found != true", "ns.role is none", "ns.found is true")
GUARD_RESTS = ("", " and x > 1", " and (x + 1) > 2", " or x == 3")
STATEMENTS = (
    "{{ x }}",
    "{% set ns.found = true %}",
    "{% set ns.found = false %}",
    "{% set ns.role = x %}",
    "{% set ns.found = x > 2 %}",
    "{% if x == 2 %}{% set ns.found = not ns.found %}{% endif %}",
    "{% if x == 0 %}{% continue %}{% endif %}",
    "{% set ns.n = ns.n + 1 %}",
)


def _random_loop(draw: random.Random) -> str:
    """A loop shaped like a scan, or nearly: a prefix or not, either shape of guard, a random branch."""
    prefix = draw.choice(("", "{% set i = (xs | length) - loop.index0 %}", "{% set i = x %}", "{% set i = x + 1 %}"))
    guard = draw.choice(FLAGS) + draw.choice(GUARD_RESTS)
    branch = "".join(draw.choices(STATEMENTS, k=draw.randint(1, 4)))
    if draw.random() < 0.5:
        body = f"{{% if {guard} %}}{branch}{{% endif %}}"
    else:
        other = "".join(draw.choices(STATEMENTS, k=draw.randint(1, 3)))
        body = f"{{% if {guard} %}}{{% elif x > 2 %}}{branch}{{% else %}}{other}{{% endif %}}"
    loop = f"{{% for x in xs %}}{prefix}{body}{{% endfor %}}"
    return f"{{% set i = 0 %}}{loop}{{{{ ns.found }}}},{{{{ ns.role }}}},{{{{ ns.n }}}},{{{{ i }}}}"  # i: loop-local


def test_random_loops_render_the_same_with_and_without_the_break() -> None:
    draw = random.Random(17)
    ended, rewritten = gateway_template._environment(), 0
    for _ in range(80):
        source = NS + _random_loop(draw)
        rewritten += finished_scan(_first_loop(source)) is not None
        assert _outcomes(ended, source) == _outcomes(_PLAIN, source), source
    assert rewritten > 12


# -- the corpus ------------------------------------------------------------------------------------------------------


def _corpus() -> list[tuple[str, str]]:
    family = sorted(Path(__file__).parent.parent.glob("gateway/families/*/chat_template.jinja"))
    own = [(f"gateway {path.parent.name}", path.read_text(encoding="utf-8")) for path in family]
    return [*((entry["id"], entry["template"]) for entry in tc.corpus()["templates"]), *own]


CORPUS = _corpus()


def _rewrites(source: str) -> int:
    template = _PLAIN.parse(source)
    return sum(finished_scan(loop) is not None for loop in template.find_all(nodes.For))


REWRITES = {name: _rewrites(source) for name, source in CORPUS}


def test_the_pass_finds_the_known_scans_of_the_corpus() -> None:
    """Gemma 4's two forward scans and the Qwen3 line's reverse scan for the last query (a few others too)."""
    assert REWRITES["google/gemma-4-31B-it"] == 2
    assert all(REWRITES[name] == 1 for name in ("Qwen/Qwen3-0.6B", "Qwen/Qwen3.5-4B", "Qwen/Qwen3.6-35B-A3B"))


@contextmanager
def _loops_as_written(written: bool) -> Iterator[None]:
    """Render through the gateway's whole path with the pass off (`written`) or on, no kept render reused."""
    environment = gateway_template._environment(end_finished_scans=not written)
    with (
        mock.patch.object(gateway_template, "_ENV", environment),
        mock.patch.object(gateway_template, "_RENDERS", gateway_template._Renders()),
        mock.patch.object(gateway_template, "datetime", tc.FrozenClock),
    ):
        gateway_template.compile_template.cache_clear()
        try:
            yield
        finally:
            gateway_template.compile_template.cache_clear()


def _long_conversations() -> dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]] | None]]:
    """Chats and agents' loops long enough for a scan to stop early many times over."""
    chat = [tc.SYSTEM] + [
        {"role": ("user", "assistant")[i % 2], "content": f"turn {i}"} if i % 6 != 3 else {**tc.REASONED}
        for i in range(24)
    ]
    agent: list[dict[str, Any]] = [tc.SYSTEM, tc.ASK]
    for step in range(6):
        as_text = step % 2 == 1
        agent.append(tc._calling(None if step % 3 else "Checking.", as_text, both=step % 2 == 0))
        agent += [tc.RESULT, tc.RESULT_2] if step % 2 == 0 else [tc.RESULT]
        if step % 3 == 2:
            agent += [tc.FINAL, tc.AGAIN]
    return {
        "long-chat": (chat, None),
        "long-chat-assistant-last": (chat[:-1] if chat[-1]["role"] == "user" else chat, None),
        "long-agent": (agent, tc.TOOLS),
        "long-agent-answered": ([*agent, tc.FINAL], tc.TOOLS),
        "long-agent-asked-again": ([*agent, tc.FINAL, tc.AGAIN], tc.TOOLS),
    }


def _renders(source: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """The corpus matrix's renders, then the long conversations with and without a generation prompt, continued
    where they end with an assistant's text, and with each kwarg value the template reads."""
    for render in tc.renders(source):
        messages, tools = tc.render_inputs(render)
        yield (
            render.name,
            {
                "messages": messages,
                "tools": tools,
                "documents": tc.DOCUMENTS if render.documents else None,
                "add_generation_prompt": render.add_generation_prompt,
                "continue_final_message": render.continue_final_message,
                "template_kwargs": dict(render.kwargs),
            },
        )
    read = gateway_template.template_variables(source)
    kwargs = [{}] + [{k: v} for k, values in tc.KWARG_VALUES.items() if k in read for v in values]
    for name, (messages, tools) in _long_conversations().items():
        for kw in kwargs:
            yield name, {"messages": messages, "tools": tools, "template_kwargs": kw}
            yield name, {"messages": messages, "tools": tools, "template_kwargs": kw, "add_generation_prompt": False}
            if messages[-1]["role"] == "assistant" and messages[-1].get("content"):
                yield name, {"messages": messages, "tools": tools, "template_kwargs": kw, "add_generation_prompt": False,
                             "continue_final_message": True}  # fmt: skip


def _render_all(source: str, written: bool) -> list[str]:
    specials = tc.special_tokens()
    out = []
    with _loops_as_written(written):
        for name, arguments in _renders(source):
            arguments = {**arguments, "messages": json.loads(json.dumps(arguments["messages"]))}
            try:
                out.append(gateway_template.render_chat_template(source, special_tokens=specials, **arguments))
            except TemplateError as e:
                out.append(f"{name}: error: {e}")
    return out


SCANNING = [(name, source) for name, source in CORPUS if REWRITES[name]]


@pytest.mark.parametrize("source", [s for _, s in SCANNING], ids=[n for n, _ in SCANNING])
def test_the_corpus_renders_byte_for_byte_the_same(source: str) -> None:
    ended, written = _render_all(source, written=False), _render_all(source, written=True)
    assert len(ended) == len(written) > 40
    for index, (a, b) in enumerate(zip(ended, written, strict=True)):
        assert a == b, index
