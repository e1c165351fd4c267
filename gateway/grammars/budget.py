"""The CPU time one request's grammar may cost: built and compiled in a child process, killed past the budget.

A schema within every static bound can still cost seconds to compile (measured on SmolLM2's vocabulary, one
thread: an enum of 20,000 strings 2.1 s; twelve nested anyOf levels 0.9 s to build and 7.2 s to compile). The
family builds the grammar and xgrammar compiles it on the model's real vocabulary in a `CompileProcess`; past
`seconds` of its CPU time, or past its memory bound (`memory_mib`), the child is killed (a fresh one takes its
place) and the request is a 400 naming the schema (`param`), before any
backend is touched. With several schemas in play (tools, a response format) the refusal names the one whose
grammar alone runs past the budget, tried one by one after the refusal (`_attribute`: under 2x the budget more,
only for a grammar over budget), else `tools`. Grammars that compiled in time are remembered by the child (a
repeat costs only its build), and grammars, schemas and requests (`request_key`: a build alone can run past the
budget) that did not by the pool (a repeat is refused at once, the schema named from memory).
Waiting for a free child is not charged.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import orjson

from backends.base import Grammar
from backends.compile_pool import CompilePool, CompilerUnavailable, OverBudget
from backends.compile_process import MEMORY_MIB, BuildRefused
from gateway.errors import APIError, invalid
from gateway.families.base import Family
from gateway.grammars.json import RESPONSE_SCHEMA_PARAM, SchemaGrammarError, response_schema
from gateway.observability.requests import note_grammar_compile
from gateway.types import ChatRequest

if TYPE_CHECKING:
    import xgrammar as xgr

log = logging.getLogger("gateway.grammars")


class GrammarBudget(CompilePool):
    """Builds and compiles one model's grammars under a CPU-time budget per request (over-budget keys remembered:
    grammars, requests, `request_key`, and single schemas, `schema_pieces`)."""

    def __init__(
        self,
        family: Family,
        tokenizer_info: Callable[[], xgr.TokenizerInfo],
        seconds: float,
        memory_mib: int = MEMORY_MIB,
    ):
        super().__init__(functools.partial(_family_grammar, family), tokenizer_info, seconds, memory_mib)

    def build(self, chat: ChatRequest, prompt: str) -> Grammar | None:
        """The family's grammar for `chat`, compiled within the budget; blocking (call it off the event loop).
        400 when the schema cannot become a grammar or costs more than the budget; 503 to retry when the compile
        child failed or the gateway is shutting down."""
        try:
            reply, _ = self.job(chat, prompt, key=request_key(chat))
        except OverBudget:
            note_grammar_compile(self.seconds, "over_budget")
            raise self._over(self._attribute(chat, prompt)) from None
        except CompilerUnavailable as e:
            raise APIError(e.message, status=503, type="server_error", retry_after=e.retry_after) from None
        if reply[0] == "over_budget":  # known: named from memory, no schema tried alone again
            note_grammar_compile(None, "over_budget")
            raise self._over(self._attribute(chat, prompt, try_alone=False))
        return self._outcome(reply, chat)

    def _outcome(self, reply: tuple[Any, ...], chat: ChatRequest) -> Grammar | None:
        kind = reply[0]
        if kind == "none":
            return None
        if kind == "invalid":
            raise invalid(reply[1], reply[2])
        if kind == "too_deep":
            raise too_deep(chat)
        if kind == "failed":
            raise build_failed(chat, reply[1])
        if kind == "uncompilable":
            raise invalid(f"the grammar this request needs cannot be compiled: {reply[2]}", schema_param(chat))
        if kind == "known":
            note_grammar_compile(None, "hit")
            return reply[1]
        note_grammar_compile(reply[2], "miss")
        return reply[1]

    def _attribute(self, chat: ChatRequest, prompt: str, try_alone: bool = True) -> str:
        """The schema an over-budget grammar's cost belongs to. With several in play, one known over the budget
        alone is named; else (`try_alone`) each is tried alone in a child under the full budget while those tried
        before it cost less than the budget together (so this costs under 2x the budget, and a schema found over
        it is remembered): the first over the budget alone is named, else `tools` (their sum is what costs)."""
        param = schema_param(chat)
        if param != "tools":
            return param
        pieces = schema_pieces(chat)
        known = next((p for p, key, _ in pieces if self.known_over_budget(key)), None)
        if known is not None or not try_alone:
            return known or param
        spent = 0.0
        for piece_param, piece_key, piece in pieces:
            if spent >= self.seconds:
                break
            try:
                reply, cost = self.job(piece, prompt, key=piece_key)
            except OverBudget:
                return piece_param
            except CompilerUnavailable:  # a stuck or failed child: the refusal stands, unattributed
                break
            if reply[0] == "over_budget":
                return piece_param
            spent += cost
        return param

    def _over(self, param: str) -> APIError:
        return invalid(
            f"the grammar this request's schema needs costs more than this gateway's compile budget of "
            f"{self.seconds:g} s of CPU and {self.memory_mib} MiB of memory; simplify the schema (large enums, "
            "nested anyOf, long repetitions)",
            param,
            "grammar_too_complex",
        )


def _family_grammar(family: Family, chat: ChatRequest, prompt: str) -> Grammar | None:
    """The compile child's build step: the family's grammar; a schema it cannot enforce is refused naming it."""
    try:
        return family.grammar(chat, prompt)
    except SchemaGrammarError as e:
        raise BuildRefused(str(e), e.param) from None


def build_failed(chat: ChatRequest, trace: str) -> APIError:
    """The 400 for a schema a grammar builder raised on (the builder's defect, logged with its traceback)."""
    log.error("a grammar builder failed on this request's schema:\n%s", trace)
    message = "this gateway failed to build a grammar for the schema (a defect of the gateway, logged)"
    return invalid(message, schema_param(chat))


def too_deep(chat: ChatRequest) -> APIError:
    """The 400 for a schema whose grammar's builder recursed past Python's limit."""
    return invalid("the schema nests too deeply to become a grammar", schema_param(chat), "grammar_too_complex")


def schema_pieces(chat: ChatRequest) -> list[tuple[str, str, ChatRequest]]:
    """Each schema in play alone: its param, a key of its content, and the request it would be alone (one per active
    tool, and the response format's)."""
    pieces = [
        (f"tools[{chat.tools.index(t)}].function.parameters", t, replace(chat, tools=[t], response_format=None))
        for t in chat.active_tools
    ]
    if response_schema(chat.response_format) is not None:
        pieces.append((RESPONSE_SCHEMA_PARAM, chat.response_format, replace(chat, tools=[], tool_choice="auto")))
    return [(param, _schema_key(schema), piece) for param, schema, piece in pieces]


def _schema_key(schema: dict[str, Any]) -> str:
    return "schema:" + hashlib.sha256(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)).hexdigest()


def request_key(chat: ChatRequest) -> str:
    """What a request's grammar is built from, hashed: its tools, tool choice and response format (not its messages:
    an agent's every turn sends the same tools). A request whose build alone ran past the budget made no grammar key;
    this one is remembered instead, so its repeat is refused without a build."""
    built_from = [chat.tools, chat.tool_choice, chat.parallel_tool_calls, chat.response_format]
    return "request:" + hashlib.sha256(orjson.dumps(built_from, option=orjson.OPT_SORT_KEYS)).hexdigest()


def schema_param(chat: ChatRequest) -> str:
    """Where the schema behind a request's grammar came from: one tool's parameters or the response format when
    only one schema is in play, else `tools`."""
    tools = chat.active_tools
    if not tools and response_schema(chat.response_format) is not None:
        return RESPONSE_SCHEMA_PARAM
    if len(tools) == 1 and response_schema(chat.response_format) is None:
        return f"tools[{chat.tools.index(tools[0])}].function.parameters"
    return "tools"
