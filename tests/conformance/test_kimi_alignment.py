"""The Kimi adapter's aligned ids (the checks the old per-family fixture test had, now for K2 and K3)."""

from __future__ import annotations

import pytest
from canitoolcall.fixtures import load_fixtures

from gateway.families.kimi.markers import CLOSE, SEP
from tests.conformance.adapters.kimi import K3_MODEL, vocabulary

FIXTURES = load_fixtures(None, families=["kimi"])


def test_every_kimi_fixture_has_ids() -> None:
    assert len(FIXTURES) == 49 and all(f.output_token_ids for f in FIXTURES)
    assert sum(f.reference_model == K3_MODEL for f in FIXTURES) == 23


def test_marker_text_in_value_arrives_as_ordinary_tokens() -> None:
    """The fixture that text-matching parsers fail: its value spells markers with ordinary ids."""
    fixture = next(f for f in FIXTURES if f.id == "kimi/k3-control-marker-text-in-value")
    learnt = vocabulary(True)
    ids = list(fixture.output_token_ids)
    texts = learnt.texts(fixture.raw_output, ids)
    ordinary = "".join(text for text, token in zip(texts, ids, strict=True) if token not in learnt.controls)
    assert f"{CLOSE}argument{SEP} is how args end" in ordinary


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda f: f.id)
def test_every_fixture_aligns_to_its_text(fixture) -> None:
    learnt = vocabulary(fixture.reference_model == K3_MODEL)
    ids = list(fixture.output_token_ids)
    texts = learnt.texts(fixture.raw_output, ids)
    assert "".join(texts) == fixture.raw_output
    assert [t for t, i in zip(texts, ids, strict=True) if i in learnt.controls] == [
        learnt.controls[i] for i in ids if i in learnt.controls
    ]
