"""A child process that builds and compiles one model's grammars, so that a compile over its budget can be killed.

xgrammar's compiler is C++ and cannot be interrupted: a thread running it would keep burning a core after the
request was refused. The child is a fork of its server (the gateway, or the bundled worker: it holds the grammar
builder and xgrammar's view of the vocabulary without loading them again) that serves one job at a time over a
socket pair:

    parent → job arguments        child builds the grammar: build(*job) (the gateway's: the family's, on (chat, prompt))
    child  → ("none",) | ("invalid", message, param) | ("too_deep",) | ("failed", traceback) | ("known", grammar)
             | ("built", key)
    parent → True (compile) | False (skip: the parent knows the key is over budget)
    child  → ("compiled", grammar, seconds) | ("uncompilable", grammar, message)
    any step: ("out_of_memory",)  (the job needed more than the child's memory bound)

The compiled grammar itself stays in the child: its JSON serialization can be hundreds of times its size (eight
nested anyOf levels: 3.6 MB compiled, 377 MB of JSON; ten levels ran out of memory).

Its CPU time is read from /proc while it works; the parent kills it past the budget. Its memory is bounded too
(RLIMIT_DATA: what it had at the fork plus `memory_mib`): a schema that grows the compiler past it (xgrammar's
std::bad_alloc, Python's MemoryError) is answered ("out_of_memory",), not a child killed by the kernel's OOM killer
nor the server's memory spent.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import resource
import signal
import stat
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from backends.base import Grammar
from backends.xgrammar_compile import GrammarError, compile_grammar, out_of_memory
from backends.xgrammar_core import xgrammar

if TYPE_CHECKING:
    import xgrammar as xgr

KNOWN_GRAMMARS = 256
"""Grammars a child remembers as compiled within budget (a repeat costs only its build)."""
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
MEMORY_MIB = 512
"""Memory a child may take for its jobs beyond what it had at the fork (MiB). Measured (the least RLIMIT_DATA
headroom that compiles, one thread): an enum of 20,000 strings (past the default CPU budget) fits in 96 MiB on
SmolLM2's 49K vocabulary (not in 50) and in 64 MiB on Qwen3's 151K; 8 nested anyOf levels in 8 MiB; so this is
5x the largest grammar measured. A hostile enum of 2,000 strings x 2,000 characters reaches it after 0.64 CPU-s on
SmolLM2 (a 400 within the 2 s budget) and 86 CPU-s on Qwen3."""


class BuildRefused(ValueError):
    """A build step's refusal of its input, answered as ("invalid", message, param): `param` names where it came
    from."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


def grammar_key(grammar: Grammar) -> str:
    """The grammar's identity for the over-budget and compiled-within-budget memories."""
    return hashlib.sha256(f"{grammar.kind}\0{grammar.text}".encode()).hexdigest()


class CompileProcess:
    """One forked child serving build-and-compile jobs; `kill()` ends it at once, whatever it is doing."""

    def __init__(self, build: Callable[..., Grammar | None], info: xgr.TokenizerInfo, memory_mib: int = MEMORY_MIB):
        ours, theirs = multiprocessing.Pipe()
        context = multiprocessing.get_context("fork")
        args = (theirs, ours, build, info, memory_mib)
        self._process = context.Process(target=_serve, args=args, daemon=True)
        self._process.start()
        theirs.close()
        self.connection = ours

    @property
    def alive(self) -> bool:
        return self._process.is_alive()

    def cpu_seconds(self) -> float:
        """User + system CPU time of the child (all its threads) so far; 0 where /proc cannot tell."""
        try:
            with open(f"/proc/{self._process.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return 0.0
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

    def kill(self) -> None:
        self._process.kill()
        self._process.join(5)
        self.connection.close()


def _serve(
    connection: Connection,
    parents_end: Connection,
    build: Callable[..., Grammar | None],
    info: xgr.TokenizerInfo,
    memory_mib: int,
) -> None:
    """The child: answer jobs until the parent closes its end."""
    parents_end.close()
    _forget_parent(connection)
    _bound_memory(memory_mib)
    compiler = xgrammar().GrammarCompiler(info, max_threads=1, cache_enabled=False)  # loaded: `info` is its
    known: OrderedDict[str, None] = OrderedDict()
    while True:
        try:
            job = connection.recv()
        except (EOFError, OSError):
            return
        try:
            reply = _job(connection, compiler, known, build, *job)
        except MemoryError:
            reply = ("out_of_memory",)
        connection.send(reply)


def _bound_memory(memory_mib: int) -> None:
    """Limit the child's data (heap and private mappings, RLIMIT_DATA) to what it holds now plus `memory_mib`."""
    with open("/proc/self/status") as f:
        held_kib = next(int(line.split()[1]) for line in f if line.startswith("VmData:"))
    limit = held_kib * 1024 + (memory_mib << 20)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


def _job(
    connection: Connection,
    compiler: xgr.GrammarCompiler,
    known: OrderedDict[str, None],
    build: Callable[..., Grammar | None],
    *job: Any,
) -> tuple[Any, ...]:
    try:
        grammar = build(*job)
    except BuildRefused as e:
        return ("invalid", str(e), e.param)
    except RecursionError:  # a builder recursing past Python's limit: the schema, not this child, is at fault
        return ("too_deep",)
    except MemoryError:
        return ("out_of_memory",)
    except Exception:  # noqa: BLE001  (a builder's defect met on this schema: answered, the parent logs it)
        return ("failed", traceback.format_exc())
    if grammar is None:
        return ("none",)
    key = grammar_key(grammar)
    if key in known:
        known.move_to_end(key)
        return ("known", grammar)
    connection.send(("built", key))
    if not connection.recv():
        return ("skipped",)
    started = time.process_time()
    try:
        compile_grammar(compiler, grammar.kind, grammar.text)
    except GrammarError as e:
        if out_of_memory(e.__cause__):
            return ("out_of_memory",)
        return ("uncompilable", grammar, str(e))
    known[key] = None
    while len(known) > KNOWN_GRAMMARS:
        known.popitem(last=False)
    return ("compiled", grammar, time.process_time() - started)


def _forget_parent(keep: Connection) -> None:
    """Drop what the fork copied of its server's serving state: signal handlers that would wake its event loop,
    and its sockets (a listener held open here would accept connections nobody serves after the server closes
    it)."""
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd == keep.fileno():
            continue
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                os.close(fd)
        except OSError:
            pass
