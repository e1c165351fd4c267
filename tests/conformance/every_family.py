"""One canitoolcall adapter that serves every family: each fixture goes to its family's adapter module.

canitoolcall's runner starts one worker process per run, and a worker that loads the gateway's families pays
for importing them (xgrammar, torch, transformers: ~3 CPU-s) before its first fixture. One run with this
adapter replays every family's fixtures in one worker; each family's own `Adapter` (from its module in
`tests/conformance/adapters/`) is made on that family's first fixture and answers exactly as it does alone.

    python -m canitoolcall run --engine tests.conformance.every_family:Adapter
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from canitoolcall.adapters import load_adapter
from canitoolcall.adapters.base import ReplayInput, Support, ToolSpec
from canitoolcall.results import ParseResult

from tests.conformance.common import GatewayAdapter
from tests.conformance.report import AdapterModule, adapter_modules


class Adapter(GatewayAdapter):
    """Each call goes to the adapter of the fixture's family (made on first use)."""

    name = "llm-gateway"

    def __init__(self) -> None:
        self._modules: dict[str, AdapterModule] = adapter_modules()
        self._adapters: dict[str, GatewayAdapter] = {}

    def _of(self, family: str) -> GatewayAdapter:
        if family not in self._adapters:
            self._adapters[family] = load_adapter(self._modules[family].engine)
        return self._adapters[family]

    def supports(self, family: str, model: str) -> Support:
        if family not in self._modules:
            return Support(False, f"no adapter module serves {family}")
        return self._of(family).supports(family, model)

    def parser_config(self, raw: ReplayInput) -> dict[str, Any]:
        return self._of(raw.family).parser_config(raw)

    def units(self, raw: ReplayInput) -> list[int]:
        return self._of(raw.family).units(raw)

    def special_token_ids(self, raw: ReplayInput) -> Collection[int] | None:
        return self._of(raw.family).special_token_ids(raw)

    def parse(self, raw: ReplayInput, tools: Sequence[ToolSpec]) -> ParseResult:
        return self._of(raw.family).parse(raw, tools)

    def parse_stream(self, raw: ReplayInput, chunks: Sequence[Sequence[int]], tools: Sequence[ToolSpec]) -> ParseResult:
        return self._of(raw.family).parse_stream(raw, chunks, tools)

    def close(self) -> None:
        for adapter in self._adapters.values():
            adapter.close()
