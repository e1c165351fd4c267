"""Registry of model families, found by name. Each family is a subpackage that exports `FAMILIES`, its
`Family` classes (one per variant of its format); the registry discovers them, so adding a family
touches no other file."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from gateway.families.base import Family
from gateway.families.recognition import CheckpointFacts


@cache
def families() -> dict[str, type[Family]]:
    """Every family package's `FAMILIES`, by name (imported on first use)."""
    found: dict[str, type[Family]] = {}
    for info in pkgutil.iter_modules(__path__):
        if not info.ispkg:
            continue
        for family in importlib.import_module(f"{__name__}.{info.name}").FAMILIES:
            if family.name in found:
                raise RuntimeError(f"two families are named {family.name!r}")
            found[family.name] = family
    return dict(sorted(found.items()))


def get_family(name: str) -> type[Family]:
    """The family class registered as `name`; ValueError naming the known ones otherwise."""
    try:
        return families()[name]
    except KeyError:
        raise ValueError(f"unknown model family {name!r}; known: {', '.join(families())}") from None


class FamilyInferenceError(ValueError):
    """No family, or more than one equally, recognises a checkpoint: the message says which and what to do."""


def infer_family(facts: CheckpointFacts) -> str:
    """The name of the one family that claims a checkpoint most strongly; FamilyInferenceError otherwise."""
    scores = {name: family.claims(facts) for name, family in families().items()}
    best = max(scores.values())
    if best == 0:
        raise FamilyInferenceError(
            f"no model family recognises this checkpoint ({facts.describe()}); "
            f"name one with --family (or `family:` in its config entry): {', '.join(scores)}"
        )
    winners = [name for name, score in scores.items() if score == best]
    if len(winners) > 1:
        raise FamilyInferenceError(
            f"this checkpoint ({facts.describe()}) fits {' and '.join(winners)} equally; "
            "name one with --family (or `family:` in its config entry)"
        )
    return winners[0]
