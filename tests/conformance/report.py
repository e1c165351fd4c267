"""The conformance table: canitoolcall over every family's adapter module, every default chunking strategy.

An adapter module in `tests/conformance/adapters/` exports `FAMILY` (the canitoolcall family), `ENGINE` (the
adapter spec canitoolcall's runner loads) and `EXPECTED_FAILURES` (fixture id -> why it cannot pass). A fixture
passes only if it passes in every chunking strategy; a family without an adapter module passes nothing. The
table is one canitoolcall run of `tests/conformance/every_family.py`, which hands each fixture to its family's
adapter: one worker process for all families.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from canitoolcall.checks import ALL_STREAMS, NONSTREAM
from canitoolcall.chunking import DEFAULT_STRATEGIES
from canitoolcall.fixtures import load_fixtures
from canitoolcall.results import CaseResult, Status

from tests.conformance import adapters as adapter_package
from tests.conformance.common import run_fixtures

STRATEGIES: tuple[str, ...] = tuple(s.id for s in DEFAULT_STRATEGIES)
PASSING = (Status.PASS, Status.SOFT_PASS)
NO_ADAPTER = "no adapter"
EVERY_FAMILY = "tests.conformance.every_family:Adapter"
REASON_CHARS = 160


def fixture_ids() -> dict[str, list[str]]:
    """Every canitoolcall fixture id, by family, in the fixtures' order."""
    by_family: dict[str, list[str]] = {}
    for fixture in load_fixtures(None):
        by_family.setdefault(fixture.family, []).append(fixture.id)
    return dict(sorted(by_family.items()))


@dataclass(frozen=True)
class AdapterModule:
    """What one module of `tests/conformance/adapters/` declares."""

    module: str
    family: str
    engine: str
    expected_failures: Mapping[str, str]


def adapter_modules() -> dict[str, AdapterModule]:
    """Every adapter module, by the family it serves."""
    found: dict[str, AdapterModule] = {}
    for info in pkgutil.iter_modules(adapter_package.__path__):
        name = f"{adapter_package.__name__}.{info.name}"
        module = importlib.import_module(name)
        adapter = AdapterModule(name, module.FAMILY, module.ENGINE, dict(module.EXPECTED_FAILURES))
        if adapter.family in found:
            raise ValueError(f"two adapter modules for {adapter.family}: {found[adapter.family].module}, {name}")
        found[adapter.family] = adapter
    return found


@dataclass(frozen=True)
class Outcome:
    """One fixture: the strategies it passes in, and why it fails (None when it passes in all)."""

    fixture_id: str
    passed_in: frozenset[str]
    reason: str | None

    @property
    def passed(self) -> bool:
        return self.reason is None


def _short(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= REASON_CHARS else line[: REASON_CHARS - 1] + "…"


def outcome(case: CaseResult) -> Outcome:
    """A case's verdict per strategy: a strategy passes when no row of its own, nor any whole-case row, fails."""
    if case.status is Status.UNSUPPORTED:
        return Outcome(case.fixture_id, frozenset(), _short(f"unsupported: {case.reason}"))
    if case.harness_error:
        return Outcome(case.fixture_id, frozenset(), _short(f"harness error: {case.harness_error}"))
    bad = [r for r in case.checks if r.status not in PASSING]
    passed_in = frozenset(
        s
        for s in STRATEGIES
        if s not in case.skipped_strategies and not any(r.strategy in (s, NONSTREAM, ALL_STREAMS) for r in bad)
    )
    if len(passed_in) == len(STRATEGIES):
        return Outcome(case.fixture_id, passed_in, None)
    if bad:
        row = bad[0]
        return Outcome(case.fixture_id, passed_in, _short(f"{row.check}@{row.strategy}: {row.detail}"))
    skipped = min(case.skipped_strategies.items())
    return Outcome(case.fixture_id, passed_in, _short(f"skipped {skipped[0]}: {skipped[1]}"))


@dataclass(frozen=True)
class FamilyReport:
    """One family's outcomes, with what its adapter module expects to fail."""

    family: str
    outcomes: Sequence[Outcome]
    expected_failures: Mapping[str, str] = field(default_factory=dict)
    adapter: str | None = None

    @property
    def passed(self) -> int:
        return sum(o.passed for o in self.outcomes)

    def passed_in(self, strategy: str) -> int:
        return sum(strategy in o.passed_in for o in self.outcomes)

    @property
    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.passed]

    @property
    def unexpected_failures(self) -> list[Outcome]:
        return [o for o in self.failures if o.fixture_id not in self.expected_failures]

    @property
    def unexpected_passes(self) -> list[str]:
        return [o.fixture_id for o in self.outcomes if o.passed and o.fixture_id in self.expected_failures]

    def reason(self, failure: Outcome) -> str:
        """The declared reason of an expected failure, else what was observed."""
        if failure.fixture_id in self.expected_failures:
            return self.expected_failures[failure.fixture_id]
        return f"NOT EXPECTED: {failure.reason}"


