"""Sandboxed rendering of Hugging Face chat templates.

Templates run in Jinja2's ImmutableSandboxedEnvironment with the settings and
helpers `transformers` gives them (trim_blocks, lstrip_blocks, loop controls,
`raise_exception`, `tojson`, `strftime_now`, the `{% generation %}` block), bounded in steps and in the size of what
any operation builds (prompts/template_bounds.py); a loop that scans for something stops once it has found it, its
text unchanged (prompts/loop_exit.py). Every failure surfaces as `TemplateError`, which the gateway answers with 400. Messages reach a template as
transformers hands them (`template_messages`); tests/test_template_corpus.py holds renders to transformers' own over
a corpus of real templates.

A template that reads no clock or randomness renders the same text for the same context, so its renders are kept
(`_Renders`, keyed by the JSON of the arguments the context is built from: the same messages, tools and flags in the
same order render once, and are found again without building the context).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from functools import lru_cache
from typing import Any, ClassVar

import jinja2
import orjson
from jinja2 import meta, nodes
from jinja2.exceptions import SecurityError
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEnvironment

from gateway.prompts import template_bounds as bounds
from gateway.prompts.kept import Kept
from gateway.prompts.loop_exit import end_finished_scans
from gateway.prompts.template_bounds import MAX_TEMPLATE_STEPS, TemplateError

__all__ = ["MAX_RENDERED_CHARS", "MAX_TEMPLATE_STEPS", "TemplateError", "compile_template", "render_chat_template"]

MAX_RENDERED_CHARS = 8_000_000
"""Upper bound on a rendered prompt, and on any value a template builds; a template that makes more is stopped."""


class _GenerationBlock(Extension):
    """`{% generation %}…{% endgeneration %}` marks assistant text for training masks; rendering keeps the body.
    The body is a call block's, as transformers parses it: a `{% break %}` in it is outside any loop."""

    tags: ClassVar[set[str]] = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body, lineno=lineno)

    def _body(self, caller: Any) -> str:
        return caller()


class _Namespace(jinja2.utils.Namespace):
    """Jinja's `namespace`, refusing names that start with an underscore (as transformers' does), made or set."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # self among *args, as Jinja has it: `namespace(self=1)` works
        self, attributes = args[0], dict(*args[1:], **kwargs)
        for name in attributes:
            _check_namespace_name(name)
        jinja2.utils.Namespace.__init__(self, attributes)

    def __setitem__(self, name: str, value: Any) -> None:
        _check_namespace_name(name)
        super().__setitem__(name, value)


def _check_namespace_name(name: Any) -> None:
    if isinstance(name, str) and name.startswith("_"):
        raise SecurityError(f"a namespace attribute cannot start with an underscore: {name!r}")


class _DictMaker:
    """The `dict` global: `dict(...)` and `dict.fromkeys(...)` make dicts, as with transformers' own. Not the type
    itself, whose methods take any dict as their first argument (`dict.update(messages[0], ...)`, `dict.clear(tool)`):
    the immutable sandbox checks a method's object, never its argument, so those changed the request's dicts."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, keys: Any, value: Any = None) -> dict[Any, Any]:
        return dict.fromkeys(keys, value)


