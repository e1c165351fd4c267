"""Registry of model families, found by name. Each family is a subpackage that exports `RECOGNITION` (its
families' names, each with the rules that recognise its checkpoints: kept in its `claims.py`, which imports no
parser, grammar, template or tokenizer) and `FAMILIES`, its `Family` classes (one per variant of its format),
imported only when read (`lazy_exports`). The registry discovers them, so adding a family touches no other file;
naming, checking or inferring a family imports only the packages' claims, and a start imports the one it serves."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from gateway.families.base import Family
from gateway.families.recognition import CheckpointFacts, Recognition, best_score


@cache
def _registry() -> dict[str, tuple[str, tuple[Recognition, ...]]]:
    """Each family's package and recognition rules, by name (every package's `RECOGNITION`, imported on first use)."""
    found: dict[str, tuple[str, tuple[Recognition, ...]]] = {}
    for info in pkgutil.iter_modules(__path__):
        if not info.ispkg:
            continue
        package = f"{__name__}.{info.name}"
        for name, rules in importlib.import_module(package).RECOGNITION.items():
            if name in found:
                raise RuntimeError(f"two families are named {name!r}")
            found[name] = (package, rules)
    return dict(sorted(found.items()))


def family_names() -> list[str]:
    """Every registered family's name, sorted (no family class is imported)."""
    return list(_registry())


def recognition_rules() -> dict[str, tuple[Recognition, ...]]:
    """Each family's recognition rules, by name (no family class is imported)."""
    return {name: rules for name, (_, rules) in _registry().items()}


def families() -> dict[str, type[Family]]:
    """Every family class, by name: imports every family package's modules (a start needs `get_family`'s one)."""
    return {name: get_family(name) for name in _registry()}


@cache
def get_family(name: str) -> type[Family]:
    """The family class registered as `name` (its package's modules imported now); ValueError naming the known ones
    otherwise."""
    if name not in _registry():
        raise ValueError(f"unknown model family {name!r}; known: {', '.join(_registry())}")
    package = importlib.import_module(_registry()[name][0])
    classes = {family.name: family for family in package.FAMILIES}
    if classes.keys() != package.RECOGNITION.keys():
        raise RuntimeError(
            f"{package.__name__}: FAMILIES are named {sorted(classes)}, RECOGNITION names {sorted(package.RECOGNITION)}"
        )
    return classes[name]


class FamilyInferenceError(ValueError):
    """No family, or more than one equally, recognises a checkpoint: the message says which and what to do."""


def infer_family(facts: CheckpointFacts) -> str:
    """The name of the one family that claims a checkpoint most strongly (its best matching rule's score);
    FamilyInferenceError otherwise. A family with no rules (a variant sharing another's vocabulary and template) is
    used only when named."""
    scores = {name: best_score(rules, facts) for name, rules in recognition_rules().items()}
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


def lazy_exports(package: str, modules: Mapping[str, tuple[str, ...]]) -> Callable[[str], Any]:
    """A family package's module `__getattr__` (PEP 562): each name listed under a module (relative to `package`,
    or absolute) is read from it when first asked for, so that importing the package for its `RECOGNITION`
    imports none of them; once read, it is the package's own attribute (no second lookup)."""
    homes = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(homes[name], package), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
