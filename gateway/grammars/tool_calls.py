"""Structural tags for tag-shaped tool calls (one `tag` per tool), shared by the families that write them.

Policy: tool_choice "auto" makes calls lazy (free text; a call starts at the family's opening marker), "required"
or a named tool makes the answer calls only, a named tool or `parallel_tool_calls=false` one call.
Arguments follow the tool's schema unless the tool says `strict: false` (seed 001: an omitted `strict` is
strict); then any object. response_format is the answer's JSON (with "auto", the answer is either calls
or that JSON); a prompt that opened the think block gets its reasoning block first, which holds no call-opening
token (the qwen3_xml parser ends reasoning at one).

Special tokens: where the vocabulary has the markers as tokens, free text and reasoning hold none of its special
tokens but the markers the grammar places (a role or unused token would show as text), nor a family stop token
(GLM's `<|user|>`, `<|observation|>`): the backend ends the output at one, so in the reasoning it lost the call or
JSON owed after it (on a backend whose xgrammar stops only at the eos token; one that lists them all stops only
where the grammar may end). A structural tag's answer may end with one wherever it may end (a response_format
answer alone, plain EBNF, at the eos token, as before).

Markers: a call's opening and closing markers (and the think block's) are `token` formats by id where the served
vocabulary has them as added tokens (`gateway.grammars.markers`), so their spelling in ordinary tokens never opens
or closes a call; lazy calls then start at the opening token (`token_triggered_tags`, whose free text holds no
token of a marker only a call uses: the closing one, GLM's argument markers; nor a think token, where the
vocabulary has both: the answer's think block is then an optional one at its start), and free text may still
spell the marker with ordinary tokens (text, as the families' token-aware parsers read it: xgrammar cannot exclude
a spelling from free text without excluding the token that spells it). A vocabulary without them gets text markers
and a text trigger (`triggered_tags`). Markers inside an EBNF body (GLM's `<arg_key>`…, `CallFormat.inner`) become
`Token(id)`s the same way.

Values: no argument value, and no string of a response_format answer, can hold a control token, the markers' or
the vocabulary's other special added tokens' (`MarkerTokens.values_exclude`): backends' xgrammar sees those tokens as
their spelling, so a value must exclude the spelling (`gateway.grammars.safe_json`: a JSON string takes it only
escaped, a raw XML value not at all), or a token-aware parser would read structure inside it (the grammars 0.2.9
builds keep to that on 0.2.7 and 0.2.8 too: tests/test_grammar_marker_tokens.py's checks replayed there).

Every format used is in xgrammar 0.2.7 (SGLang's pin): the token-level formats (token, any_tokens,
token_triggered_tags, a tag's token begin / end, EBNF `Token(…)`) came with xgrammar#560, before 0.2.0, so every
backend gets the same grammar (checked 2026-12-01 with the 0.2.7 and 0.2.8 wheels first on PYTHONPATH:
tests/test_grammar_marker_tokens.py passes, and the grammars 0.2.9 builds compile and keep to it there).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, NamedTuple

from backends.base import Grammar
from gateway.grammars.json import ANY_OBJECT, RESPONSE_SCHEMA_PARAM, response_strict
from gateway.grammars.json import response_schema as answer_schema
from gateway.grammars.markers import TEXT_MARKERS, MarkerTokens
from gateway.grammars.reasoning import ThinkBlock, with_reasoning
from gateway.grammars.safe_json import safe_arguments_ebnf
from gateway.types import ChatRequest

Format = dict[str, Any]


def arguments_schema(tool: dict[str, Any]) -> dict[str, Any]:
    """The schema a call's arguments must follow: the declared one unless the tool says `strict: false`."""
    fn = tool["function"]
    if fn.get("strict") is False or not isinstance(fn.get("parameters"), dict):
        return ANY_OBJECT
    return fn["parameters"]


def arguments_format(tool: dict[str, Any], param: str, spellings: tuple[str, ...], style: str = "json") -> Format:
    """A call's arguments in `style` (compact JSON, or an XML argument style): the tool's `arguments_schema`, an
    object at least, with no value holding one of `spellings` (`safe_json.safe_arguments_ebnf`: a schema without
    such a grammar is a 400 only when the tool says `strict: true`, else any object)."""
    strict = tool["function"].get("strict") is True
    ebnf = safe_arguments_ebnf(arguments_schema(tool) or ANY_OBJECT, spellings, param, strict, style)
    return {"type": "grammar", "grammar": ebnf}


def indexed_active_tools(request: ChatRequest) -> list[tuple[int, dict[str, Any]]]:
    """The active tools with their index in `request.tools` (for a 400's `param`)."""
    return [(i, t) for i, t in enumerate(request.tools) if any(t is a for a in request.active_tools)]


class CallBody(NamedTuple):
    """What one tool's call holds between the opening and closing markers: text, the arguments, text."""

    head: str
    arguments: Format
    tail: str


@dataclass(frozen=True)
class CallFormat:
    """How one family writes calls: the markers around each call, a tool's call body (given the tool, the `param`
    naming its parameters and the spellings its values exclude), the text that starts any call where the opening
    marker is text, the think block, what separates forced calls, and the markers that an EBNF body's string
    literals write (`inner`: each becomes its token where the vocabulary has one)."""

    open: str
    close: str
    body: Callable[[dict[str, Any], str, tuple[str, ...]], CallBody]
    trigger: str
    think: ThinkBlock
    separator: str = "\n"
    inner: tuple[str, ...] = ()


