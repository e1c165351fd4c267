"""Prompt text → token ids: added tokens only where the rendered text spells them exactly.

Each added-token spelling in the rendered prompt is a cut and becomes its token;
the text between cuts is encoded with no added token matched at all, so a
region can never turn into a control token by accident. A family whose
reference encoder tokenizes finer pieces renders a `SegmentedText`: its cuts
split regions further and emit nothing. Regions are memoized: a conversation
that grows by one message re-encodes only what is new, and the new regions of
one prompt are encoded together in one batch. Whole prompts are kept too (plain
`str` prompts with no shield markers to spell back: their ids depend on the text
alone), so the same prompt again costs one lookup. With `add_special_tokens`, the ids the tokenizer's own
post-processor puts around a single sequence (BOS, BOS and EOS, or none) wrap the prompt's ids, as
`tokenizer.encode(text, add_special_tokens=True)` writes them.
"""

from __future__ import annotations

import bisect
import itertools
import re
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import replace
from functools import cached_property
from typing import Self

from tokenizers import Tokenizer

from backends.prompt_text import TextBound, text_bound
from gateway.prompts.kept import Kept
from gateway.prompts.shield import Shield, spelling_pattern


class SegmentedText(str):
    """Rendered text that also says where its plain text is encoded piece by piece: `cuts`, sorted offsets."""

    cuts: tuple[int, ...]

    def __new__(cls, pieces: Iterable[str]) -> Self:
        """The concatenation of `pieces`, cut between every two of them."""
        pieces = list(pieces)
        text = super().__new__(cls, "".join(pieces))
        ends, offset = [], 0
        for piece in pieces[:-1]:
            offset += len(piece)
            ends.append(offset)
        text.cuts = tuple(dict.fromkeys(ends))
        return text


class PromptEncoder:
    """Encodes rendered prompts and plain text for one tokenizer."""

    def __init__(self, tokenizer: Tokenizer, memo_size: int = 4096, prompts: int = 128, prompt_chars: int = 16 * 1024):
        self.tokenizer = tokenizer
        self.added: dict[str, int] = {t.content: i for i, t in tokenizer.get_added_tokens_decoder().items()}
        cut = spelling_pattern(self.added)
        # Splits a prompt into [region, spelling, region, …, region].
        self._split = re.compile(f"({cut.pattern})") if cut else None
        self._plain = _without_added_tokens(tokenizer)
        self._special_ends = _special_ends(tokenizer, self._plain)
        self._memo: OrderedDict[str, list[int]] = OrderedDict()
        self._memo_size = memo_size
        self._prompts: Kept[str, list[int]] = Kept(prompts)  # the event loop and planning threads share the encoder
        self._prompt_chars = prompt_chars

    def encode_prompt(self, text: str, shield: Shield | None = None, add_special_tokens: bool = False) -> list[int]:
        """Ids of a rendered prompt: spelled added tokens are tokens, everything else plain text.

        With a `shield`, markers in `text` are spelled back as the client's plain text. With `add_special_tokens`,
        the tokenizer's post-processor tokens wrap them (a completions prompt's BOS, as vLLM's default adds it).
        """
        ids = self._kept_or_encoded(text, shield)
        if add_special_tokens:
            before, after = self._special_ends
            ids = [*before, *ids, *after]
        return ids

    def _kept_or_encoded(self, text: str, shield: Shield | None) -> list[int]:
        """`encode_prompt`'s ids before any post-processor token: a kept whole prompt, or encoded (and kept)."""
        whole = type(text) is str and len(text) <= self._prompt_chars and (shield is None or not shield.originals)
        if not whole:
            return self._encode_prompt(text, shield)
        kept = self._prompts.get(text)
        if kept is not None:
            return list(kept)
        ids = self._encode_prompt(text, None)
        self._prompts.keep(text, list(ids))
        return ids

    def _encode_prompt(self, text: str, shield: Shield | None) -> list[int]:
        parts = self._split.split(text) if self._split else [text]
        regions = _pieces(parts[::2], parts[1::2], getattr(text, "cuts", ()))
        if shield is not None and shield.originals:
            regions = [[shield.restore(p) for p in region] for region in regions]
        known = self._encoded(p for region in regions for p in region)
        ids: list[int] = []
        for piece in regions[0]:
            ids += known[piece]
        for spelling, region in zip(parts[1::2], regions[1:]):
            ids.append(self.added[spelling])
            for piece in region:
                ids += known[piece]
        return ids

    @cached_property
    def text_bound(self) -> TextBound | None:
        """The most characters one token of an encoded prompt stands for (plain regions by the plain copy, each
        added-token spelling one token), or None when its tokenizer gives no bound; read as the model loads
        (gateway/process/launch.py), else at the first long prompt."""
        bound = text_bound(self._plain)
        if bound is None or not self.added:
            return bound
        return replace(bound, chars_per_token=max(bound.chars_per_token, *map(len, self.added)))

    def encode_plain(self, text: str) -> list[int]:
        """Ids of `text` with no added token matched (client text is always encoded this way); a fresh list."""
        return list(self._encoded((text,))[text])

    def _encoded(self, texts: Iterable[str]) -> dict[str, list[int]]:
        """Ids of each distinct text: memo hits, and the misses encoded in one batch and memoized."""
        known: dict[str, list[int]] = {"": []}
        missing: list[str] = []
        for text in texts:
            if text in known:
                continue
            hit = self._memo.get(text)
            if hit is None:
                known[text] = []
                missing.append(text)
            else:
                self._memo.move_to_end(text)
                known[text] = hit
        if missing:
            for text, encoding in zip(missing, self._plain.encode_batch_fast(missing, add_special_tokens=False)):
                known[text] = self._memo[text] = encoding.ids
        while len(self._memo) > self._memo_size:
            self._memo.popitem(last=False)
        return known


