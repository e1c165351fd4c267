"""The prefix cache: which slot a request takes, and outputs with the cache equal to outputs without it."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from backends.worker.prefix_cache import Placement, PrefixCache, common_prefix

from .conftest import SLOTS, chat_ids, submit


@pytest.mark.parametrize("n", [0, 1, 255, 256, 257, 700])
def test_common_prefix_across_blocks(n):
    a = list(range(800))
    b = a[:n] + [-1] + a[n + 1 :]
    assert common_prefix(a, b) == n
    assert common_prefix(a, b, limit=n // 2) == n // 2
    assert common_prefix(a, a[:n]) == n


def test_placement_prefers_an_extended_slot_then_an_empty_one_then_the_least_recently_used():
    cache = PrefixCache(3)
    cache.release(0, [1, 2, 3])
    cache.release(1, [1, 2, 9, 9])
    assert cache.place([1, 2, 3, 4, 5], [0, 1, 2], []) == Placement(0, 3)  # slot 0 holds a prefix: extend it
    cache.release(0, [1, 2, 3, 4, 5, 6])
    # Slot 1 shares two ids but holds others after them: the empty slot 2 takes the request, copying from 0.
    assert cache.place([1, 2, 3, 7], [0, 1, 2], []) == Placement(2, 3, source=0)
    cache.release(2, [8, 8, 8])
    assert cache.place([5, 5], [0, 1, 2], []) == Placement(1)  # no empty slot: slot 1 was used least recently
    assert (cache.queries, cache.hits) == (5 + 4 + 2, 3 + 3)


def test_placement_copies_from_a_running_slot_and_always_leaves_one_token_to_prefill():
    cache = PrefixCache(2)
    assert cache.place([4, 5, 6, 7], [1], running=[(0, 3)]) == Placement(1, 3, source=0)
    cache.release(1, [4, 5, 6, 7])
    assert cache.place([4, 5, 6, 7], [1], running=[]) == Placement(1, 3)  # the last token's logits are needed


def test_disabled_cache_reuses_nothing():
    cache = PrefixCache(2, enabled=False)
    cache.release(0, [1, 2, 3])
    assert cache.place([1, 2, 3, 4], [0, 1], []) == Placement(0)
    assert cache.held_tokens() == 0


@contextmanager
def prefix_cache(engine, enabled: bool):
    """Run with the engine's prefix cache on or off (the engine is idle between the tests' requests)."""
    before = engine.prefix_cache.enabled
    engine.prefix_cache.enabled = enabled
    try:
        yield
    finally:
        engine.prefix_cache.enabled = before


def outputs(engine, requests: dict[str, tuple[list[int], dict]]) -> dict[str, tuple[list[int], int]]:
    """Submit every (prompt, settings) at once (greedy): output ids and the cached tokens reported, by name."""
    collectors = {name: submit(engine, name, ids, **settings) for name, (ids, settings) in requests.items()}
    results = {}
    for name, collector in collectors.items():
        out, event = collector.wait()
        results[name] = (out, event.cached_tokens)
    return results


QUESTIONS = [
    "What is the capital of France?",
    "Name a prime number.",
    "Say a colour.",
    "Count to three.",
    "What is two plus two?",
]


def test_outputs_with_the_cache_equal_outputs_without(engine, checkpoint, grammars):
    """Agent turns (extended prefixes), partial matches, copies from a running slot, evictions and a grammar."""
    turn1 = chat_ids(checkpoint, QUESTIONS[0])
    short = {"max_new_tokens": 2}
    regex = {"max_new_tokens": 2, "grammar": grammars.compile("regex", r"(yes|no)\.")}
    with prefix_cache(engine, False):
        first = outputs(engine, {"ref-turn1": (turn1, short)})["ref-turn1"][0]
        turn2 = turn1 + first + chat_ids(checkpoint, "And of Italy?")
        requests = {f"ref-{q}": (chat_ids(checkpoint, q), short) for q in QUESTIONS}
        expected = outputs(engine, {**requests, "ref-turn2": (turn2, short), "ref-re": (turn2, regex)})
    assert all(cached == 0 for _, cached in expected.values())

    with prefix_cache(engine, True):
        assert outputs(engine, {"t1": (turn1, short)})["t1"][0] == first
        turn = outputs(engine, {"t2": (turn2, short)})["t2"]
        assert turn == (expected["ref-turn2"][0], len(turn1) + len(first) - 1)  # the last sampled id had no KV
        assert outputs(engine, {"re": (turn2, regex)})["re"] == (expected["ref-re"][0], len(turn2) - 1)
        # Every question shares the chat template's opening with the cached turns: partial matches, and with
        # more questions than slots, evictions; submitted together, later ones copy from running slots.
        together = outputs(engine, {q: (chat_ids(checkpoint, q), short) for q in QUESTIONS})
    assert [together[q][0] for q in QUESTIONS] == [expected[f"ref-{q}"][0] for q in QUESTIONS]
    assert all(0 < together[q][1] < len(chat_ids(checkpoint, q)) for q in QUESTIONS)
    assert len(QUESTIONS) > SLOTS


def test_a_cancelled_request_leaves_a_usable_prefix(engine, checkpoint):
    prompt = chat_ids(checkpoint, "Tell me a long story about a cat.")
    with prefix_cache(engine, False):
        expected = outputs(engine, {"ref-story": (prompt, {"max_new_tokens": 3})})["ref-story"][0]
    with prefix_cache(engine, True):
        story = submit(engine, "story", prompt, max_new_tokens=1000, ignore_eos=True)
        story.next()
        engine.abort("story")
        assert story.wait()[1].finish.type == "abort"
        again = outputs(engine, {"story-again": (prompt, {"max_new_tokens": 3})})["story-again"]
    assert again == (expected, len(prompt) - 1)
