"""A request's output text on the engine thread, for requests with stop strings.

The engine must stop on the token that completes a stop string (SGLang checks them in its scheduler too),
so such a request's tokens are detokenized where they are sampled, one at a time, and cut by the shared
StopMatcher; the engine's events then carry the text, and the HTTP side does not detokenize again.
"""

from __future__ import annotations

from collections.abc import Sequence

from backends.detokenizer import Detokenizer, Piece
from backends.stop_strings import StopMatcher


class OutputText:
    """Detokenizes one request's output token by token and finds its first stop string."""

    def __init__(
        self, detokenizer: Detokenizer, stops: Sequence[str], *, keep_stop: bool = False, unarmed_tokens: int = 0
    ):
        """`keep_stop`: the matched stop (string or token) stays in the text (SGLang's no_stop_trim, vLLM's
        include_stop_str_in_output); no stop string may end in the text of the first `unarmed_tokens` tokens
        (vLLM's min_tokens)."""
        self._detokenizer = detokenizer
        self._matcher = StopMatcher(stops)
        self._keep_stop = keep_stop
        self._unarmed_tokens = unarmed_tokens
        self._armed = unarmed_tokens == 0
        self._pieces: list[Piece] = []

    @property
    def matched(self) -> str | None:
        return self._matcher.matched

    def add(self, token_id: int, count: int, stop_token: bool) -> str | None:
        """Take the `count`-th output token and return the stop string it completes, if any. A `stop_token`
        ending the output adds no text unless the stop is kept."""
        if self.matched is not None or (stop_token and not self._keep_stop):
            return self.matched
        self._armed = count > self._unarmed_tokens
        self._feed(self._detokenizer.feed([token_id]))
        return self.matched

    def take(self, final: bool) -> list[Piece]:
        """The pieces certain since the last call; at the end (`final`) whatever was held back too."""
        if final and self.matched is None:
            self._feed(self._detokenizer.flush())
            if self.matched is None:
                self._pieces += self._matcher.flush()
        pieces, self._pieces = self._pieces, []
        return pieces

    def _feed(self, pieces: list[Piece]) -> None:
        self._pieces += self._matcher.feed(pieces, armed=self._armed)
        if self.matched is not None and self._keep_stop:
            self._pieces.append(Piece(self.matched))