def _pieces(regions: list[str], spellings: list[str], cuts: tuple[int, ...]) -> list[list[str]]:
    """Each region as the pieces `cuts` (offsets into the whole text) make of it; one piece when none falls inside."""
    if not cuts:
        return [[region] for region in regions]
    out, start = [], 0
    for region, spelling in zip(regions, [*spellings, ""]):
        end = start + len(region)
        inner = cuts[bisect.bisect_right(cuts, start) : bisect.bisect_left(cuts, end)]
        bounds = [start, *inner, end]
        out.append([region[a - start : b - start] for a, b in itertools.pairwise(bounds)])
        start = end + len(spelling)
    return out


def _special_ends(tokenizer: Tokenizer, plain: Tokenizer) -> tuple[list[int], list[int]]:
    """The ids `tokenizer`'s post-processor writes before and after one sequence: ([BOS], []) for Llama's."""
    processor = tokenizer.post_processor
    if processor is None:
        return [], []
    probe = next(filter(None, (plain.encode(text, add_special_tokens=False) for text in _probe_texts(plain))), None)
    if probe is None:
        raise ValueError("the tokenizer encodes none of its own tokens' texts: no prompt to probe its post-processor")
    processed = processor.process(probe)
    own = [i for i, sequence in enumerate(processed.sequence_ids) if sequence is not None]
    if not own:  # nothing to tell the sequence from what the processor adds
        raise ValueError("the tokenizer's post-processor leaves no token of a one-token prompt")
    return processed.ids[: own[0]], processed.ids[own[-1] + 1 :]


def _probe_texts(plain: Tokenizer) -> Iterator[str]:
    """Short texts to probe a post-processor with: "a", then the texts of the vocabulary's first ids."""
    yield "a"
    for token_id in range(min(plain.get_vocab_size(), 1024)):
        yield plain.decode([token_id])


_PLAIN_COPIES: weakref.WeakKeyDictionary[Tokenizer, Tokenizer] = weakref.WeakKeyDictionary()
"""Each tokenizer's plain copy, made once for every encoder of it."""


def _without_added_tokens(tokenizer: Tokenizer) -> Tokenizer:
    """A copy of `tokenizer` that matches no added token (and adds no BOS/EOS); one per tokenizer object."""
    plain = _PLAIN_COPIES.get(tokenizer)
    if plain is None:
        plain = _PLAIN_COPIES[tokenizer] = _plain_copy(tokenizer)
    return plain


def _plain_copy(tokenizer: Tokenizer) -> Tokenizer:
    """`tokenizer`'s document with no added tokens and no post-processor, built on its own parts: the model (the
    vocabulary and merges), normalizer, pre-tokenizer and decoder are shared, not serialised and parsed again (that
    cost ~0.15 CPU-s for the embedded model's 49K vocabulary, ~1 s for a 150K one)."""
    plain = Tokenizer(tokenizer.model)
    for part in ("normalizer", "pre_tokenizer", "decoder"):
        value = getattr(tokenizer, part)
        if value is not None:
            setattr(plain, part, value)
    if tokenizer.truncation is not None:
        plain.enable_truncation(**tokenizer.truncation)
    if tokenizer.padding is not None:
        plain.enable_padding(**tokenizer.padding)
    return plain