def unconstrained(request: ChatRequest) -> bool:
    """Nothing constrains the answer: no response format and no active tools (`build_grammar` gives no grammar)."""
    return request.response_format is None and not (request.tools and request.active_tools)


def build_grammar(
    request: ChatRequest,
    prompt_opens_reasoning: bool,
    calls_format: CallFormat,
    markers: MarkerTokens = TEXT_MARKERS,
    stops: Collection[int] = (),
) -> Grammar | None:
    """The grammar for `request`; `prompt_opens_reasoning` says the prompt ends inside the think block; `markers`
    are the served vocabulary's marker tokens, `stops` the family's stop tokens."""
    if unconstrained(request):
        return None  # (most requests: no work below)
    schema = answer_schema(request.response_format)
    strict = response_strict(request.response_format)
    answer_ebnf = None  # spelling-safe as argument values; a schema xgrammar cannot use is a 400, as before
    if schema is not None:
        answer_ebnf = safe_arguments_ebnf(schema, markers.values_exclude, RESPONSE_SCHEMA_PARAM, strict)
    answer = None if answer_ebnf is None else {"type": "grammar", "grammar": answer_ebnf}
    forced = request.tool_choice != "auto"
    think = calls_format.think
    if request.active_tools:
        one = isinstance(request.tool_choice, dict) or not request.parallel_tool_calls
        think_tokens = [markers.ids[s] for s in (think.start, think.end) if s in markers.ids]
        think_tokens = think_tokens if len(think_tokens) == 2 else []  # a lazy answer thinks only at its start
        calls = _calls(request, calls_format, markers, only_calls=forced or answer is not None, one=one,
                       free_excludes=[*think_tokens, *markers.specials, *stops])  # fmt: skip
        if answer is not None and not forced:
            calls = {"type": "or", "elements": [calls, answer]}
        optional = forced or answer is not None or bool(think_tokens)
        return with_reasoning(_ended(calls, stops), prompt_opens_reasoning=prompt_opens_reasoning,
                              reasoning_optional=optional, think=think, markers=markers, excludes=(calls_format.open,),
                              stops=stops)  # fmt: skip
    if answer is None:
        return None
    if prompt_opens_reasoning:
        return with_reasoning(_ended(answer, stops), prompt_opens_reasoning=True, reasoning_optional=False,
                              think=think, markers=markers, stops=stops)  # fmt: skip
    return Grammar("ebnf", answer["grammar"])


def _ended(answer: Format, stops: Collection[int]) -> Format:
    """`answer`, then optionally one of the `stops` tokens: where the answer may end, the model may stop as it
    does (GLM's `<|observation|>` after a call), also on a backend whose xgrammar knows only the eos token."""
    if not stops:
        return answer
    ends = [{"type": "token", "token": i} for i in stops]
    end = ends[0] if len(ends) == 1 else {"type": "or", "elements": ends}
    return {"type": "sequence", "elements": [answer, {"type": "optional", "content": end}]}


def _calls(
    request: ChatRequest,
    calls_format: CallFormat,
    markers: MarkerTokens,
    only_calls: bool,
    one: bool,
    free_excludes: list[int],
) -> Format:
    """The calls: only calls, or lazy ones in free text that holds none of `free_excludes` (token ids)."""
    tags = [_tag(calls_format, t, f"tools[{i}].function.parameters", markers) for i, t in indexed_active_tools(request)]
    if only_calls:
        return {"type": "tags_with_separator", "tags": tags, "separator": calls_format.separator,
                "at_least_one": True, "stop_after_first": one}  # fmt: skip
    opener = markers.token(calls_format.open)
    if opener is not None:
        inside = [markers.ids[s] for s in (calls_format.close, *calls_format.inner) if s in markers.ids]
        return {"type": "token_triggered_tags", "trigger_tokens": [opener["token"]], "tags": tags,
                "exclude_tokens": sorted({*inside, *free_excludes}), "at_least_one": False,
                "stop_after_first": one}  # fmt: skip
    return {"type": "triggered_tags", "triggers": [calls_format.trigger], "tags": tags, "at_least_one": False,
            "stop_after_first": one}  # fmt: skip


def _tag(calls_format: CallFormat, tool: dict[str, Any], param: str, markers: MarkerTokens) -> Format:
    """One tool's call tag: each marker its token where the vocabulary has one (the text beside it then goes into
    the content), else text joined to the text beside it."""
    head, arguments, tail = calls_format.body(tool, param, markers.values_exclude)
    if calls_format.inner and arguments["type"] == "grammar":
        arguments = {**arguments, "grammar": markers.in_ebnf(arguments["grammar"], calls_format.inner)}
    begin: str | Format | None = markers.token(calls_format.open)
    end: str | Format | None = markers.token(calls_format.close)
    content = [arguments]
    if begin is None:
        begin = calls_format.open + head
    elif head:
        content.insert(0, {"type": "const_string", "value": head})
    if end is None:
        end = tail + calls_format.close
    elif tail:
        content.append({"type": "const_string", "value": tail})
    body = content[0] if len(content) == 1 else {"type": "sequence", "elements": content}
    return {"type": "tag", "begin": begin, "content": body, "end": end}
