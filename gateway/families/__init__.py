"""Registry of model families, found by name. Each family is a subpackage that exports `FAMILIES`, its
`Family` classes (one per variant of its format); the registry discovers them, so adding a family
touches no other file."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from gateway.families.base import Family


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
