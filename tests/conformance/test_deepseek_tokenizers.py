"""The tokenizers the DeepSeek fixtures replay on are the ones that made their ids (the checks the old per-family
fixture test had, now for every version)."""

from __future__ import annotations

import pytest
from canitoolcall.fixtures import load_fixtures

from gateway.families.deepseek import DeepSeekV32Family
from tests.conformance.adapters.deepseek import V32_MOVED_TOKENS, VARIANTS, tokenizer

FIXTURES = [f for f in load_fixtures(None, families=["deepseek"]) if f.output_token_ids]


def test_every_deepseek_fixture_has_ids_and_a_variant() -> None:
    assert len(FIXTURES) == len(load_fixtures(None, families=["deepseek"])) == 85
    assert {f.reference_model for f in FIXTURES} <= set(VARIANTS)


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda f: f.id)
def test_recorded_ids_are_the_variants_tokenizer(fixture) -> None:
    """Each fixture's ids are its variant's tokenizer's encoding of raw_output, and decode back to it."""
    vocabulary = tokenizer(VARIANTS[fixture.reference_model])
    assert list(fixture.output_token_ids) == vocabulary.encode(fixture.raw_output, add_special_tokens=False).ids
    assert vocabulary.decode(list(fixture.output_token_ids), skip_special_tokens=False) == fixture.raw_output


def test_v32_moves_only_the_tokens_its_outputs_use() -> None:
    v4, v32 = tokenizer(VARIANTS["deepseek-ai/DeepSeek-V4-Flash"]), tokenizer(DeepSeekV32Family)
    for spelling, v32_id in V32_MOVED_TOKENS.items():
        assert v32.token_to_id(spelling) == v32_id != v4.token_to_id(spelling)
    assert v32.get_vocab_size() == v4.get_vocab_size()
    moved = {i for i in V32_MOVED_TOKENS.values()} | {v4.token_to_id(s) for s in V32_MOVED_TOKENS}
    assert all(v32.id_to_token(i) == v4.id_to_token(i) for i in range(128000, v4.get_vocab_size()) if i not in moved)
