"""A conformance adapter over a family's real vocabulary: recorded ids decoded by the gateway's own Detokenizer."""

from __future__ import annotations

from collections.abc import Collection
from functools import cached_property

from canitoolcall.adapters.base import ReplayInput
from tokenizers import Tokenizer

from backends.detokenizer import Detokenizer
from tests.conformance.common import GatewayAdapter, PieceSource


class VocabularyAdapter(GatewayAdapter):
    """Subclasses give `load_tokenizer` (the converted vocabulary); units are the recorded ids (else the encoding of
    the text), every added token is special, and Pieces come from `backends.detokenizer.Detokenizer`."""

    def load_tokenizer(self) -> Tokenizer:
        raise NotImplementedError

    @cached_property
    def tokenizer(self) -> Tokenizer:
        return self.load_tokenizer()

    @cached_property
    def added_tokens(self) -> dict[int, str]:
        return {i: t.content for i, t in self.tokenizer.get_added_tokens_decoder().items()}

    def units(self, raw: ReplayInput) -> list[int]:
        if raw.token_ids is not None:
            return list(raw.token_ids)
        return self.tokenizer.encode(raw.text, add_special_tokens=False).ids

    def special_token_ids(self, raw: ReplayInput) -> Collection[int]:
        return set(self.added_tokens)

    def pieces(self, raw: ReplayInput) -> PieceSource:
        return Detokenizer(self.tokenizer, self.added_tokens)
