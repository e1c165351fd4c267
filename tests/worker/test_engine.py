"""Continuous batching, sampling and grammars through the in-process engine on the real model."""

from __future__ import annotations

import json
import queue
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import jsonschema
import pytest
import torch
import xgrammar as xgr

from backends.worker.__main__ import parse_args
from backends.worker.engine import EngineEvent, EngineLoad, EngineRequest, SamplingParams
from backends.worker.grammar import BatchMasker, GrammarCache, GrammarError

from .conftest import DEVICE, SLOTS, chat_ids, prompt_ids, submit

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time",
    "1, 2, 3, 4,",
]


def test_batched_greedy_equals_alone(engine, checkpoint):
    alone = [
        submit(engine, f"alone-{i}", prompt_ids(checkpoint, p), max_new_tokens=12).wait()[0]
        for i, p in enumerate(PROMPTS)
    ]
    collectors = [
        submit(engine, f"batch-{i}", prompt_ids(checkpoint, p), max_new_tokens=12) for i, p in enumerate(PROMPTS)
    ]
    assert [c.wait()[0] for c in collectors] == alone


def test_seed_reproduces_sampling(engine, checkpoint):
    ids = prompt_ids(checkpoint, "Once upon a time")
    params = {"max_new_tokens": 10, "temperature": 1.0, "top_p": 0.95, "top_k": 50, "min_p": 0.02}
    first = submit(engine, "seed-a", ids, seed=1234, **params).wait()[0]
    second = submit(engine, "seed-b", ids, seed=1234, **params).wait()[0]
    others = {tuple(submit(engine, f"seed-{s}", ids, seed=s, **params).wait()[0]) for s in (1, 2, 3)}
    assert first == second
    assert len(others | {tuple(first)}) > 1


def test_max_new_tokens_finishes_with_length(engine, checkpoint):
    ids, event = submit(engine, "len", prompt_ids(checkpoint, "1, 2, 3, 4,"), max_new_tokens=3).wait()
    assert len(ids) == 3
    assert (event.finish.type, event.finish.length) == ("length", 3)


def test_stop_token_ids_end_the_request(engine, checkpoint):
    prompt = prompt_ids(checkpoint, "1, 2, 3, 4,")
    free, _ = submit(engine, "free", prompt, max_new_tokens=6).wait()
    stop = free[2]
    ids, event = submit(engine, "stop", prompt, max_new_tokens=6, stop_token_ids=[stop]).wait()
    assert ids == free[: free.index(stop) + 1]
    assert (event.finish.type, event.finish.matched) == ("stop", stop)


def test_eos_stops_unless_ignored(engine, checkpoint):
    prompt = chat_ids(checkpoint, "Say hi.")
    ids, event = submit(engine, "eos", prompt, max_new_tokens=40).wait()
    assert ids[-1] == 2 and event.finish.matched == 2
    ids, event = submit(engine, "no-eos", prompt, max_new_tokens=len(ids) + 2, ignore_eos=True).wait()
    assert event.finish.type == "length"


def test_logprobs_are_reported(engine, checkpoint):
    collector = submit(
        engine,
        "lp",
        prompt_ids(checkpoint, "The capital of France is"),
        max_new_tokens=1,
        logprobs=True,
        top_logprobs=3,
    )
    event = collector.next()
    token = event.tokens[0]
    assert token.logprob <= 0 and len(token.top) == 3
    assert token.top[0] == (token.token_id, pytest.approx(token.logprob))  # greedy picks the top one


def test_json_schema_output_validates(engine, checkpoint, grammars):
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20}, "population": {"type": "integer"}},
        "required": ["city", "population"],
        "additionalProperties": False,
    }
    grammar = grammars.compile("json_schema", json.dumps(schema))
    prompt = chat_ids(checkpoint, "Give the largest city of France and its population as JSON.")
    ids, event = submit(engine, "json", prompt, max_new_tokens=60, grammar=grammar).wait()
    assert event.finish.type == "stop"
    jsonschema.validate(json.loads(checkpoint.tokenizer.decode(ids, skip_special_tokens=True)), schema)


