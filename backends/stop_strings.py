"""Stop strings matched on detokenized text across token and chunk boundaries (the gateway's and the worker's).

Text that might be the start of a stop string is held back until it either
completes one (the output ends before it) or cannot (it is released), so a stop
string never leaks into content. Stop strings match ordinary text only: an
added/control token piece passes through untouched and releases what was held,
since no stop string can continue across it (stop tokens are stop_token_ids).
Held text is shorter than the longest stop string, so each piece costs time
bounded by the stop strings, not by the output's length.
"""

from __future__ import annotations

from collections.abc import Sequence

from backends.detokenizer import Piece


class StopMatcher:
    """Cuts one choice's pieces at the first stop string."""

    def __init__(self, stops: Sequence[str]):
        self._stops = [s for s in stops if s]
        self._held = ""
        self.matched: str | None = None

    def feed(self, pieces: Sequence[Piece], armed: bool = True) -> list[Piece]:
        """The pieces that are certain; after a match (see `matched`) nothing more is returned.

        Unarmed (vLLM's min_tokens not reached yet), no stop string may end in the new text; one that starts
        there and ends in text fed armed still counts.
        """
        if not self._stops:
            return list(pieces)
        out: list[Piece] = []
        for piece in pieces:
            if self.matched is not None:
                break
            if piece.token_id is not None:
                out += self.flush()
                out.append(piece)
                continue
            text = self._held + piece.text
            # A match ending inside the held text was seen before (or was unarmed): look past it.
            cut = self._first_match(text, len(self._held)) if armed else None
            if cut is not None:
                self._held = ""
                _emit(out, text[:cut])
                continue
            keep = held_prefix(text, self._stops)
            self._held = text[len(text) - keep :]
            _emit(out, text[: len(text) - keep])
        return out

    def flush(self) -> list[Piece]:
        """Release held text: the output ended (or a control token came) without completing a stop string."""
        out: list[Piece] = []
        _emit(out, self._held)
        self._held = ""
        return out

    def _first_match(self, text: str, seen: int) -> int | None:
        """Where the first stop string ending after text[:seen] starts (and set `matched`), or None."""
        best: int | None = None
        for stop in self._stops:
            i = text.find(stop, max(seen - len(stop) + 1, 0))
            if i >= 0 and (best is None or i < best):
                best, self.matched = i, stop
        return best


def held_prefix(text: str, strings: Sequence[str]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of one of `strings` (non-empty): the text to
    hold back. Such a suffix starts with its string's first character, which the last few characters rarely hold:
    then one `find` per string decides."""
    longest = 0
    for string in strings:
        at = text.find(string[0], max(len(text) - len(string) + 1, 0))
        while at >= 0 and len(text) - at > longest:
            if string.startswith(text[at:]):
                longest = len(text) - at
                break
            at = text.find(string[0], at + 1)
    return longest


def _emit(out: list[Piece], text: str) -> None:
    if text:
        out.append(Piece(text))
