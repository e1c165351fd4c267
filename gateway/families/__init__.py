"""Registry of model families: a family is found by the name a model's configuration gives."""

from __future__ import annotations

from gateway.families.base import Family
from gateway.families.deepseek_v41 import DeepSeekV41Family
from gateway.families.hermes import HermesFamily
from gateway.families.kimi_k3 import KimiK3Family

FAMILIES: dict[str, type[Family]] = {
    HermesFamily.name: HermesFamily,
    KimiK3Family.name: KimiK3Family,
    DeepSeekV41Family.name: DeepSeekV41Family,
}


def get_family(name: str) -> type[Family]:
    """The family class registered as `name`; ValueError naming the known ones otherwise."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(f"unknown model family {name!r}; known: {', '.join(sorted(FAMILIES))}") from None
