"""A served model: its family, prompt encoder and backend, looked up by id."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import cached_property

from backends.base import Backend
from backends.checkpoint import Checkpoint
from gateway.errors import APIError
from gateway.families import get_family
from gateway.families.base import Family, FamilyContext
from gateway.grammars.budget import GrammarBudget
from gateway.grammars.compat import OLDEST_PINNED
from gateway.models.slots import ChoiceSlots
from gateway.observability.requests import note_model, note_shielded
from gateway.prompts.encoding import PromptEncoder
from gateway.prompts.shield import Shielder
from gateway.types import ChatRequest


class PromptPastContext(Exception):
    """A rendered prompt its length in characters proves longer than the context, refused before it is encoded."""

    def __init__(self, at_least: int):
        super().__init__(f"the prompt has at least {at_least} tokens")
        self.at_least = at_least


@dataclass
class ServedModel:
    """Everything the gateway needs to serve one model id."""

    id: str
    family: Family
    encoder: PromptEncoder
    backend: Backend | None
    context_length: int
    default_max_tokens: int | None = None
    """max_tokens of a request that names none; None: all the context leaves."""
    grammar_target: str = OLDEST_PINNED
    """The backend's xgrammar version: grammars with features it would ignore are refused."""
    grammar_budget: GrammarBudget | None = None
    """Builds and compiles grammars in child processes under a CPU budget (None: built here, unbounded)."""
    choice_slots: ChoiceSlots | None = None
    """The backends' slots, counted per choice without tenant policies (None: not known, not counted)."""
    eos_token_id: int | None = None
    """The tokenizer's EOS token, the one stop token vLLM names no `stop_reason` for: the checkpoint's
    (`Checkpoint.eos_token_id`, which the worker's vLLM API reads too), never looked up a second way."""
    shielder: Shielder = field(init=False)
    created: int = field(default_factory=lambda: int(time.time()))

    def __post_init__(self) -> None:
        self.shielder = Shielder(self.encoder.added)

    @property
    def tokenizer(self):  # tokenizers.Tokenizer
        return self.encoder.tokenizer

    @cached_property
    def added_ids(self) -> dict[int, str]:
        """Added-token id → its exact spelling (what the detokenizer emits as a token Piece)."""
        return {i: spelling for spelling, i in self.encoder.added.items()}

    @cached_property
    def vocab_size(self) -> int:
        """The tokenizer's ids, added tokens included: a backend's output id outside them is a broken answer."""
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        """The family's stop ids in this vocabulary (`Family.stop_ids`: looked up once, not per request)."""
        return self.family.stop_ids

    def encode_chat(self, request: ChatRequest, past_context_ok: bool = False) -> tuple[str, list[int]]:
        """The rendered prompt and exactly the ids the backend receives; PromptPastContext, before encoding, for a
        prompt whose length alone proves it past the context (unless `past_context_ok`: /tokenize counts it)."""
        shielded, shield = self.shielder.shield(request, self.family.keep_in_assistant)
        note_shielded(len(shield.originals))
        text = self.family.render(shielded)
        prompt = shield.restore(text)
        if not past_context_ok and len(prompt) >= self.context_length:  # (shorter proves nothing: most prompts)
            at_least = self.least_tokens(prompt)
            if at_least is not None:
                raise PromptPastContext(at_least)
        ids = self.encoder.encode_prompt(text, shield, add_special_tokens=request.add_special_tokens)
        return prompt, ids

    def least_tokens(self, text: str) -> int | None:
        """The fewest tokens `text` encodes into when its length in characters alone proves that past the context
        (backends/prompt_text.py), else None: a text shorter than the context proves nothing, so costs one `len`."""
        if len(text) < self.context_length or (bound := self.encoder.text_bound) is None:
            return None
        at_least = bound.least_tokens(text)
        return at_least if at_least >= self.context_length else None

    def count_tokens(self, text: str) -> int:
        """The tokens of `text` encoded alone (added tokens matched): how usage counts a choice's reasoning."""
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        """Text of `ids`, added tokens spelled out."""
        return self.tokenizer.decode(ids, skip_special_tokens=False)


def served_model_from_checkpoint(
    model_id: str,
    checkpoint: Checkpoint,
    family: str,
    backend: Backend | None,
    options: dict | None = None,
    default_max_tokens: int | None = None,
) -> ServedModel:
    """Build a ServedModel for a checkpoint served by `backend` (None: tokenize-only)."""
    context = FamilyContext(
        tokenizer=checkpoint.tokenizer,
        chat_template=checkpoint.chat_template,
        bos_token=checkpoint.bos_token,
        eos_token=checkpoint.eos_token,
        eos_token_ids=checkpoint.eos_token_ids,
        control_token_ids=checkpoint.control_token_ids,
        options=dict(options or {}),
        special_tokens=dict(checkpoint.special_tokens),
    )
    return ServedModel(
        id=model_id,
        family=get_family(family)(context),
        encoder=PromptEncoder(checkpoint.tokenizer),
        backend=backend,
        context_length=checkpoint.config.context_length,
        eos_token_id=checkpoint.eos_token_id,
        default_max_tokens=default_max_tokens,
    )


def served_model(registry: ModelRegistry, model_id: str) -> ServedModel:
    """The model `model_id` (noted on the request's record); 404 `model_not_found` when this registry has none."""
    model = registry.get(model_id)
    if model is None:
        raise APIError(f"the model {model_id!r} does not exist", status=404, param="model", code="model_not_found")
    note_model(model.id)
    return model


class ModelRegistry:
    """The models this gateway serves, by id; `background`: tasks to run while it serves (worker supervision)."""

    def __init__(self, models: list[ServedModel], background: list[Callable[[], Awaitable[None]]] | None = None):
        self._models = {m.id: m for m in models}
        self.background = list(background or [])

    def get(self, model_id: str) -> ServedModel | None:
        return self._models.get(model_id)

    def __iter__(self):
        return iter(self._models.values())

    async def close(self) -> None:
        for m in self._models.values():
            if m.backend is not None:
                await m.backend.close()
