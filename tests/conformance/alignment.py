"""Token texts for fixtures whose vocabulary is not available offline, aligned from the fixtures themselves.

What a parser needs from an id is whether it is a control token (known ids) and, for the others, their text.
So the ids are decoded by alignment with `raw_output`: the text is cut into ordinary-token runs and
control-token spellings such that every run of n ordinary ids spells at least n UTF-8 bytes (nothing when
n = 0) and every id whose text is known spells exactly that text. Texts are learnt from the fixtures: an id
that alone fills a run between two control tokens spells that run; learning repeats until nothing new
aligns. Within a run, known ids take their text and the other bytes are shared out evenly, decoded
incrementally; control tokens are atomic, as in every engine, and ordinary token boundaries are partly
synthetic. (Generalised from the Kimi K3 adapter's alignment.)
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from functools import cache

from gateway.types import Piece


class AlignmentError(ValueError):
    """The ids cannot be matched to the text in exactly one way."""


def _runs(ids: Sequence[int], controls: Mapping[int, str]) -> tuple[list[list[int]], list[bytes]]:
    """The ordinary-id runs of `ids` and the control spellings between them (one run more than controls)."""
    runs: list[list[int]] = [[]]
    spellings: list[bytes] = []
    for token in ids:
        if token in controls:
            spellings.append(controls[token].encode())
            runs.append([])
        else:
            runs[-1].append(token)
    return runs, spellings


def _groups(run: Sequence[int], known: dict[int, bytes]) -> list[tuple[bytes | None, int]]:
    """`run` as (known text, 1) for each known id and (None, count) for each stretch of unknown ids."""
    groups: list[tuple[bytes | None, int]] = []
    for token in run:
        if token in known:
            groups.append((known[token], 1))
        elif groups and groups[-1][0] is None:
            groups[-1] = (None, groups[-1][1] + 1)
        else:
            groups.append((None, 1))
    return groups


def _pattern(groups: list[tuple[bytes | None, int]]) -> re.Pattern[bytes]:
    """Bytes a run can spell: a known id its own text, a stretch of n unknown ids at least n bytes."""
    return re.compile(
        b"".join(b"(.{%d,})" % n if text is None else b"(" + re.escape(text) + b")" for text, n in groups), re.DOTALL
    )


class Vocabulary:
    """Texts of ordinary ids learnt from the fixtures: an id that alone fills a run spells that run."""

    def __init__(self, controls: Mapping[int, str]) -> None:
        self.controls = dict(controls)
        self.known: dict[int, bytes] = {}

    def learn(self, samples: Sequence[tuple[str, Sequence[int]]]) -> None:
        """Align every (text, ids) sample that aligns uniquely and keep its one-id runs, until nothing new."""
        while True:
            before = len(self.known)
            for text, ids in samples:
                try:
                    runs, pieces = self.split(text, ids)
                except AlignmentError:
                    continue
                self.known.update((run[0], piece) for run, piece in zip(runs, pieces, strict=True) if len(run) == 1)
            if len(self.known) == before:
                return

    def split(self, text: str, ids: Sequence[int]) -> tuple[list[list[int]], list[bytes]]:
        """The ordinary-id runs of `ids` and the bytes each spells, when exactly one alignment fits."""
        runs, spellings = _runs(ids, self.controls)
        data = text.encode()
        patterns = [_pattern(_groups(run, self.known)) for run in runs]

        @cache
        def solutions(segment: int, start: int) -> tuple[tuple[int, ...], ...]:
            if segment == len(spellings):
                return ((len(data),),) if patterns[segment].fullmatch(data, start) else ()
            found: list[tuple[int, ...]] = []
            at = data.find(spellings[segment], start)
            while at != -1 and len(found) < 2:
                if patterns[segment].fullmatch(data, start, at):
                    found += [(at, *rest) for rest in solutions(segment + 1, at + len(spellings[segment]))]
                at = data.find(spellings[segment], at + 1) if runs[segment] else -1
            return tuple(found[:2])

        found = solutions(0, 0)
        if len(found) != 1:
            raise AlignmentError(f"{len(found)} alignments of the ids with the text")
        ends = found[0]
        starts = (0, *(cut + len(s) for cut, s in zip(ends, spellings)))
        return runs, [data[lo:hi] for lo, hi in zip(starts, ends, strict=True)]

    def texts(self, text: str, ids: Sequence[int]) -> list[str]:
        """The text of each id, decoded incrementally as a detokenizer would."""
        runs, pieces = self.split(text, ids)
        decoder = codecs.getincrementaldecoder("utf-8")()
        control = iter(t for t in ids if t in self.controls)
        out: list[str] = []
        for i, (run, piece) in enumerate(zip(runs, pieces, strict=True)):
            out += [decoder.decode(b) for b in self._share(run, piece)]
            if i < len(runs) - 1:
                out.append(self.controls[next(control)])
        return out

    def _share(self, run: Sequence[int], data: bytes) -> list[bytes]:
        """`data` cut among the ids of `run`: known ids take their text, unknown stretches share evenly."""
        groups = _groups(run, self.known)
        match = _pattern(groups).fullmatch(data)
        if match is None:
            raise AlignmentError("a run does not spell its aligned text")
        out: list[bytes] = []
        for (_, count), part in zip(groups, match.groups(), strict=True):
            out += [part[len(part) * i // count : len(part) * (i + 1) // count] for i in range(count)]
        return out


class AlignedPieces:
    """Stand-in for the gateway's detokenizer: each id becomes a Piece of its aligned text, control ids marked."""

    def __init__(self, texts: Iterable[str], controls: Collection[int]) -> None:
        self._texts = iter(texts)
        self._controls = controls

    def feed(self, ids: Sequence[int]) -> list[Piece]:
        return [Piece(next(self._texts), token_id if token_id in self._controls else None) for token_id in ids]

    def flush(self) -> list[Piece]:
        return []