def family_report(
    family: str, ids: Sequence[str], adapter: AdapterModule | None, cases: Iterable[CaseResult]
) -> FamilyReport:
    """The family's outcomes among `cases` (or all failing when no adapter module serves it)."""
    if adapter is None:
        return FamilyReport(family, [Outcome(i, frozenset(), NO_ADAPTER) for i in ids])
    by_id = {c.fixture_id: c for c in cases if c.family == family}
    return FamilyReport(family, [outcome(by_id[i]) for i in ids], adapter.expected_failures, adapter.module)


def collect(families: Iterable[str] | None = None) -> list[FamilyReport]:
    """A report per family (all nine unless `families` says which), from one run over the families served."""
    ids = fixture_ids()
    wanted = list(ids) if families is None else list(families)
    adapters = adapter_modules()
    served = [f for f in wanted if f in adapters]
    cases = run_fixtures(EVERY_FAMILY, served).cases if served else ()
    return [family_report(f, ids[f], adapters.get(f), cases) for f in wanted]


def total_line(reports: Sequence[FamilyReport]) -> str:
    return f"total: {sum(r.passed for r in reports)}/{sum(len(r.outcomes) for r in reports)}"


def _rows(reports: Sequence[FamilyReport]) -> list[list[str]]:
    header = ["family", "fixtures", "passed", *STRATEGIES]
    return [header] + [
        [r.family, str(len(r.outcomes)), str(r.passed), *(str(r.passed_in(s)) for s in STRATEGIES)] for r in reports
    ]


def _failure_lines(report: FamilyReport) -> list[str]:
    if report.adapter is None:
        return [f"all {len(report.outcomes)} fixtures: {NO_ADAPTER}"]
    return [f"{o.fixture_id}: {report.reason(o)}" for o in report.failures]


def render_text(reports: Sequence[FamilyReport]) -> str:
    """The table for a terminal, failures with their reasons below, `total: N/M` last."""
    rows = _rows(reports)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    for report in reports:
        failures = _failure_lines(report)
        if failures:
            lines += ["", f"{report.family} failures:", *(f"  {line}" for line in failures)]
    return "\n".join([*lines, "", total_line(reports)]) + "\n"


def _markdown_item(line: str) -> str:
    fixture_id, _, reason = line.partition(": ")
    if fixture_id.startswith("all "):
        return f"- {line}"
    return f"- `{fixture_id}`: {reason.replace('<', chr(92) + '<')}"


def render_markdown(reports: Sequence[FamilyReport]) -> str:
    """The same table as Markdown (docs/conformance.md)."""
    rows = _rows(reports)
    table = [f"| {' | '.join(rows[0])} |", f"|{'|'.join(['---'] + ['---:'] * (len(rows[0]) - 1))}|"]
    table += [f"| {' | '.join(row)} |" for row in rows[1:]]
    lines = [
        "# Conformance: canitoolcall fixtures through the gateway's parsers",
        "",
        "Generated by `scripts/conformance.py --write docs/conformance.md`; `tests/conformance/test_conformance.py`",
        "fails when this file differs from what the script writes. A fixture passes only if it passes in every",
        f"chunking strategy ({', '.join(f'`{s}`' for s in STRATEGIES)}); the strategy columns count the fixtures",
        "that pass in that strategy. Each adapter module in `tests/conformance/adapters/` names its expected",
        "failures with their reason.",
        "",
        *table,
    ]
    for report in reports:
        failures = _failure_lines(report)
        if failures:
            lines += ["", f"## {report.family}: failures", "", *map(_markdown_item, failures)]
    return "\n".join([*lines, "", total_line(reports)]) + "\n"
