"""Shared fixtures: the real embedded model, loaded once per test session."""

from __future__ import annotations

import os
import queue

import pytest
import torch
import xgrammar as xgr

from backends.base import SamplingParams
from backends.checkpoint import Checkpoint, load_checkpoint
from backends.worker.engine import Engine, EngineEvent, EngineRequest
from backends.worker.grammar import GrammarCache, tokenizer_info
from backends.worker.model import LlamaModel
from backends.worker.weights import LlamaWeights, load_weights

SLOTS = 4
DEVICE = os.environ.get("WORKER_TEST_DEVICE", "cpu")
"""The device the in-process model runs on: bench/gpu_check.sh sets `cuda`."""


@pytest.fixture(scope="session")
def checkpoint() -> Checkpoint:
    return load_checkpoint(None)


@pytest.fixture(scope="session")
def weights(checkpoint) -> LlamaWeights:
    return load_weights(checkpoint)


def _model(checkpoint: Checkpoint, weights: LlamaWeights) -> LlamaModel:
    torch.set_num_threads(2)
    return LlamaModel(weights, checkpoint.config, slots=SLOTS, context=1024, device=DEVICE)


@pytest.fixture(scope="session")
def model(checkpoint, weights) -> LlamaModel:
    """A model for tests that run the forward themselves (they write keys into its slots)."""
    return _model(checkpoint, weights)


@pytest.fixture(scope="session")
def engine(checkpoint, weights):
    """An engine on a model of its own: a test's direct forward must not overwrite the keys of sequences its
    prefix cache keeps (nor run beside its thread)."""
    engine = Engine(_model(checkpoint, weights), checkpoint.eos_token_ids, prefill_chunk=16)
    engine.start()
    yield engine
    engine.stop()


@pytest.fixture(scope="session")
def vocabulary_info(checkpoint, model) -> xgr.TokenizerInfo:
    return tokenizer_info(checkpoint, model.vocab_size)


@pytest.fixture(scope="session")
def grammars(vocabulary_info) -> GrammarCache:
    return GrammarCache(vocabulary_info)


class Collector:
    """Receives one request's engine events on a thread-safe queue."""

    def __init__(self):
        self.events: queue.Queue[EngineEvent] = queue.Queue()

    def next(self) -> EngineEvent:
        return self.events.get(timeout=120)

    def wait(self) -> tuple[list[int], EngineEvent]:
        """All token ids until the request finishes, and the finishing event."""
        ids: list[int] = []
        while True:
            event = self.next()
            ids += [t.token_id for t in event.tokens]
            if event.finish is not None:
                return ids, event


def submit(engine: Engine, rid: str, input_ids: list[int], **kwargs) -> Collector:
    """Submit a request; keyword arguments are SamplingParams fields or EngineRequest extras."""
    extras = {
        k: kwargs.pop(k) for k in ("grammar", "logprobs", "top_logprobs", "min_new_tokens", "text") if k in kwargs
    }
    kwargs.setdefault("temperature", 0.0)
    collector = Collector()
    engine.submit(EngineRequest(rid, input_ids, SamplingParams(**kwargs), collector.events.put, **extras))
    return collector


def prompt_ids(checkpoint: Checkpoint, text: str) -> list[int]:
    return checkpoint.tokenizer.encode(text).ids


def chat_ids(checkpoint: Checkpoint, user: str) -> list[int]:
    return prompt_ids(checkpoint, f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")