def _raise_exception(message: str) -> None:
    raise TemplateError(str(message))


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    """Hugging Face's `tojson`: unlike Jinja's own, no HTML escaping and non-ASCII kept."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


_DICT_ATTRIBUTES = frozenset(dir(dict))
"""Every attribute a plain dict has: any other name read as an attribute of one is its item."""


class _Sandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox, giving its own answers faster in the two commonest cases of a chat template:
    a plain dict's item read as an attribute (`message.role`: the sandbox tries the attribute first, which raises
    and is caught), and a method of a str (no known mutable type: the immutable sandbox's extra check passes).
    Its loops, calls and the operators that can build large values are bounded (prompts/template_bounds.py)."""

    intercepted_binops = bounds.BOUNDED_BINOPS
    ends_finished_scans = True
    """Whether a loop that only scans for something stops once it has found it (prompts/loop_exit.py)."""

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        template = super()._parse(source, name, filename)
        if self.ends_finished_scans:
            end_finished_scans(template)
        return bounds.bound_loops(template)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "+":  # the commonest (templates join their strings with it): its check inline
            result = left + right
            if isinstance(result, (str, list, tuple)) and len(result) > bounds.ALWAYS_FITS:
                bounds.check_size(len(result), "'+'")
            return result
        return bounds.binop(operator, left, right)

    def call(self, context: Any, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        bounds.check_call(obj, args, kwargs)
        return bounds.check_built(super().call(context, obj, *args, **kwargs), "a call")

    def getattr(self, obj: Any, attribute: str) -> Any:
        if type(obj) is dict and attribute not in _DICT_ATTRIBUTES:
            try:
                return obj[attribute]
            except KeyError:
                return self.undefined(obj=obj, name=attribute)
        return super().getattr(obj, attribute)

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if type(obj) is str:
            return SandboxedEnvironment.is_safe_attribute(self, obj, attr, value)
        return super().is_safe_attribute(obj, attr, value)


def _environment(end_finished_scans: bool = True) -> ImmutableSandboxedEnvironment:
    """The sandbox templates compile in; `end_finished_scans=False`: loops left as written (to compare with)."""
    env = _Sandbox(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols, _GenerationBlock])
    env.ends_finished_scans = end_finished_scans
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["namespace"] = _Namespace
    env.globals["dict"] = _DictMaker()
    env.globals["range"] = bounds.bounded_range
    env.globals["lipsum"] = bounds.bounded_lipsum
    env.filters = {name: bounds.bounded_filter(name, f) for name, f in env.filters.items()}
    env.filters[bounds.COUNT_FILTER] = bounds.counted
    env.filters[bounds.COUNT_AS_RUN_FILTER] = bounds.counted_as_run
    env.filters[bounds.LOOP_RANGE_FILTER] = bounds.loop_range
    env.filters[bounds.CONCAT_FILTER] = bounds.concat
    env.filters[bounds.PLUS_FILTER] = bounds.summed
    return env


_ENV = _environment()


@contextmanager
def _compiling() -> Iterator[None]:
    """Parsing or compiling a template: its failures as TemplateError."""
    try:
        yield
    except jinja2.TemplateSyntaxError as e:
        raise TemplateError(f"chat template syntax error at line {e.lineno}: {e.message}") from None
    except SyntaxError as e:  # Python's, from code Jinja's parser let through: a `{% break %}` in a macro in a loop
        raise TemplateError(f"chat template syntax error: {e.msg}") from None
    except RecursionError:  # a template nested past the parser's or the compiler's recursion
        raise TemplateError("chat template syntax error: nested too deeply") from None


@lru_cache(maxsize=64)
def compile_template(source: str) -> jinja2.Template:
    """The compiled template for `source` (cached by source text)."""
    # compiling folds constant expressions (a filter of literals): within the same bounds as a render
    with _compiling(), bounds.render_budget(MAX_TEMPLATE_STEPS, MAX_RENDERED_CHARS):
        template = _ENV.from_string(source)
    # the globals as a plain dict: every render copies them, and a ChainMap copies key by key in Python
    template.globals = dict(template.globals)
    return template


IMPURE_WORDS = ("strftime", "random", "lipsum")
"""Names a template reads the clock or chance through (the `strftime_now` global; Jinja's `random` filter, also as
`map('random')`, and `lipsum` global): a template whose source holds none of them renders its context alone."""


def renders_purely(source: str) -> bool:
    """Whether the template's output depends only on its context (a conservative reading of its source text)."""
    return not any(word in source for word in IMPURE_WORDS)


