"""Every family's canitoolcall fixtures, every chunking strategy: strict expected failures, and the table in
docs/conformance.md as the script writes it now."""

from __future__ import annotations

import pytest
from canitoolcall.fixtures import load_fixtures

from tests.conformance.common import REPO
from tests.conformance.report import FamilyReport, adapter_modules, collect, fixture_ids, render_markdown

ADAPTERS = adapter_modules()


@pytest.fixture(scope="session")
def reports() -> dict[str, FamilyReport]:
    """One canitoolcall run per family with an adapter, for the whole session."""
    return {r.family: r for r in collect()}


def test_every_adapter_module_names_a_family_and_real_fixtures() -> None:
    ids = fixture_ids()
    for adapter in ADAPTERS.values():
        assert adapter.family in ids, adapter.module
        assert adapter.engine.startswith(f"{adapter.module}:"), adapter.module
        assert set(adapter.expected_failures) <= set(ids[adapter.family]), adapter.module
        assert all(reason.strip() for reason in adapter.expected_failures.values()), adapter.module


def test_all_fixtures_are_counted() -> None:
    ids = fixture_ids()
    assert len(ids) == 9
    assert sum(map(len, ids.values())) == len(load_fixtures(None)) == 469


@pytest.mark.parametrize("family", sorted(ADAPTERS))
def test_family_passes_all_but_its_expected_failures(reports: dict[str, FamilyReport], family: str) -> None:
    """Strict: an unexpected failure and an expected failure that now passes both fail the test."""
    report = reports[family]
    assert not report.unexpected_failures, [(o.fixture_id, o.reason) for o in report.unexpected_failures]
    assert not report.unexpected_passes, f"these pass now: drop them from EXPECTED_FAILURES: {report.unexpected_passes}"


def test_docs_table_is_what_the_script_writes(reports: dict[str, FamilyReport]) -> None:
    written = (REPO / "docs" / "conformance.md").read_text(encoding="utf-8")
    assert written == render_markdown(list(reports.values())), "run: scripts/conformance.py --write docs/conformance.md"
