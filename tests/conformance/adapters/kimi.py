"""canitoolcall adapter that replays every Kimi fixture through the gateway's Kimi family of its version.

`models[0]` picks the variant: Kimi-K3 → `kimi_k3` (`KimiK3Parser`, starting in
the channel the generation prompt left open), Kimi-K2* → `kimi_k2` (its
parser, in reasoning when the generation prompt ends in `<think>`).

The fixtures' ids are real K3 / K2 ids, and neither vocabulary (tiktoken rank
files) is available offline. What a parser needs from an id is whether it is
one of the format's control tokens (K3: `<|open|>`=163587, `<|close|>`=163588,
`<|sep|>`=163589; K2: `<|tool_calls_section_begin|>`=163595, `…_end|>`=163596,
`<|tool_call_begin|>`=163597, `<|tool_call_argument_begin|>`=163598,
`<|tool_call_end|>`=163599, `</think>`=163607, found by lining up every K2
fixture's large ids with its marker spellings) and, for the others, their
text. (K3 re-uses K2's ids 163586-163588 for other tokens, so each variant has
its own table.) So the ids are decoded by alignment with `raw_output`: the text is cut into
ordinary-token runs and control-token spellings such that every run of n
ordinary ids spells at least n UTF-8 bytes (nothing when n = 0) and every id
whose text is known spells exactly that text. Texts are learnt from the K3
fixtures themselves: an id that alone fills a run between two control tokens
(`argument`, `call`, `tools`, ...) spells that run; learning repeats until
nothing new aligns, over the fixtures of the same variant. Every fixture must then align in exactly one way
(`k3-control-marker-text-in-value`, whose value spells
`<|close|>argument<|sep|>` with ordinary ids, needs the learnt `argument`).
Within a run, known ids take their text and the other bytes are shared out
evenly, decoded incrementally; control tokens are atomic, as in every engine,
and ordinary token boundaries are partly synthetic.

Run with:
    python -m canitoolcall run --engine tests.conformance.adapters.kimi:Adapter --family kimi
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from functools import cache
from typing import Any

from canitoolcall.adapters.base import ReplayInput, Support, ToolSpec
from canitoolcall.fixtures import load_fixtures

from gateway.families.base import FamilyContext, OutputParser
from gateway.families.kimi import KimiK2Family
from gateway.families.kimi.markers import CLOSE, K2_SECTIONS, OPEN, SEP
from gateway.families.kimi.parser import KimiK3Parser
from gateway.types import ChatRequest, Piece
from tests.conformance.common import GatewayAdapter

FAMILY = "kimi"
ENGINE = "tests.conformance.adapters.kimi:Adapter"
EXPECTED_FAILURES: dict[str, str] = {}

K3_MODEL = "moonshotai/Kimi-K3"
K2_MODELS = ("moonshotai/Kimi-K2.6", "moonshotai/Kimi-K2-Instruct-0905", "moonshotai/Kimi-K2-Instruct")
CONTROL_IDS: dict[int, str] = {163587: OPEN, 163588: CLOSE, 163589: SEP}
"""K3's control tokens."""
K2_CONTROL_IDS: dict[int, str] = {
    163595: K2_SECTIONS.section_begin,
    163596: K2_SECTIONS.section_end,
    163597: K2_SECTIONS.call_begin,
    163598: K2_SECTIONS.arguments_begin,
    163599: K2_SECTIONS.call_end,
    163607: K2_SECTIONS.think_end,
}
"""K2's control tokens that its fixtures' outputs hold."""


class AlignmentError(ValueError):
    """The ids cannot be matched to the text in exactly one way."""


def _runs(ids: Sequence[int], control: Mapping[int, str]) -> tuple[list[list[int]], list[bytes]]:
    """The ordinary-id runs of `ids` and the control spellings between them (one run more than controls)."""
    runs: list[list[int]] = [[]]
    spellings: list[bytes] = []
    for token in ids:
        if token in control:
            spellings.append(control[token].encode())
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

    def __init__(self, control: Mapping[int, str]) -> None:
        self.control = control
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
        runs, spellings = _runs(ids, self.control)
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
        control = iter(t for t in ids if t in self.control)
        out: list[str] = []
        for i, (run, piece) in enumerate(zip(runs, pieces, strict=True)):
            out += [decoder.decode(b) for b in self._share(run, piece)]
            if i < len(runs) - 1:
                out.append(self.control[next(control)])
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

    def __init__(self, texts: Iterable[str], control: Collection[int]) -> None:
        self._texts = iter(texts)
        self._control = control

    def feed(self, ids: Sequence[int]) -> list[Piece]:
        return [Piece(next(self._texts), token_id if token_id in self._control else None) for token_id in ids]

    def flush(self) -> list[Piece]:
        return []


@cache
def vocabulary(k3: bool) -> Vocabulary:
    """Ordinary id texts learnt from every fixture with ids of the same variant (K3, or K2)."""
    learnt = Vocabulary(CONTROL_IDS if k3 else K2_CONTROL_IDS)
    fixtures = load_fixtures(None, families=[FAMILY])
    learnt.learn(
        [
            (f.raw_output, f.output_token_ids)
            for f in fixtures
            if (f.reference_model == K3_MODEL) == k3 and f.output_token_ids
        ]
    )
    return learnt


@cache
def k2_family() -> KimiK2Family:
    """The gateway's kimi_k2 family (only its parser is used: no tokenizer or template needed)."""
    return KimiK2Family(FamilyContext(None, None, None, None, [], []))


class Adapter(GatewayAdapter):
    """The gateway's Kimi parser of the fixture's variant, fed Pieces the way the gateway's detokenizer makes them."""

    name = "llm-gateway-kimi"
    tokens_per_step = "many"

    def supports(self, family: str, model: str) -> Support:
        if family == FAMILY and (model == K3_MODEL or model in K2_MODELS):
            return Support(True)
        return Support(False, f"no kimi variant serves {model}")

    def parser_config(self, raw: ReplayInput) -> dict[str, Any]:
        if raw.model == K3_MODEL:
            return {"parser": "gateway.families.kimi.KimiK3Parser", "channel": _channel(raw), "ids": "aligned"}
        return {"family": "kimi_k2", "generation_prompt": raw.generation_prompt, "ids": "aligned"}

    def units(self, raw: ReplayInput) -> list[int]:
        if raw.token_ids is None:
            raise AlignmentError(f"{raw.fixture_id} has no token ids and the Kimi vocabulary is not available")
        return list(raw.token_ids)

    def special_token_ids(self, raw: ReplayInput) -> Collection[int]:
        return frozenset(CONTROL_IDS if raw.model == K3_MODEL else K2_CONTROL_IDS)

    def family_parser(self, raw: ReplayInput, tools: Sequence[ToolSpec]) -> OutputParser:
        if raw.model == K3_MODEL:
            return KimiK3Parser(channel=_channel(raw))
        request = ChatRequest(messages=[{"role": "user", "content": ""}], tools=list(tools))
        return k2_family().parser(request, raw.generation_prompt or "")

    def pieces(self, raw: ReplayInput) -> AlignedPieces:
        learnt = vocabulary(raw.model == K3_MODEL)
        return AlignedPieces(learnt.texts(raw.text, self.units(raw)), learnt.control)


def _channel(raw: ReplayInput) -> str:
    """The channel the K3 generation prompt left open."""
    prompt = raw.generation_prompt or ""
    return "response" if prompt.endswith(f"{OPEN}response{SEP}") or raw.thinking is False else "think"
