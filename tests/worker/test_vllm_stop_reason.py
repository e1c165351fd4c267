"""The worker's vLLM API names the stop token that ended a completion as vLLM does."""

from __future__ import annotations

from dataclasses import replace

import orjson
import pytest

from backends.worker.engine import Engine, EngineEvent, Finish
from backends.worker.generations import WorkerState
from backends.worker.vllm_api import parse_completion

END_OF_TEXT = 0
"""SmolLM2's `<|endoftext|>`: an end token of the config here, not the tokenizer's EOS (`<|im_end|>`)."""


@pytest.fixture(scope="module")
def state(checkpoint, model, grammars) -> WorkerState:
    """A worker whose model config ends on `<|endoftext|>` too (as a generation config's extra EOS would)."""
    ends = [checkpoint.eos_token_id, END_OF_TEXT]
    return WorkerState(replace(checkpoint, eos_token_ids=ends), Engine(model, ends), grammars, model_path="test")


def _finishing_choice(state: WorkerState, finish: Finish, **sampling) -> dict:
    body = {"prompt": [1, 2, 3], "stream": True, "max_tokens": 4, **sampling}
    frame = parse_completion(body, state).frames(EngineEvent([], finish))
    return orjson.loads(frame.removeprefix(b"data: "))["choices"][0]


def test_stop_reason_is_null_only_for_the_tokenizers_eos(state):
    eos = state.checkpoint.eos_token_id
    assert _finishing_choice(state, Finish("stop", eos))["stop_reason"] is None
    assert _finishing_choice(state, Finish("stop", END_OF_TEXT))["stop_reason"] == END_OF_TEXT
    assert _finishing_choice(state, Finish("stop", 7), stop_token_ids=[7])["stop_reason"] == 7
    assert _finishing_choice(state, Finish("stop", eos), ignore_eos=True, stop_token_ids=[eos])["stop_reason"] == eos
    assert _finishing_choice(state, Finish("length"))["stop_reason"] is None
