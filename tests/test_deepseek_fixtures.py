"""All DeepSeek V4.1 and V4 canitoolcall fixtures, every chunking strategy, through canitoolcall's runner and checks."""

from __future__ import annotations

import pytest
from canitoolcall.chunking import DEFAULT_STRATEGIES
from canitoolcall.fixtures import load_fixtures
from canitoolcall.results import RunResults, Status

from backends.checkpoint import load_checkpoint
from tests.canitoolcall_deepseek_adapter import CHECKPOINT, MODELS
from tests.conformance.common import case_of, failing_checks, run_fixtures

FIXTURES = [f for f in load_fixtures(None, families=["deepseek"]) if f.reference_model in MODELS]
V41, V4 = MODELS


@pytest.fixture(scope="module")
def results() -> RunResults:
    return run_fixtures("tests.canitoolcall_deepseek_adapter:DeepSeekAdapter", "deepseek", [f.id for f in FIXTURES])


def test_all_v41_and_v4_fixtures_are_run(results: RunResults) -> None:
    assert sum(f.reference_model == V41 for f in FIXTURES) == 21
    assert sum(f.reference_model == V4 for f in FIXTURES) == 18
    assert sorted(c.fixture_id for c in results.cases) == sorted(f.id for f in FIXTURES)
    assert set(results.run.strategies) == {s.id for s in DEFAULT_STRATEGIES}


@pytest.mark.parametrize("fixture_id", [f.id for f in FIXTURES])
def test_fixture_passes(results: RunResults, fixture_id: str) -> None:
    """Measured: all 39 pass strictly in every strategy (no soft passes); no regression below that."""
    case = case_of(results, fixture_id)
    assert case.status is Status.PASS, case.harness_error or failing_checks(case)
    assert not case.skipped_strategies


def test_recorded_ids_are_the_real_tokenizers() -> None:
    """Fixtures that carry ids carry DeepSeek V4 ids: the real tokenizer's encoding of raw_output."""
    tokenizer = load_checkpoint(CHECKPOINT).tokenizer
    recorded = [f for f in FIXTURES if f.output_token_ids]
    assert len(recorded) >= 10
    for fixture in recorded:
        assert list(fixture.output_token_ids) == tokenizer.encode(fixture.raw_output, add_special_tokens=False).ids, (
            fixture.id
        )
        assert tokenizer.decode(list(fixture.output_token_ids), skip_special_tokens=False) == fixture.raw_output