def test_regex_constrains_output(engine, checkpoint, grammars):
    grammar = grammars.compile("regex", r"(yes|no), [0-9]{2}")
    ids, event = submit(engine, "re", chat_ids(checkpoint, "Is water wet?"), max_new_tokens=12, grammar=grammar).wait()
    assert re.fullmatch(r"(yes|no), [0-9]{2}", checkpoint.tokenizer.decode(ids, skip_special_tokens=True))
    assert event.finish.type == "stop"


def test_structural_tag_forces_its_text(engine, checkpoint, grammars):
    tag = {"type": "structural_tag", "format": {"type": "const_string", "value": "Bonjour!"}}
    grammar = grammars.compile("structural_tag", json.dumps(tag))
    ids, event = submit(engine, "tag", chat_ids(checkpoint, "Say hi."), max_new_tokens=12, grammar=grammar).wait()
    assert checkpoint.tokenizer.decode(ids, skip_special_tokens=True) == "Bonjour!"
    assert event.finish.type == "stop"


def test_a_grammar_ending_before_min_new_tokens_ends_the_output(engine, checkpoint, grammars):
    """Once the grammar allows only the stop token, min_new_tokens yields: the step must not fail (sampled: NaN
    probabilities) nor abort (greedy: an argmax of 0), and a request beside it goes on."""
    grammar = grammars.compile("regex", "ab")
    prompt = chat_ids(checkpoint, "Say ab.")
    runs = {
        "sampled": submit(
            engine, "min-ab-s", prompt, max_new_tokens=8, temperature=0.7, seed=1, grammar=grammar, min_new_tokens=5
        ),
        "greedy": submit(engine, "min-ab-g", prompt, max_new_tokens=8, grammar=grammar, min_new_tokens=5),
        "beside": submit(engine, "min-ab-beside", prompt, max_new_tokens=6, ignore_eos=True),
    }
    results = {name: collector.wait() for name, collector in runs.items()}
    for name in ("sampled", "greedy"):
        ids, event = results[name]
        assert checkpoint.tokenizer.decode(ids, skip_special_tokens=True) == "ab"
        assert (event.finish.type, event.finish.matched) == ("stop", ids[-1]) and ids[-1] in engine.eos_token_ids
    assert results["beside"][1].finish.type == "length" and len(results["beside"][0]) == 6


def test_a_grammar_that_allows_no_token_ends_its_request_alone(engine, checkpoint, grammars):
    """A grammar can compile and still allow no token after a point (here after "ab": `dead` can neither go on nor
    end). Its all -inf row failed the whole step when sampled (NaN probabilities), aborting every request beside it;
    now it ends alone with an abort, from a decode step it shares with the request beside it."""
    dead = grammars.compile("ebnf", 'root ::= "ab" dead\ndead ::= dead')
    prompt = chat_ids(checkpoint, "Say ab.")
    beside = submit(engine, "dead-beside", prompt, max_new_tokens=24, ignore_eos=True)
    beside.next()  # running: its decode steps go on while the other request prefills and decodes
    stuck = submit(engine, "dead-grammar", prompt, max_new_tokens=8, temperature=0.7, seed=1, grammar=dead)
    ids, event = stuck.wait()
    assert checkpoint.tokenizer.decode(ids) == "ab"
    assert (event.finish.type, event.finish.message, event.error) == ("abort", "the grammar allows no next token", None)
    ids, event = beside.wait()
    assert event.finish.type == "length" and event.error is None and len(ids) == 23  # the first was taken above


def test_a_row_ends_for_what_its_grammar_allows_never_for_its_logits_values(grammars, vocabulary_info):
    """Whether a row's grammar allows no token is read from the host bitmask (reading the masked logits waited for
    the device at every grammar step on CUDA): a live grammar's row of NaN logits is not ended for its grammar."""
    vocab = vocabulary_info.vocab_size
    live = xgr.GrammarMatcher(grammars.compile("regex", "[ab]+"))
    dead = xgr.GrammarMatcher(grammars.compile("ebnf", 'root ::= "ab" dead\ndead ::= dead'))
    assert dead.accept_string("ab")  # after "ab" `dead` can neither go on nor end
    logits = torch.full((3, vocab), float("nan"), device=DEVICE)  # bench/gpu_check.sh: on CUDA
    assert BatchMasker(3, vocab).apply(logits, [live, None, dead]) == [2]
    assert logits[2].isinf().all() and logits[0].isnan().any()  # masked all the same: the dead row wholly