class _Renders:
    """Renders of pure templates, keyed by the template, the JSON of the arguments it was rendered with (the
    messages, tools, documents, flags, special tokens and template kwargs: everything its context is built from) and
    the size cap; found before any context is built. Insertion order is kept in the JSON, so arguments that differ
    only in key order, which a template can see, stay apart; least recently used out first (`kept.Kept`: found with
    no lock). Arguments that orjson cannot dump or whose JSON is past `max_key_bytes` are not kept. They hold what
    parsed request bodies hold (dicts, lists, str, int, float, bool, None; never inf or NaN, which orjson's parser
    refuses and its dump would write as null), so equal dumps are equal arguments, which build equal contexts."""

    def __init__(self, entries: int = 128, max_key_bytes: int = 32 * 1024):
        self._max_key_bytes = max_key_bytes
        self._kept: Kept[tuple[str, bytes, int], str] = Kept(entries)

    def find(
        self, source: str, arguments: tuple[Any, ...], max_chars: int
    ) -> tuple[tuple[str, bytes, int] | None, str | None]:
        """The key of a render of `source` with `arguments` and `max_chars` (None: not to be kept), and the render
        kept under it (None: none is)."""
        if not _purity(source):
            return None, None
        try:
            dump = orjson.dumps(arguments)
        except orjson.JSONEncodeError:  # e.g. an int past 64 bits, a lone surrogate
            return None, None
        if len(dump) > self._max_key_bytes:
            return None, None
        key = (source, dump, max_chars)
        return key, self._kept.get(key)

    def keep(self, key: tuple[str, bytes, int], text: str) -> None:
        self._kept.keep(key, text)


_RENDERS = _Renders()
_purity = lru_cache(maxsize=64)(renders_purely)


def template_variables(source: str) -> frozenset[str]:
    """Names the template reads from its context (e.g. whether it handles `tools`)."""
    with _compiling():
        return frozenset(meta.find_undeclared_variables(_ENV.parse(source)))


def render_chat_template(
    source: str,
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None = None,
    documents: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = True,
    continue_final_message: bool = False,
    special_tokens: Mapping[str, str] | None = None,
    template_kwargs: dict[str, Any] | None = None,
    max_chars: int = MAX_RENDERED_CHARS,
) -> str:
    """Render a chat template the way `transformers.apply_chat_template(tokenize=False)` does.

    `special_tokens` are the tokenizer's named special tokens (bos_token, eos_token, unk_token ..., transformers'
    `special_tokens_map`: one it has none of is undefined). `template_kwargs` (the request's chat_template_kwargs)
    are extra context variables that override those, as transformers lets them, but not the named arguments. With
    `continue_final_message` the prompt ends right after the last message's content, so the model continues it.
    """
    if continue_final_message and add_generation_prompt:
        raise TemplateError("continue_final_message and add_generation_prompt cannot both be set")
    arguments = (
        messages,
        tools,
        documents,
        add_generation_prompt,
        continue_final_message,
        special_tokens,
        template_kwargs,
    )
    key, rendered = _RENDERS.find(source, arguments, max_chars)  # before any context is built for the template
    if rendered is None:
        rendered = _render_anew(source, *arguments, max_chars)
        if key is not None:
            _RENDERS.keep(key, rendered)
    return rendered


def _render_anew(
    source: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    documents: list[dict[str, Any]] | None,
    add_generation_prompt: bool,
    continue_final_message: bool,
    special_tokens: Mapping[str, str] | None,
    template_kwargs: dict[str, Any] | None,
    max_chars: int,
) -> str:
    """`render_chat_template`'s render, not kept: the template's context built from the arguments, then rendered."""
    context = {  # (a name of `template_kwargs` among these keeps its place, with the value given here)
        **(special_tokens or {}),
        **(template_kwargs or {}),
        "messages": template_messages(messages),
        "tools": tools or None,
        "documents": documents or None,
        "add_generation_prompt": add_generation_prompt,
    }
    render = _render_continued if continue_final_message else _render
    try:
        return render(source, context, max_chars)
    except bounds.RenderOverBudget:
        raise  # another render of the same conversation would cost as much again
    except TemplateError:
        if not any(m.get("content", "") is None for m in messages):
            raise
    # A template that reads the content of every message (DeepSeek's `'<｜Assistant｜>' + message['content']` unless
    # it `is none`) raises where transformers leaves a null content out; vLLM gives it as "", and so does the gateway.
    return render(source, {**context, "messages": template_messages(messages, null_content="")}, max_chars)


