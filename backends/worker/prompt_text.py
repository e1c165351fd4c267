"""A `text` prompt's token ids, refused unencoded when its length in characters already proves it past the context
(backends/prompt_text.py: the bound)."""

from __future__ import annotations

from tokenizers import Tokenizer

from backends.prompt_text import TextBound
from backends.worker.protocol import ProtocolError


def encode_prompt_text(tokenizer: Tokenizer, text: str, context_length: int, bound: TextBound | None) -> list[int]:
    """The ids of `text` (no special tokens added), by tokenizers' batch call, which releases the GIL (`encode`
    holds it: a long text stalled the event loop and the engine thread for seconds); ProtocolError, without
    encoding, for a text longer in characters than `context_length - 1` tokens can stand for."""
    if bound is not None and (at_least := bound.least_tokens(text)) >= context_length:
        raise ProtocolError(
            f"the prompt has at least {at_least} tokens ({bound.counted(text)} characters, at most "
            f"{bound.chars_per_token} per token); this model's context length is {context_length}"
        )
    return tokenizer.encode_batch_fast([text], add_special_tokens=False)[0].ids
