"""Prompt text → token ids: added tokens only where the rendered text spells them exactly.

Each added-token spelling in the rendered prompt is a cut and becomes its token;
the text between cuts is encoded with no added token matched at all, so a
region can never turn into a control token by accident. Regions are memoized:
a conversation that grows by one message re-encodes only what is new, and the
new regions of one prompt are encoded together in one batch.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Iterable

from tokenizers import Tokenizer

from gateway.shield import Shield, spelling_pattern


class PromptEncoder:
    """Encodes rendered prompts and plain text for one tokenizer."""

    def __init__(self, tokenizer: Tokenizer, memo_size: int = 4096):
        self.tokenizer = tokenizer
        self.added: dict[str, int] = {t.content: i for i, t in tokenizer.get_added_tokens_decoder().items()}
        cut = spelling_pattern(self.added)
        # Splits a prompt into [region, spelling, region, …, region].
        self._split = re.compile(f"({cut.pattern})") if cut else None
        self._plain = _without_added_tokens(tokenizer)
        self._memo: OrderedDict[str, list[int]] = OrderedDict()
        self._memo_size = memo_size

    def encode_prompt(self, text: str, shield: Shield | None = None) -> list[int]:
        """Ids of a rendered prompt: spelled added tokens are tokens, everything else plain text.

        With a `shield`, markers in `text` are spelled back as the client's plain text.
        """
        parts = self._split.split(text) if self._split else [text]
        regions = parts[::2] if shield is None or not shield.originals else [shield.restore(r) for r in parts[::2]]
        known = self._encoded(regions)
        ids = list(known[regions[0]])
        for spelling, region in zip(parts[1::2], regions[1:]):
            ids.append(self.added[spelling])
            ids += known[region]
        return ids

    def encode_plain(self, text: str) -> list[int]:
        """Ids of `text` with no added token matched (client text is always encoded this way)."""
        return self._encoded((text,))[text]

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


def _without_added_tokens(tokenizer: Tokenizer) -> Tokenizer:
    """A copy of `tokenizer` that matches no added token (and adds no BOS/EOS)."""
    spec = json.loads(tokenizer.to_str())
    spec["added_tokens"] = []
    spec["post_processor"] = None
    return Tokenizer.from_str(json.dumps(spec))
