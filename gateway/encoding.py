"""Prompt text → token ids: added tokens only where the rendered text spells them exactly.

Each added-token spelling in the rendered prompt is a cut and becomes its token;
the text between cuts is encoded with no added token matched at all, so a
region can never turn into a control token by accident. Regions are memoized:
a conversation that grows by one message re-encodes only what is new.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict

from tokenizers import Tokenizer

from gateway.shield import Shield


class PromptEncoder:
    """Encodes rendered prompts and plain text for one tokenizer."""

    def __init__(self, tokenizer: Tokenizer, memo_size: int = 4096):
        self.tokenizer = tokenizer
        self.added: dict[str, int] = {t.content: i for i, t in tokenizer.get_added_tokens_decoder().items()}
        spellings = sorted(self.added, key=len, reverse=True)
        self._cut = re.compile("|".join(map(re.escape, spellings))) if spellings else None
        self._plain = _without_added_tokens(tokenizer)
        self._memo: OrderedDict[str, list[int]] = OrderedDict()
        self._memo_size = memo_size

    def encode_prompt(self, text: str, shield: Shield | None = None) -> list[int]:
        """Ids of a rendered prompt: spelled added tokens are tokens, everything else plain text.

        With a `shield`, markers in `text` are spelled back as the client's plain text.
        """
        restore = shield.restore if shield is not None else _same
        ids: list[int] = []
        pos = 0
        for match in self._cut.finditer(text) if self._cut else ():
            ids += self.encode_plain(restore(text[pos : match.start()]))
            ids.append(self.added[match.group()])
            pos = match.end()
        ids += self.encode_plain(restore(text[pos:]))
        return ids

    def encode_plain(self, text: str) -> list[int]:
        """Ids of `text` with no added token matched (client text is always encoded this way)."""
        if not text:
            return []
        hit = self._memo.get(text)
        if hit is not None:
            self._memo.move_to_end(text)
            return hit
        ids = self._plain.encode(text, add_special_tokens=False).ids
        self._memo[text] = ids
        if len(self._memo) > self._memo_size:
            self._memo.popitem(last=False)
        return ids


def _same(text: str) -> str:
    return text


def _without_added_tokens(tokenizer: Tokenizer) -> Tokenizer:
    """A copy of `tokenizer` that matches no added token (and adds no BOS/EOS)."""
    spec = json.loads(tokenizer.to_str())
    spec["added_tokens"] = []
    spec["post_processor"] = None
    return Tokenizer.from_str(json.dumps(spec))
