"""Turn a growing list of output ids into text deltas without splitting multi-byte characters."""

from __future__ import annotations

from tokenizers import Tokenizer


class IncrementalDetokenizer:
    """Decodes only a short window of recent tokens per push, so streaming stays linear."""

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = True):
        self._tokenizer = tokenizer
        self._skip_special = skip_special_tokens
        self._ids: list[int] = []
        self._prefix_start = 0  # window start: decoded context that was already emitted
        self._emitted_end = 0  # ids before this index have been emitted as text

    def push(self, ids: list[int], final: bool = False) -> str:
        """Append ids and return the newly completed text (all of it when `final`)."""
        self._ids.extend(ids)
        prefix = self._decode(self._ids[self._prefix_start : self._emitted_end])
        full = self._decode(self._ids[self._prefix_start :])
        if full.endswith("\ufffd") and not final:
            return ""  # an unfinished UTF-8 sequence: wait for its next bytes
        self._prefix_start, self._emitted_end = self._emitted_end, len(self._ids)
        return full[len(prefix) :]

    def _decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=self._skip_special) if ids else ""
