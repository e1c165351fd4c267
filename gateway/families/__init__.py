"""Registry of model families: a family is found by the name a model's configuration gives."""

from __future__ import annotations

from gateway.families.base import Family
from gateway.families.hermes import HermesFamily

FAMILIES: dict[str, type[Family]] = {
    HermesFamily.name: HermesFamily,
}


def get_family(name: str) -> type[Family]:
    """The family class registered as `name`; ValueError naming the known ones otherwise."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(f"unknown model family {name!r}; known: {', '.join(sorted(FAMILIES))}") from None
