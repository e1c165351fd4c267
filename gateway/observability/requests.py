"""What one HTTP request did, filled in as it goes (model, tokens, first token, replica) and read when it ends.

The record lives in a context variable set by the observability middleware, so code deep in a request
(the router, the shielder) can note things without being handed it; outside a request every `note_*`
call does nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field

from gateway.types import ChoiceStep


@dataclass(eq=False)
class RequestRecord:
    """One request's facts for the metrics and the access line; times are `time.perf_counter()` values."""

    method: str
    path: str
    started: float = field(default_factory=time.perf_counter)
    request_id: str = ""
    status: int = 0
    model: str = ""
    tenant: str = ""
    generating: bool = False
    """A generation endpoint reached its backend stage (counted as running until the request ends)."""
    dispatched: float | None = None
    """When the first backend attempt was sent."""
    replica: str = ""
    """The replica of the latest backend attempt (the one that answered, once it did)."""
    failed_over: tuple[str, ...] = ()
    """Replicas that failed this request before any output, each then left for another (in order)."""
    first_token: float | None = None
    last_token: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    finish_reasons: list[str] = field(default_factory=list)
    shielded: int = 0
    grammar_seconds: float | None = None
    grammar_compile_seconds: float | None = None
    """CPU time the request's grammar took to compile under the budget (None: not compiled for it)."""
    grammar_cache: str = ""
    """What the compile budget's cache did: "hit", "miss" (compiled) or "over_budget"; "" when not consulted."""
    trace_id: str = ""
    """From the client's W3C traceparent, when it sent one."""
    error: str = ""
    """The code (else the type) of the error the answer carried, a stream's error event after its 200 included."""
    client_closed: bool = False
    """The client left while its stream was being sent (the status stays the 200 it was sent)."""
    ignored_fields: tuple[str, ...] = ()
    """Top-level body fields the door does not declare, ignored (at most `IGNORED_SHOWN`, each cut to 64 characters)."""


_current: ContextVar[RequestRecord | None] = ContextVar("gateway_request", default=None)


def current_request() -> RequestRecord | None:
    """The record of the request being served in this context, if any."""
    return _current.get()


def begin_request(record: RequestRecord) -> object:
    """Make `record` the current one; returns the token `end_request` takes."""
    return _current.set(record)


def end_request(token: object) -> None:
    _current.reset(token)  # type: ignore[arg-type]


def note_model(model_id: str) -> None:
    """The request names this served model."""
    record = _current.get()
    if record is not None:
        record.model = model_id


def note_tenant(tenant: str) -> None:
    """The request was authenticated as this tenant (the policies code calls this once it knows)."""
    record = _current.get()
    if record is not None:
        record.tenant = tenant


def note_error(code: str) -> None:
    """The answer carries an error with this code (or type)."""
    record = _current.get()
    if record is not None:
        record.error = code


IGNORED_SHOWN = 8
"""Ignored field names a record keeps: the access line stays short whatever a body holds."""


def note_ignored_fields(names: list[str]) -> None:
    """The body held these top-level fields (the first `IGNORED_SHOWN`), which its door does not declare and ignores."""
    record = _current.get()
    if record is not None:
        record.ignored_fields = tuple(name[:64] for name in names)


def note_client_closed() -> None:
    """The client left while its stream was being sent."""
    record = _current.get()
    if record is not None:
        record.client_closed = True


def note_shielded(count: int) -> None:
    """`count` distinct added-token spellings in the client's strings were shielded."""
    record = _current.get()
    if record is not None and count:
        record.shielded += count


def note_dispatch(replica: str) -> None:
    """A backend attempt is being sent to `replica` (the first one sets the gateway-overhead end point)."""
    record = _current.get()
    if record is not None:
        if record.dispatched is None:
            record.dispatched = time.perf_counter()
        record.replica = replica


def note_failover(replica: str) -> None:
    """The attempt on `replica` failed before any output and the request moves to another replica."""
    record = _current.get()
    if record is not None:
        record.failed_over += (replica,)


def note_grammar(seconds: float) -> None:
    """Building the request's grammar took `seconds`."""
    record = _current.get()
    if record is not None:
        record.grammar_seconds = seconds


def note_grammar_compile(seconds: float | None, cache: str) -> None:
    """The compile budget compiled the request's grammar in `seconds` of CPU (None: not compiled), `cache` saying
    how its cache answered."""
    record = _current.get()
    if record is not None:
        record.grammar_compile_seconds = seconds
        record.grammar_cache = cache


def note_usage(usage: dict) -> None:
    """The request's token totals, as its `usage` object says them."""
    record = _current.get()
    if record is not None:
        record.prompt_tokens = usage.get("prompt_tokens", 0)
        record.completion_tokens = usage.get("completion_tokens", 0)
        record.cached_tokens = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)


def step_notes() -> Callable[[ChoiceStep], None]:
    """What the answer's loop calls with each step it sends: notes the first and last output times and each
    choice's finish reason (a plain call, not a layer of its own between the steps and the answer); outside a
    request it does nothing."""
    record = _current.get()
    if record is None:
        return _ignore
    record.generating = True

    def note(step: ChoiceStep) -> None:
        now = time.perf_counter()
        if record.first_token is None:
            record.first_token = now
        record.last_token = now
        if step.finish_reason is not None:
            record.finish_reasons.append(step.finish_reason)

    return note


def _ignore(step: ChoiceStep) -> None:
    pass
