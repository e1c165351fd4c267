"""How a family recognises a checkpoint: the facts read from it, and the declarative rules families match them with."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from backends.checkpoint import Checkpoint


@dataclass(frozen=True)
class CheckpointFacts:
    """What family inference looks at: the architecture (config.json's `model_type`, a GGUF's architecture, or
    `tokenizer-only`), the spellings of the tokenizer's added tokens, and the chat template (None: it has none)."""

    architecture: str
    added_tokens: frozenset[str]
    chat_template: str | None

    @classmethod
    def of(cls, checkpoint: Checkpoint) -> CheckpointFacts:
        added = frozenset(t.content for t in checkpoint.tokenizer.get_added_tokens_decoder().values())
        return cls(checkpoint.config.architecture, added, checkpoint.chat_template)

    def describe(self) -> str:
        """The facts in a few words, for error messages."""
        template = "a chat template" if self.chat_template else "no chat template"
        return f"architecture {self.architecture!r}, {len(self.added_tokens)} added tokens, {template}"


@dataclass(frozen=True)
class Recognition:
    """One way a family recognises a checkpoint. Every condition given must hold (added tokens: all present;
    template: each substring in the chat template, so a checkpoint without one never matches; architectures:
    one of them); the score is the number of facts matched, so the more specific of two matching rules wins."""

    tokens: frozenset[str] = frozenset()
    template: tuple[str, ...] = ()
    architectures: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not (self.tokens or self.template or self.architectures):
            raise ValueError("a Recognition needs at least one condition")

    def score(self, facts: CheckpointFacts) -> int:
        """The number of facts this rule matched; 0 when any condition fails."""
        if not self.tokens <= facts.added_tokens:
            return 0
        if self.template and not (facts.chat_template and all(s in facts.chat_template for s in self.template)):
            return 0
        if self.architectures and facts.architecture not in self.architectures:
            return 0
        return len(self.tokens) + len(self.template) + (1 if self.architectures else 0)


def best_score(rules: Iterable[Recognition], facts: CheckpointFacts) -> int:
    """The score of the best matching rule; 0 when none matches."""
    return max((rule.score(facts) for rule in rules), default=0)
