"""xgrammar's grammar builder and compiler, for a process that runs no model: loaded without torch or transformers.

`import xgrammar` runs the package's `__init__`, which imports its token-mask kernels (torch, at module level in
`matcher.py`, and again through tvm_ffi, which imports torch when it can) and its Hugging Face adapter
(`tokenizer_info.py` imports transformers at module level): ~1.7 CPU-s and ~210 MB of a gateway process's start,
for parts it never calls. A gateway process only builds grammars (`Grammar`), converts a vocabulary
(`TokenizerInfo`, `VocabType`) and compiles (`GrammarCompiler`, in its compile children, forks that inherit what is
loaded here). `without_torch()` (called by `gateway serve` before anything imports xgrammar) makes `xgrammar()`
load just those modules of the installed package: its native library and `exception`, `grammar`, `compiler` and
`tokenizer_info`, the package's own code, with torch, numpy, sentencepiece and tiktoken unimportable to the thread
that loads them (each is an optional import there; other threads import as usual) and transformers a stand-in naming
the two classes `tokenizer_info` imports (used only by `TokenizerInfo.from_huggingface`, which a gateway never
calls; in sys.modules only while `tokenizer_info` loads). Measured on xgrammar 0.2.9, after the gateway's own
imports: 0.1-0.25 CPU-s and ~21 MB of RSS, where the whole package takes ~2 CPU-s and ~243 MB.

The bundled worker runs its model with torch and needs xgrammar's matcher too: `without_transformers()` (called by
the worker's start) makes `xgrammar()` load the same modules and `matcher` (GrammarMatcher and the token bitmask's
functions, whose kernels `apply_token_bitmask_inplace` imports by device, relative to the package), torch and numpy
allowed, transformers still the stand-in: ~0.22 CPU-s and ~20 MB of a worker's start, where the whole package
takes ~0.66 CPU-s and ~44 MB after torch (transformers is 0.59 CPU-s of it). Any other process (the tests) gets the
whole package, as does a process that already imported it (or torch, after `without_torch()`).

A future xgrammar that moves what this relies on fails the load with XGrammarLayoutError naming the version this
was written for, never a half-loaded module: `gateway serve` reports it as a start-up error. Without the grammar
warm-up (which loads it at start), `check_layout()` finds the modules without running them (under 5 ms): any xgrammar
but the one this was written for is loaded at start all the same, so a moved internal still fails the start, not
the first grammar request.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
import types
from importlib.metadata import version
from typing import Any

WRITTEN_FOR = "0.2.9"
"""The xgrammar version (pyproject's pin) whose module layout the torch-free load was written against."""
_LEFT_OUT = ("torch", "numpy", "sentencepiece", "tiktoken")
"""Optional imports of the modules loaded here (tvm_ffi's tensor interop, xgrammar's tokenizer adapters)."""
_LEFT_OUT_WITH_TORCH = ("sentencepiece", "tiktoken")
"""What a model's process (`without_transformers()`) leaves out: it has torch, and numpy with it."""
_MODULES = ("exception", "load_binding", "grammar", "compiler", "tokenizer_info")
"""Loaded in this order: `load_binding` registers the native types the others' bindings name."""
_MATCHER = "matcher"
"""Loaded after them in a model's process."""
_NAMES = {
    "grammar": ("Grammar",),
    "compiler": ("GrammarCompiler", "CompiledGrammar"),
    "tokenizer_info": ("TokenizerInfo", "VocabType"),
    _MATCHER: ("GrammarMatcher", "allocate_token_bitmask", "apply_token_bitmask_inplace"),
}
_REQUIRED = {
    "Grammar": ("from_json_schema", "from_regex", "from_structural_tag", "from_ebnf"),
    "GrammarCompiler": ("compile_json_schema", "compile_regex", "compile_grammar", "compile_structural_tag"),
    "VocabType": ("RAW", "BYTE_LEVEL", "BYTE_FALLBACK"),
    "GrammarMatcher": ("accept_token", "fill_next_token_bitmask", "is_terminated"),
}

_lock = threading.Lock()
_torch_free = False
_with_torch = False
_loaded: Any = None


class XGrammarLayoutError(ImportError):
    """The installed xgrammar cannot be loaded without torch (or transformers): its modules moved (an ImportError:
    no grammar's refusal, which xgrammar raises as RuntimeError or ValueError)."""


def without_torch() -> None:
    """This process runs no model: `xgrammar()` loads only the grammar compiler (call before anything imports it)."""
    global _torch_free
    _torch_free = True


def without_transformers() -> None:
    """This process runs a model with torch (the bundled worker): `xgrammar()` loads the grammar compiler and the
    matcher, not the package's Hugging Face adapters (call before anything imports it)."""
    global _with_torch
    _with_torch = True


def xgrammar() -> Any:
    """xgrammar's `Grammar`, `GrammarCompiler`, `CompiledGrammar`, `TokenizerInfo` and `VocabType`, and after
    `without_transformers()` `GrammarMatcher`, `allocate_token_bitmask` and `apply_token_bitmask_inplace` (the whole
    package, or only those after either call), loaded on the first call."""
    global _loaded
    if _loaded is not None:  # without the lock: a compile child (a fork) may have been forked while another held it
        return _loaded
    with _lock:
        if _loaded is None:
            _loaded = _load()
        return _loaded


def _load() -> Any:
    if "xgrammar" not in sys.modules:
        if _torch_free and "torch" not in sys.modules:
            return _load_parts(_MODULES, _LEFT_OUT, "torch")
        if _with_torch:
            return _load_parts((*_MODULES, _MATCHER), _LEFT_OUT_WITH_TORCH, "transformers")
    return importlib.import_module("xgrammar")


def check_layout() -> None:
    """At start, without loading xgrammar: its modules this load imports are found (not run), and an xgrammar other
    than the one it was written for (whose layout the tests check) is loaded now. XGrammarLayoutError otherwise."""
    if not _torch_free or _loaded is not None:
        return
    installed = version("xgrammar")
    if installed != WRITTEN_FOR:
        xgrammar()
        return
    spec = importlib.util.find_spec("xgrammar")
    where = None if spec is None else spec.submodule_search_locations
    names = [f"xgrammar.{name}" for name in _MODULES]
    missing = (
        names if where is None else [n for n in names if importlib.machinery.PathFinder.find_spec(n, where) is None]
    )
    if missing:
        raise _layout_error(installed, ImportError(f"no module {', '.join(missing)}"), "torch")


def _layout_error(installed: str, cause: Exception, without: str) -> XGrammarLayoutError:
    return XGrammarLayoutError(
        f"xgrammar {installed} cannot be loaded without {without} ({type(cause).__name__}: {cause}); this "
        f"gateway's partial load of xgrammar was written for xgrammar {WRITTEN_FOR} (pyproject's pin): install that "
        "version"
    )


def _load_parts(load: tuple[str, ...], left_out: tuple[str, ...], without: str) -> types.SimpleNamespace:
    """xgrammar's modules `load` and their `_NAMES`, its `__init__` not run, `left_out` refused to this thread."""
    installed = version("xgrammar")
    try:
        spec = importlib.util.find_spec("xgrammar")
        if spec is None or spec.submodule_search_locations is None:
            raise ImportError("no xgrammar package")
        package = importlib.util.module_from_spec(spec)  # its __init__ is not run
        modules = _load_modules(package, load, left_out)
        names = {name: getattr(modules[module], name) for module in load for name in _NAMES.get(module, ())}
        missing = [
            f"{owner}.{attr}"
            for owner, attrs in _REQUIRED.items()
            if owner in names
            for attr in attrs
            if not hasattr(names[owner], attr)
        ]
        if missing:
            raise AttributeError(f"missing {', '.join(missing)}")
    except Exception as exc:  # whatever a changed layout raises, reported as one error
        for name in [m for m in sys.modules if m == "xgrammar" or m.startswith("xgrammar.")]:
            del sys.modules[name]
        raise _layout_error(installed, exc, without) from exc
    for name, value in names.items():
        setattr(package, name, value)
    package.__getattr__ = _not_loaded  # `import xgrammar` here finds this package: anything else is named as left out
    return types.SimpleNamespace(**names)


def _load_modules(
    package: types.ModuleType, load: tuple[str, ...], left_out: tuple[str, ...]
) -> dict[str, types.ModuleType]:
    """xgrammar's modules `load` imported into `package`, `left_out` refused to this thread, transformers a stand-in."""
    finder = _LeftOut(left_out)
    sys.meta_path.insert(0, finder)
    sys.modules["xgrammar"] = package
    try:
        return {name: importlib.import_module(f"xgrammar.{name}") for name in load}
    finally:
        sys.meta_path.remove(finder)
        if finder.stand_in is not None and sys.modules.get("transformers") is finder.stand_in:
            del sys.modules["transformers"]


class _LeftOut(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """For the thread that made it: `left_out` not found, transformers a stand-in with the two classes xgrammar's
    `tokenizer_info` imports. Other threads' imports pass by."""

    def __init__(self, left_out: tuple[str, ...] = _LEFT_OUT) -> None:
        self.thread = threading.get_ident()
        self.left_out = left_out
        self.stand_in: types.ModuleType | None = None

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if threading.get_ident() != self.thread:
            return None
        if name in self.left_out:
            raise ModuleNotFoundError(f"{name} is left out of xgrammar's partial load", name=name)
        return importlib.util.spec_from_loader(name, self) if name == "transformers" else None

    def exec_module(self, module: types.ModuleType) -> None:
        module.PreTrainedTokenizerBase = type("PreTrainedTokenizerBase", (), {})  # type: ignore[attr-defined]
        module.PreTrainedTokenizerFast = type("PreTrainedTokenizerFast", (module.PreTrainedTokenizerBase,), {})  # type: ignore[attr-defined]
        self.stand_in = module


def _not_loaded(name: str) -> Any:
    raise AttributeError(
        f"xgrammar.{name} is not loaded in this process: it loaded only xgrammar's grammar compiler (and, with a "
        "model, its matcher), not the whole package (backends/xgrammar_core.py)"
    )
