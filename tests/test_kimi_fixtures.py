"""All Kimi K3 canitoolcall fixtures, every chunking strategy, through canitoolcall's own runner and checks."""

from __future__ import annotations

import pytest
from canitoolcall.chunking import DEFAULT_STRATEGIES
from canitoolcall.fixtures import load_fixtures
from canitoolcall.results import RunResults, Status

from gateway.families.kimi_k3.markers import CLOSE, SEP
from tests.canitoolcall_kimi_adapter import CONTROL_IDS, K3_MODEL, KimiK3Adapter
from tests.conformance.common import case_of, failing_checks, run_fixtures

K3_FIXTURES = [f for f in load_fixtures(None, families=["kimi"]) if f.reference_model == K3_MODEL]


@pytest.fixture(scope="module")
def results() -> RunResults:
    return run_fixtures("tests.canitoolcall_kimi_adapter:KimiK3Adapter", "kimi", ["kimi/k3-*"])


def test_all_k3_fixtures_are_run(results: RunResults) -> None:
    assert len(K3_FIXTURES) == 23
    assert sorted(c.fixture_id for c in results.cases) == sorted(f.id for f in K3_FIXTURES)
    assert set(results.run.strategies) == {s.id for s in DEFAULT_STRATEGIES}


@pytest.mark.parametrize("fixture_id", [f.id for f in K3_FIXTURES])
def test_fixture_passes(results: RunResults, fixture_id: str) -> None:
    case = case_of(results, fixture_id)
    assert case.status is Status.PASS, case.harness_error or failing_checks(case)
    assert not case.skipped_strategies


def test_marker_text_in_value_arrives_as_ordinary_tokens() -> None:
    """The fixture that text-matching parsers fail: its value spells markers with ordinary ids."""
    fixture = next(f for f in K3_FIXTURES if f.id == "kimi/k3-control-marker-text-in-value")
    ids = list(fixture.output_token_ids)
    texts = KimiK3Adapter().vocabulary.texts(fixture.raw_output, ids)
    ordinary = "".join(text for text, token in zip(texts, ids, strict=True) if token not in CONTROL_IDS)
    assert f"{CLOSE}argument{SEP} is how args end" in ordinary


def test_every_k3_fixture_aligns_to_its_text() -> None:
    vocabulary = KimiK3Adapter().vocabulary
    for fixture in K3_FIXTURES:
        ids = list(fixture.output_token_ids)
        texts = vocabulary.texts(fixture.raw_output, ids)
        assert "".join(texts) == fixture.raw_output
        assert [t for t, i in zip(texts, ids, strict=True) if i in CONTROL_IDS] == [
            CONTROL_IDS[i] for i in ids if i in CONTROL_IDS
        ]