_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
"""Names a message's reasoning goes by; transformers gives a template the first found under the first two."""
_REASONING_KEYS = frozenset(_REASONING_FIELDS)


def template_messages(messages: list[dict[str, Any]], null_content: str | None = None) -> list[dict[str, Any]]:
    """The messages as transformers' `apply_chat_template` gives them to a template: keys holding None left out (an
    assistant's `content: null` beside its tool calls), the reasoning also as `thinking` (gpt-oss's, Command A's and
    LFM2's templates read it) and as `reasoning_content`. A null content becomes `null_content` where that is given."""
    out = []
    for message in messages:
        if None in message.values():
            message = {
                key: null_content if key == "content" and value is None else value
                for key, value in message.items()
                if value is not None or (key == "content" and null_content is not None)
            }
        if not _REASONING_KEYS.isdisjoint(message):
            reasoning = next((message[k] for k in _REASONING_FIELDS if message.get(k) is not None), None)
            if reasoning is not None:
                message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        out.append(message)
    return out


def _render(source: str, context: dict[str, Any], max_chars: int) -> str:
    """The template rendered with `context`."""
    return _render_bounded(compile_template(source), context, max_chars)


_CONTINUE = "\ue000gateway:continue\ue000"
"""Written after the final message's content to find where that content ends in the render."""


def _render_continued(source: str, context: dict[str, Any], max_chars: int) -> str:
    """The prompt up to the end of the final message's content, found by a mark and a space rendered right after the
    content: its trailing whitespace kept where the template kept the space, left out where the template trimmed it
    (as transformers cuts). Where the template does not write the mark once (it transforms the content, or a message
    spells it), after the content's last occurrence. (A last occurrence can lie in the template's text after the
    message: a content "m" cut inside `<|im_end|>` left `<|im` in the prompt.)"""
    messages = context["messages"]
    content = messages[-1].get("content") if messages else None
    if not isinstance(content, str):
        raise TemplateError("continue_final_message needs a final message with text content")
    marked = [*messages[:-1], {**messages[-1], "content": content + _CONTINUE + " "}]
    rendered = _render(source, {**context, "messages": marked}, max_chars)
    if rendered.count(_CONTINUE) == 1:
        at = rendered.index(_CONTINUE)
        return rendered[:at] if rendered.startswith(_CONTINUE + " ", at) else rendered[:at].rstrip()
    return _cut_after_final_message(_render(source, context, max_chars), messages)


def _render_bounded(template: jinja2.Template, context: dict[str, Any], max_chars: int) -> str:
    parts: list[str] = []
    size = 0
    try:
        with bounds.render_budget(MAX_TEMPLATE_STEPS, max_chars):
            for part in template.generate(context):
                size += len(part)
                if size > max_chars:
                    raise TemplateError(f"rendered prompt exceeds {max_chars} characters")
                parts.append(part)
    except bounds.RenderOverBudget as e:
        raise bounds.RenderOverBudget(e.limit, _conversation_size(context)) from None
    except TemplateError:
        raise
    except jinja2.TemplateError as e:
        raise TemplateError(f"chat template error: {e.message or type(e).__name__}") from None
    except RecursionError:
        raise TemplateError("chat template error: recursion too deep") from None
    except Exception as e:  # noqa: BLE001 - a template may raise anything; it is still the request's fault
        raise TemplateError(f"chat template error: {type(e).__name__}: {e}") from None
    return "".join(parts)


def _conversation_size(context: dict[str, Any]) -> str:
    """How long the conversation a render was given is, in words (`3,000 messages, 2 tools`)."""
    counts = [(len(context.get("messages") or ()), "message"), (len(context.get("tools") or ()), "tool")]
    return ", ".join(f"{n:,} {noun}{'' if n == 1 else 's'}" for n, noun in counts if n or noun == "message")


def _cut_after_final_message(rendered: str, messages: list[dict[str, Any]]) -> str:
    text = messages[-1]["content"].rstrip()
    at = rendered.rfind(text) if text else -1
    if at < 0:
        raise TemplateError("continue_final_message: the template does not render the final message verbatim")
    return rendered[: at + len(text)]
