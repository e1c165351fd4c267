"""xgrammar's grammar compiler loaded without torch (backends/xgrammar_core.py): the same grammars as the whole
package, and a start-up error, not a half-loaded package, when the internals it relies on move. Each load runs in a
child process: it is decided once a process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
import xgrammar as xgr

from backends.checkpoint import load_checkpoint
from backends.xgrammar_compile import compile_grammar, tokenizer_info
from backends.xgrammar_core import WRITTEN_FOR, _LeftOut

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = '{"type": "object", "properties": {"id": {"type": "string", "format": "uuid"}, "n": {"type": "integer"}}}'
REGEX = r"[a-z]{2,5}\d+"
TAG = json.dumps({"type": "structural_tag", "format": {"type": "json_schema", "json_schema": json.loads(SCHEMA)}})
ARGS = repr((SCHEMA, REGEX, TAG))

GRAMMARS = textwrap.dedent(
    f"""
    import json, sys

    from backends.xgrammar_core import without_torch, xgrammar

    without_torch()
    from backends.checkpoint import load_checkpoint
    from backends.xgrammar_compile import compile_grammar, tokenizer_info

    schema, regex, tag = {ARGS}
    x = xgrammar()
    checkpoint = load_checkpoint()
    compiler = x.GrammarCompiler(tokenizer_info(checkpoint, checkpoint.vocab_size), max_threads=1)
    compiled = compile_grammar(compiler, "json_schema", schema)
    ebnf = [str(x.Grammar.from_json_schema(schema)), str(x.Grammar.from_regex(regex)), str(x.Grammar.from_structural_tag(tag))]
    try:
        x.Grammar.from_json_schema("{{")
    except Exception as exc:
        refused = [type(exc).__name__, str(exc).rsplit("] ", 1)[-1]]  # without its time stamp
    import xgrammar as package
    try:
        package.GrammarMatcher
    except AttributeError as exc:
        matcher = str(exc)
    loaded = sorted(m for m in ("torch", "transformers", "numpy") if m in sys.modules)
    print(json.dumps([ebnf, compiled.memory_size_bytes, refused, matcher, loaded]))
    """
)


def run(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=False)


def test_the_torch_free_load_builds_and_compiles_what_the_whole_package_does():
    done = run(GRAMMARS)
    assert done.returncode == 0, done.stderr
    ebnf, size, refused, matcher, loaded = json.loads(done.stdout)
    assert ebnf == [
        str(xgr.Grammar.from_json_schema(SCHEMA)),
        str(xgr.Grammar.from_regex(REGEX)),
        str(xgr.Grammar.from_structural_tag(TAG)),
    ]
    checkpoint = load_checkpoint()
    compiler = xgr.GrammarCompiler(tokenizer_info(checkpoint, checkpoint.vocab_size), max_threads=1)
    assert size == compile_grammar(compiler, "json_schema", SCHEMA).memory_size_bytes
    with pytest.raises(RuntimeError) as caught:
        xgr.Grammar.from_json_schema("{")
    assert refused == [type(caught.value).__name__, str(caught.value).rsplit("] ", 1)[-1]]  # as the package raises it
    assert "GrammarMatcher is not loaded in this process" in matcher
    assert loaded == []


MOVED = textwrap.dedent(
    """
    import sys

    from backends import xgrammar_core
    from gateway.cli import main
    from gateway.process.draining import DrainingServer

    DrainingServer.run = lambda self, sockets=None: None  # a start that got through serves nothing: main() returns 0
    serve = ["serve", "--backend-url", "http://127.0.0.1:9", "--port", "9", "--log-level", "warning"]
    lazy = [*serve, "--no-grammar-warmup"]
    codes = [main(lazy)]  # the pinned layout: checked, not loaded
    xgrammar_core._MODULES += ("moved_away",)  # as if a future xgrammar renamed a module this load imports
    codes += [main(serve), main([*serve, "--grammar-compile-budget", "0"])]  # with compile children, and without
    codes += [main(lazy)]  # without the warm-up: its modules found, not run
    xgrammar_core.WRITTEN_FOR = "0.1.0"  # another xgrammar than the load was written for: loaded at start
    codes += [main(lazy)]
    print(*codes, sorted(m for m in sys.modules if m.split(".")[0] in ("xgrammar", "torch", "transformers")))
    """
)


def test_a_moved_xgrammar_internal_is_a_start_up_error_naming_the_version_it_was_written_for():
    """With the grammar warm-up or without it: never the first grammar request's error."""
    done = run(MOVED)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "1", "1", "1", "1", "[]"]  # refused to start; nothing half-loaded left behind
    assert done.stderr.count("gateway: startup failed: xgrammar") == 4
    assert f"gateway: startup failed: xgrammar {version('xgrammar')} cannot be loaded without torch" in done.stderr
    assert "xgrammar.moved_away" in done.stderr
    assert f"written for xgrammar {WRITTEN_FOR}" in done.stderr
    assert "Traceback" not in done.stderr


WORKER_MOVED = textwrap.dedent(
    """
    from backends import xgrammar_core
    from backends.worker.__main__ import main

    xgrammar_core._MODULES += ("moved_away",)  # as if a future xgrammar renamed a module this load imports
    main(["--device", "cpu", "--threads", "1", "--port", "9"])
    """
)


def test_a_moved_xgrammar_internal_fails_the_workers_start_in_one_line_before_its_weights_load():
    """The bundled worker's start (`python -m backends.worker`), as the gateway's: one line naming the version it
    was written for and what is missing, exit 1; not a traceback after the model has loaded."""
    done = run(WORKER_MOVED)
    assert done.returncode == 1, done.stderr
    last = done.stderr.splitlines()[-1]
    assert last.startswith(f"[worker] error: startup failed: xgrammar {version('xgrammar')} cannot be loaded")
    assert "xgrammar.moved_away" in last and f"written for xgrammar {WRITTEN_FOR}" in last
    assert "Traceback" not in done.stderr and "[worker] loading" not in done.stderr


def test_the_load_was_written_for_the_pinned_xgrammar():
    """A new pin means checking the torch-free load against that version's layout (and updating WRITTEN_FOR)."""
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"xgrammar=={WRITTEN_FOR}" in dependencies
    assert version("xgrammar") == WRITTEN_FOR


def test_only_the_loading_thread_is_refused_torch_and_given_the_transformers_stand_in():
    """A model's checkpoint read meanwhile in another thread (a GGUF's reader imports numpy) imports as usual."""
    left_out = _LeftOut()
    others: list[object] = []
    thread = threading.Thread(target=lambda: others.extend(left_out.find_spec(m) for m in ("numpy", "transformers")))
    thread.start()
    thread.join()
    assert others == [None, None]
    with pytest.raises(ModuleNotFoundError, match="numpy is left out"):
        left_out.find_spec("numpy")
    assert left_out.find_spec("transformers").loader is left_out
    assert left_out.find_spec("tokenizers") is None