ROOT = Path(__file__).resolve().parents[2]
SCHEMA = '{"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}'
WORKER_START = textwrap.dedent(
    f"""
    import json, sys

    import torch

    from backends.worker import __main__ as worker
    from backends.worker.grammar import BatchMasker

    async def first_grammar_step(state, *serving):  # instead of serving: one grammar's first masked step
        import xgrammar

        compiled = state.grammars.compile("json_schema", {SCHEMA!r})
        matcher = xgrammar.GrammarMatcher(compiled)
        logits = torch.zeros((1, state.engine.model.vocab_size))
        BatchMasker(1, logits.shape[1]).apply(logits, [matcher])
        try:
            xgrammar.BatchGrammarMatcher
        except AttributeError as exc:
            left = str(exc)
        allowed = logits[0].isfinite().nonzero().flatten().tolist()
        print(json.dumps([allowed, matcher.accept_token(allowed[0]), left, "transformers" in sys.modules]))

    worker.serve = first_grammar_step
    worker.main(["--threads", "1", "--max-batch", "1", "--context-length", "64", "--grammar-compile-budget", "0"])
    """
)


def test_the_worker_loads_xgrammars_compiler_and_matcher_without_transformers(grammars, vocabulary_info):
    """Its start (`main()`) loads xgrammar's compiler and matcher, not the package's Hugging Face adapters
    (transformers: ~0.44 CPU-s, ~24 MB), and a grammar's first step masks what the whole package masks."""
    done = subprocess.run([sys.executable, "-c", WORKER_START], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    allowed, accepted, left, transformers = json.loads(done.stdout.splitlines()[-1])
    logits = torch.zeros((1, vocabulary_info.vocab_size))
    BatchMasker(1, vocabulary_info.vocab_size).apply(
        logits, [xgr.GrammarMatcher(grammars.compile("json_schema", SCHEMA))]
    )
    assert allowed == logits[0].isfinite().nonzero().flatten().tolist() and accepted
    assert "BatchGrammarMatcher is not loaded in this process" in left and not transformers


def test_grammar_cache_and_errors(grammars):
    assert grammars.compile("regex", "[a-z]+") is grammars.compile("regex", "[a-z]+")
    for kind, text in [
        ("regex", "(("),
        ("json_schema", "{not json"),
        ("ebnf", "root ::= missing"),
        ("structural_tag", '{"type": "structural_tag", "format": {"type": "nope"}}'),
    ]:
        with pytest.raises(GrammarError):
            grammars.compile(kind, text)


def test_the_grammar_cache_is_bounded_by_the_bytes_it_keeps(vocabulary_info):
    """A grammar compiled within the budget can weigh tens of MB (an enum of 15,000 strings: 54 MB): the cache
    counts xgrammar's memory_size_bytes, and always keeps the newest grammar."""
    cache = GrammarCache(vocabulary_info, capacity_bytes=1)
    first = cache.compile("regex", "[a-z]+")
    assert first.memory_size_bytes > 1 and cache.compile("regex", "[a-z]+") is first
    cache.compile("regex", "[0-9]+")
    assert cache.compile("regex", "[a-z]+") is not first  # the second pushed it out: compiled again
    assert (cache.stats.hits, cache.stats.misses) == (1, 3)


def test_abort_frees_the_slot(engine, checkpoint):
    ids = prompt_ids(checkpoint, "Once upon a time")
    long = {"max_new_tokens": 10_000, "ignore_eos": True}
    running = [submit(engine, f"hog-{i}", ids, **long) for i in range(SLOTS)]
    for collector in running:
        collector.next()  # every slot is decoding
    waiting = submit(engine, "late", ids, max_new_tokens=2)
    engine.abort("hog-0")
    _, event = running[0].wait()
    assert event.finish.type == "abort"
    late_ids, late_event = waiting.wait()  # it got the freed slot
    assert late_event.finish.type == "length" and len(late_ids) == 2
    for i in range(1, SLOTS):
        engine.abort(f"hog-{i}")
    assert all(c.wait()[1].finish.type == "abort" for c in running[1:])
    assert engine.active_requests() == 0


def test_penalties_change_the_logits_in_place(engine, checkpoint):
    ids, event = submit(
        engine,
        "penalized",
        prompt_ids(checkpoint, "1, 2, 3, 4,"),
        max_new_tokens=4,
        frequency_penalty=2.0,
        presence_penalty=2.0,
    ).wait()
    assert (event.finish.type, len(ids)) == ("length", 4)
    assert len(set(ids)) == 4  # greedy " 5, 6" repeats "," and " ": the penalties forbid it


def test_requests_on_their_way_into_free_slots_are_not_queued():
    """Two requests sent at once to an idle 2-slot worker both wait for the engine thread's next step; neither is
    queued (a worker with max_waiting 1 refused the second with 503 when the engine was slow to take the first)."""
    assert EngineLoad(running=0, waiting=2, kv_cache_usage=0.0).queued(2) == 0
    assert EngineLoad(running=1, waiting=2, kv_cache_usage=0.0).queued(2) == 1
    assert EngineLoad(running=2, waiting=1, kv_cache_usage=0.0).queued(2) == 1
    assert EngineLoad(running=0, waiting=0, kv_cache_usage=0.0).queued(2) == 0


def test_max_waiting_0_refuses_only_a_request_that_would_wait():
    """--max-waiting 0 (a gateway config's `max_waiting: 0`): no queue, but a free slot takes the request (every
    request was refused with 503, free slots or not)."""
    assert EngineLoad(running=0, waiting=0, kv_cache_usage=0.0).has_room(2, max_waiting=0)
    assert EngineLoad(running=1, waiting=0, kv_cache_usage=0.0).has_room(2, max_waiting=0)
    assert not EngineLoad(running=1, waiting=1, kv_cache_usage=0.0).has_room(2, max_waiting=0)  # that one takes it
    assert not EngineLoad(running=2, waiting=0, kv_cache_usage=0.0).has_room(2, max_waiting=0)
    assert EngineLoad(running=2, waiting=0, kv_cache_usage=0.0).has_room(2, max_waiting=1)
    assert not EngineLoad(running=2, waiting=1, kv_cache_usage=0.0).has_room(2, max_waiting=1)


@pytest.mark.parametrize(
    "flags",
    [
        ["--max-batch", "0"],
        ["--prefill-chunk", "0"],
        ["--prefill-chunk", "-5"],
        ["--context-length", "0"],
        ["--max-waiting", "-1"],
        ["--max-batch", "x"],
    ],
)
def test_sizes_that_serve_nothing_are_refused_at_start_up(flags, capsys):
    """0 slots failed every request (500), a 0-token prefill chunk hung every request, a negative one raised at
    start-up; a 0 context was taken as the model's."""
    with pytest.raises(SystemExit) as exit:
        parse_args(flags)
    assert exit.value.code == 2 and f"argument {flags[0]}: must be an integer >= " in capsys.readouterr().err


def test_a_finished_request_sees_its_decode_steps_counted(engine, checkpoint):
    """The step counters move before the step's tokens go out: the server answers a request as soon as its last
    token is emitted, and a client reading /get_server_info then must find every step of it counted."""
    before = engine.stats.decode_steps
    seen: queue.Queue[int] = queue.Queue()

    def emit(event: EngineEvent) -> None:
        if event.finish is not None:
            seen.put(engine.stats.decode_steps)  # on the engine thread, at the finishing event

    params = SamplingParams(max_new_tokens=4, temperature=0.0, ignore_eos=True)
    engine.submit(EngineRequest("counted", chat_ids(checkpoint, "Hi"), params, emit))
    assert seen.get(timeout=120) == before + 3  # the first token comes from the prefill
