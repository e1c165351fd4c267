"""Backend token logprobs in OpenAI's chat and legacy completions shapes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from tokenizers import Tokenizer, decoders

from backends.base import LOGPROB_FLOOR, TokenLogprob
from backends.detokenizer import check_token_id

"""What OpenAI reports for a probability of zero (JSON has no -inf)."""


def _byte_level_alphabet() -> dict[str, int]:
    """Byte-level BPE spells byte b as itself when printable, else as chr(256 + rank among the others)."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    others = [b for b in range(256) if b not in printable]
    table = {chr(b): b for b in printable}
    table.update({chr(256 + i): b for i, b in enumerate(others)})
    return table


_BYTE_LEVEL = _byte_level_alphabet()


class TokenTexts:
    """The exact bytes, and the text, of single tokens of one tokenizer."""

    def __init__(self, tokenizer: Tokenizer, added: Mapping[int, str]):
        self._tokenizer = tokenizer
        self._added = added
        self._byte_level = isinstance(tokenizer.decoder, decoders.ByteLevel)
        self._size = tokenizer.get_vocab_size(with_added_tokens=True)
        self.bytes = lru_cache(maxsize=65536)(self._bytes)

    def _bytes(self, token_id: int) -> bytes:
        spelling = self._added.get(token_id)
        if spelling is not None:
            return spelling.encode()
        check_token_id(token_id, self._size)  # a 502, as in the output text (a candidate id a backend made up)
        token = self._tokenizer.id_to_token(token_id)
        if token is None:
            return b""
        if self._byte_level and all(c in _BYTE_LEVEL for c in token):
            return bytes(_BYTE_LEVEL[c] for c in token)
        return self._tokenizer.decode([token_id], skip_special_tokens=False).encode()

    def text(self, token_id: int) -> str:
        return self.bytes(token_id).decode("utf-8", "replace")


def _logprob(value: float) -> float:
    return max(value, LOGPROB_FLOOR)


def chat_logprobs(entries: Sequence[TokenLogprob], texts: TokenTexts) -> list[dict[str, Any]]:
    """`choices[].logprobs.content` items."""

    def one(token_id: int, logprob: float) -> dict[str, Any]:
        raw = texts.bytes(token_id)
        return {"token": raw.decode("utf-8", "replace"), "logprob": _logprob(logprob), "bytes": list(raw)}

    return [{**one(e.token_id, e.logprob), "top_logprobs": [one(i, lp) for i, lp in e.top]} for e in entries]


def completion_logprobs(entries: Sequence[TokenLogprob], texts: TokenTexts, offset: int) -> dict[str, Any]:
    """A legacy `choices[].logprobs` object; `offset` is the text offset of the first entry."""
    tokens, offsets = [], []
    for e in entries:
        tokens.append(texts.text(e.token_id))
        offsets.append(offset)
        offset += len(tokens[-1])
    return {
        "tokens": tokens,
        "token_logprobs": [_logprob(e.logprob) for e in entries],
        "top_logprobs": [{texts.text(i): _logprob(lp) for i, lp in e.top} for e in entries],
        "text_offset": offsets,
    }
