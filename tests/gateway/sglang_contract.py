"""SGLang's own /generate contract (sglang/api/v1/api_types.py), loaded without importing the sglang package."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def _load() -> ModuleType:
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the contract tests need `pip install --no-deps sglang==0.5.23 msgspec`")
    path = Path(next(iter(spec.submodule_search_locations))) / "api" / "v1" / "api_types.py"
    module_spec = importlib.util.spec_from_file_location("sglang_api_types", path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module
    module_spec.loader.exec_module(module)
    return module


api_types = _load()
ContractError = api_types.JsonContractError
