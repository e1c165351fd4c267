"""The typed read of SGLang's and vLLM's stream events (backends/typed_event.py) against the general read.

Each reader is run twice on the same lines: as it is, and with its typed read turned off (every line then goes
through `stream_event`, orjson and the dict reads the readers had before). Every line must give the same chunks, or
the same error, and leave the same state, whatever the event holds: well-formed events of every shape the readers
take, fields of the wrong type, integers past int64 and uint64, invalid UTF-8, cut or garbled JSON, `error` events.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backends import sglang, vllm
from backends.base import BackendError, GenerateRequest, SamplingParams
from backends.typed_event import typed_event

UNTIMED = [HealthCheck.too_slow, HealthCheck.data_too_large]
"""No check that depends on the machine's speed (nor on how much one case draws): the verdict is the code's."""
INTS = st.one_of(
    st.integers(-3, 300),
    st.sampled_from([2**31, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**70, -(2**63), -(2**63) - 1]),
)
ODD = st.one_of(st.none(), st.booleans(), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=3))


def mostly(usual: st.SearchStrategy, odd: st.SearchStrategy) -> st.SearchStrategy:
    """`usual` 19 draws in 20, else `odd` (most events well-formed, so that many take the typed read)."""
    return st.integers(0, 19).flatmap(lambda k: usual if k else odd)


COUNT = mostly(st.integers(0, 300), st.one_of(INTS, ODD))
IDS = mostly(st.lists(st.integers(0, 300), max_size=4), st.one_of(st.lists(st.one_of(INTS, ODD), max_size=3), ODD))
EXTRA = st.dictionaries(
    st.sampled_from(["text", "id", "e2e_latency", "weight_version", "x"]),
    st.one_of(INTS, ODD, st.text(), st.lists(INTS, max_size=2)),
    max_size=3,
)


def _maybe(draw: st.DrawFn, fields: dict[str, object]) -> dict[str, object]:
    """`fields`, each kept 19 times in 20 (else absent, not null)."""
    return {k: v for k, v in fields.items() if draw(st.integers(0, 19))}


@st.composite
def sglang_events(draw: st.DrawFn) -> object:
    finish = st.fixed_dictionaries(
        {"type": mostly(st.sampled_from(["stop", "length"]), st.sampled_from(["abort", "other"]))},
        optional={"matched": st.one_of(INTS, ODD), "status_code": COUNT, "message": ODD, "length": COUNT},
    )
    entry = mostly(st.tuples(st.floats(-9, 0), st.integers(0, 300), st.none()).map(list), st.one_of(INTS, ODD))
    logprobs = st.one_of(st.none(), mostly(st.lists(entry, max_size=3), ODD))
    meta = {
        "finish_reason": draw(mostly(st.one_of(st.none(), finish), ODD)),
        "prompt_tokens": draw(COUNT),
        "completion_tokens": draw(COUNT),
        "cached_tokens": draw(COUNT),
        "output_token_logprobs": draw(st.one_of(st.none(), logprobs)),
        "output_top_logprobs": draw(st.one_of(st.none(), st.lists(st.one_of(st.none(), st.lists(entry)), max_size=3))),
    }
    event = {"output_ids": draw(IDS), "meta_info": draw(mostly(st.just(_maybe(draw, meta)), ODD))}
    event = {**draw(EXTRA), **_maybe(draw, event)}
    if not draw(st.integers(0, 9)):
        event["error"] = draw(st.one_of(st.none(), st.fixed_dictionaries({"message": st.text(max_size=5)})))
    return event


@st.composite
def vllm_events(draw: st.DrawFn) -> object:
    logprobs = st.one_of(
        st.none(),
        st.fixed_dictionaries(
            {},
            optional={
                "token_logprobs": st.lists(mostly(st.floats(-9, 0), ODD), max_size=3),
                "top_logprobs": st.lists(
                    st.dictionaries(st.sampled_from(["token_id:5", "token_id:7", "5"]), st.floats(-9, 0))
                ),
                "content": st.lists(
                    st.fixed_dictionaries({"token_id": COUNT, "logprob": st.floats(-9, 0)}), max_size=3
                ),
            },
        ),
        ODD,
    )
    choice = {
        "index": draw(mostly(st.just(0), st.one_of(INTS, ODD))),
        "token_ids": draw(IDS),
        "finish_reason": draw(
            mostly(st.one_of(st.none(), st.sampled_from(["stop", "length"])), st.sampled_from(["abort", "x", 1]))
        ),
        "stop_reason": draw(st.one_of(st.none(), COUNT, st.text(max_size=2))),
        "logprobs": draw(logprobs),
        "text": draw(st.text(max_size=3)),
    }
    choices = draw(mostly(st.just([_maybe(draw, choice)]), st.lists(st.just(choice), max_size=2)))
    event = {**draw(EXTRA), **_maybe(draw, {"choices": choices})}
    if draw(st.booleans()):
        event["usage"] = draw(st.one_of(st.none(), st.fixed_dictionaries({"prompt_tokens": INTS})))
    if not draw(st.integers(0, 9)):
        event["error"] = draw(st.fixed_dictionaries({"message": st.text(max_size=5), "code": COUNT}))
    return event


@st.composite
def lines(draw: st.DrawFn, events: st.SearchStrategy[object]) -> bytes:
    """One SSE line of `events`, as a server may write it, or (3 in 16) garbled."""
    data = json.dumps(draw(events), ensure_ascii=draw(st.booleans())).encode()
    form = draw(st.integers(0, 15))
    if form == 0 and data:  # cut short
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif form == 1:  # a byte replaced (invalid UTF-8, a stray character)
        at = draw(st.integers(0, len(data)))
        data = (
            data[:at] + draw(st.sampled_from([b"\xff", b"\xed\xa0\x80", b",", b"}", b"\x0c", b"\\"])) + data[at + 1 :]
        )
    elif form == 2:
        data = draw(st.sampled_from([b"[DONE]", b" [DONE] ", b"[1]", b"null", b"", b"1e400", b'{"a":1}{}']))
    prefix = draw(mostly(st.sampled_from([b"data: ", b"data:"]), st.sampled_from([b"event: ", b""])))
    return prefix + data + draw(mostly(st.just(b""), st.sampled_from([b" ", b"\r", b"\x0c"])))


class _GeneralSGLang(sglang._StreamReader):
    def _typed_chunk(self, event: object) -> None:
        return None  # every line through stream_event and the dict reads


class _GeneralVLLM(vllm._StreamReader):
    def _typed_chunks(self, event: object) -> None:
        return None


def _outcome(read, line: bytes) -> tuple[str, object]:
    try:
        return "chunks", read(line)
    except BackendError as e:  # the same exception, message, status and retryability on both reads
        return "error", (type(e), str(e), getattr(e, "status", None), getattr(e, "retryable", None))


def _same_reads(typed, general, stream: list[bytes], read: str, state: list[str]) -> None:
    for line in stream:
        outcome = _outcome(getattr(typed, read), line)
        assert outcome == _outcome(getattr(general, read), line), line
        assert [getattr(typed, s) for s in state] == [getattr(general, s) for s in state], line
        if outcome[0] == "error":
            return


@pytest.mark.parametrize("incremental", [True, False])
@settings(max_examples=200, deadline=None, suppress_health_check=UNTIMED)
@given(stream=st.lists(lines(sglang_events()), min_size=1, max_size=4))
def test_sglang_typed_read_reads_as_the_general_read(incremental: bool, stream: list[bytes]) -> None:
    typed, general = sglang._StreamReader(incremental), _GeneralSGLang(incremental)
    _same_reads(typed, general, stream, "chunks", ["done", "finished", "_seen_ids", "_seen_logprobs"])


@pytest.mark.parametrize("api", ["completions", "generate"])
@settings(max_examples=200, deadline=None, suppress_health_check=UNTIMED)
@given(stream=st.lists(lines(vllm_events()), min_size=1, max_size=4), top=st.integers(0, 2))
def test_vllm_typed_read_reads_as_the_general_read(api: vllm.VLLMApi, stream: list[bytes], top: int) -> None:
    request = GenerateRequest("r", [1, 2, 3], SamplingParams(max_new_tokens=8), logprobs=top > 0, top_logprobs=top)
    typed, general = vllm._StreamReader(api, request), _GeneralVLLM(api, request)
    _same_reads(typed, general, stream, "line", ["done", "_completion_tokens", "_last_id", "_finished"])


SGLANG_EVENTS = [
    # the bench stand-in's event, then SGLang 0.5.23's (tokenizer_manager's meta_info), then its finish
    (
        b'data: {"text":"","output_ids":[4219],"meta_info":{"id":"chatcmpl-0-0","finish_reason":null,'
        b'"prompt_tokens":31,"completion_tokens":7,"cached_tokens":0}}'
    ),
    (
        b'data: {"text":" th\xc3\xa9","output_ids":[4219],"meta_info":{"id":"4b1d8c6e2f0a4c7e","finish_reason":null,'
        b'"prompt_tokens":31,"weight_version":"default","num_retractions":0,"reasoning_tokens":0,"completion_tokens":8,'
        b'"cached_tokens":0}}'
    ),
    (
        b'data: {"text":".","output_ids":[2],"meta_info":{"id":"4b1d8c6e2f0a4c7e","finish_reason":{"type":"stop",'
        b'"matched":2},"prompt_tokens":31,"completion_tokens":9,"cached_tokens":4,"e2e_latency":0.52}}'
    ),
]
VLLM_EVENT = (
    b'data: {"id":"cmpl-1","object":"text_completion","created":1733140000,"model":"m","choices":[{"index":0,'
    b'"text":" the","logprobs":null,"finish_reason":null,"stop_reason":null,"token_ids":[4219],'
    b'"prompt_logprobs":null,"prompt_token_ids":null}],"usage":null}'
)


def test_a_servers_usual_events_take_the_typed_read() -> None:
    """The events SGLang and vLLM write for each token are read typed (the comparison above is not all fallbacks)."""
    reader = sglang._StreamReader(incremental=True)
    for line in SGLANG_EVENTS:
        event = typed_event(line, sglang._decode)
        assert event is not None and reader._typed_chunk(event) is not None
    request = GenerateRequest("r", [1, 2, 3], SamplingParams(max_new_tokens=8))
    event = typed_event(VLLM_EVENT, vllm._decode)
    assert event is not None and vllm._StreamReader("completions", request)._typed_chunks(event) is not None


def test_an_unread_number_past_a_doubles_range_is_skipped() -> None:
    """The one difference (backends/typed_event.py): orjson refuses `1e400` anywhere, the typed read skips it in a
    field no reader uses."""
    line = b'data: {"output_ids":[5],"meta_info":{"e2e_latency":1e400,"completion_tokens":1}}'
    assert sglang._StreamReader(incremental=True).chunks(line)[0].output_ids == [5]
    with pytest.raises(sglang.MalformedStream, match="invalid JSON"):
        _GeneralSGLang(incremental=True).chunks(line)
