"""Huge pages for the worker's weights, small pages for its KV cache."""

from __future__ import annotations

import os
import subprocess
import sys

import torch

from backends.worker import huge_pages


def test_importing_it_turns_on_torchs_huge_pages_unless_the_environment_says():
    assert os.environ[huge_pages.TORCH_THP_ENV] in ("1", "0")
    code = "import os; from backends.worker import huge_pages; print(os.environ['THP_MEM_ALLOC_ENABLE'])"
    env = {k: v for k, v in os.environ.items() if k != huge_pages.TORCH_THP_ENV}
    run = lambda env: (
        subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    )
    assert run(env) == "1\n"
    assert run({**env, huge_pages.TORCH_THP_ENV: "0"}) == "0\n"


def test_the_kv_cache_memory_can_be_kept_in_small_pages():
    cache = torch.empty(4 << 20, dtype=torch.float32)  # 16 MB, untouched
    expected = sys.platform == "linux"
    assert huge_pages.keep_small_pages(cache.data_ptr(), cache.nbytes) is expected
    assert huge_pages.keep_small_pages(4096, 100) is False  # no whole page in the range
    assert huge_pages.huge_page_mb() >= 0
