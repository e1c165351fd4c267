"""Compile children under a CPU-time budget per job: the gateway's compile budget (gateway/grammars/budget.py) and
the bundled worker's grammars (backends/worker/grammar.py) both run their grammars through one, each answering its
errors in its own shape.

A job goes to a free `CompileProcess` (forked on first use; waiting for a free one is not charged); past `seconds`
of the child's CPU time for the job it is killed (OverBudget), as it is when the job needed more memory than the
child's bound (`memory_mib` past what it had at the fork: backends/compile_process.py; OverBudget too, and a fresh
child takes its place), and when the job's `cancel` event is set
(Cancelled: the client went away). What ran past the budget is remembered by its keys and refused at once
(`("over_budget",)`): the grammar's (once built), so a repeat costs no compile, and the job's own key, a cheap hash
of what the grammar is built from given by the caller (`job(..., key=)`), so a repeat costs no build either (a build
alone can run past the budget, before any grammar key exists). A child stuck or gone, or a pool closed, is
CompilerUnavailable (the caller may try again).
"""

from __future__ import annotations

import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from backends.base import Grammar
from backends.compile_process import MEMORY_MIB, CompileProcess

if TYPE_CHECKING:
    import xgrammar as xgr

DEFAULT_GRAMMAR_COMPILE_S = 2.0
"""CPU seconds a request's grammar may take to build and compile, the gateway's and the bundled worker's default (a
5-tool grammar takes 0.03-0.13 s cold on the families' vocabularies; an enum of 20,000 strings 2.1 s; see
gateway/grammars/budget.py)."""
PROCESSES = 2
"""Children per pool: two requests' grammars compile at once; a third waits for one of them."""
REMEMBERED_OVER_BUDGET = 1024
WALL_FACTOR = 10.0
STUCK_MIN_S = 30.0
"""A child that has neither answered nor gained CPU time for WALL_FACTOR x the budget in wall time (at least
STUCK_MIN_S) is stuck, not busy: one starved of a core on a loaded host still gains some, and its CPU budget ends it."""
POLL_S = 0.01


class OverBudget(Exception):
    """A child's CPU time for one job ran past the budget, or its memory past its bound (the child is killed); `key`
    names the grammar (None: its build alone ran past)."""

    def __init__(self, key: str | None):
        super().__init__(key)
        self.key = key


class Cancelled(Exception):
    """The job's cancel event was set while its child worked (the child is killed)."""


class CompilerUnavailable(Exception):
    """No answer to the job: its child stuck or died, or the pool is closed; try again after `retry_after` s."""

    def __init__(self, message: str, retry_after: int = 1):
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


class CompilePool:
    """Children that build and compile grammars, each job under a CPU-time budget of `seconds` and each child under
    a memory bound of `memory_mib` past what it had at the fork."""

    def __init__(
        self,
        build: Callable[..., Grammar | None],
        tokenizer_info: Callable[[], xgr.TokenizerInfo],
        seconds: float,
        memory_mib: int = MEMORY_MIB,
    ):
        self.seconds = seconds
        self.memory_mib = memory_mib
        self._build = build
        self._tokenizer_info = tokenizer_info
        self._info: xgr.TokenizerInfo | None = None
        self._idle: queue.Queue[CompileProcess | None] = queue.Queue()
        for _ in range(PROCESSES):
            self._idle.put(None)  # a free place; its child is forked on first use
        self._over_budget: OrderedDict[str, None] = OrderedDict()
        """Keys of grammars (and of whatever else a user remembers) known to cost more than the budget."""
        self._lock = threading.Lock()
        self._closed = False

    def job(
        self, *job: Any, key: str | None = None, cancel: threading.Event | None = None
    ) -> tuple[tuple[Any, ...], float]:
        """A child's answer to one job and the CPU seconds it cost. With `key` (what the job builds from, hashed)
        known over budget, ("over_budget",) at once without a child; a job over budget (OverBudget, raised) or
        refused by its grammar's key has `key` remembered, and the grammar's key too once built."""
        if key is not None and self.known_over_budget(key):
            return ("over_budget",), 0.0
        try:
            reply, spent = self._job(*job, cancel=cancel)
        except OverBudget as over:
            self.remember_over_budget(key, over.key)
            raise
        if reply[0] == "over_budget":
            self.remember_over_budget(key)
        return reply, spent

    def _job(self, *job: Any, cancel: threading.Event | None = None) -> tuple[tuple[Any, ...], float]:
        """A free child's answer to one job (forked when needed) and the CPU seconds the job cost it; a child over
        budget (OverBudget), cancelled (Cancelled), stuck or gone is killed."""
        child = self._idle.get()
        try:
            if child is not None and not child.alive:  # killed from outside (its process group signalled)
                child.kill()  # reaps it and closes our end of its pipe
                child = None
            if child is None:
                child = self._fork()
            started_cpu = child.cpu_seconds()
            reply = self._run(child, job, started_cpu, cancel)
            spent = child.cpu_seconds() - started_cpu
        except BaseException:  # over budget, cancelled, stuck or gone: the child's state is unknown, so it goes
            if child is not None:
                child.kill()
            self._idle.put(None)
            raise
        self._idle.put(child)
        return reply, spent

    def prepare(self) -> None:
        """xgrammar's view of the vocabulary built now (loading xgrammar first), not by the first fork."""
        with self._lock:
            if self._info is None:
                self._info = self._tokenizer_info()

    def _fork(self) -> CompileProcess:
        with self._lock:
            if self._closed:
                raise CompilerUnavailable("the server is shutting down")
        self.prepare()
        return CompileProcess(self._build, self._info, self.memory_mib)

    def _run(
        self, child: CompileProcess, job: tuple[Any, ...], started_cpu: float, cancel: threading.Event | None
    ) -> tuple[Any, ...]:
        """The child's answer to one job; OverBudget when its CPU time runs past the budget or its memory past the
        bound."""
        child.connection.send(job)
        reply = self._reply(child, started_cpu, cancel)
        if reply is not None and reply[0] == "out_of_memory":  # the build alone needed too much
            raise OverBudget(None)
        if reply is not None and reply[0] == "built":
            key = reply[1]
            if self.known_over_budget(key):
                child.connection.send(False)
                self._reply(child, started_cpu, cancel)  # ("skipped",)
                return ("over_budget",)
            child.connection.send(True)
            reply = self._reply(child, started_cpu, cancel)
            if reply is None or reply[0] == "out_of_memory":
                raise OverBudget(key)
        if reply is None:  # the build alone ran past the budget
            raise OverBudget(None)
        return reply

    def _reply(
        self, child: CompileProcess, started_cpu: float, cancel: threading.Event | None
    ) -> tuple[Any, ...] | None:
        """The child's next message; None once its CPU time for this job is past the budget."""
        stuck_after = max(STUCK_MIN_S, WALL_FACTOR * self.seconds)
        gained, last_gain = started_cpu, time.monotonic()
        while not child.connection.poll(POLL_S):
            if cancel is not None and cancel.is_set():
                raise Cancelled
            spent = child.cpu_seconds()
            if spent - started_cpu > self.seconds:
                return None
            now = time.monotonic()
            if spent > gained:
                gained, last_gain = spent, now
            elif now - last_gain > stuck_after or not child.alive:
                raise _compiler_failed()
        try:
            return child.connection.recv()
        except EOFError:  # the child died with its answer unsent (killed from outside, or xgrammar crashed)
            raise _compiler_failed() from None

    def known_over_budget(self, key: str) -> bool:
        """Whether `key` (a grammar's, a job's, or any the user remembered) is known to cost more than the budget."""
        with self._lock:
            if key in self._over_budget:
                self._over_budget.move_to_end(key)
                return True
            return False

    def remember_over_budget(self, *keys: str | None) -> None:
        """Remember `keys` (None ones skipped) as costing more than the budget (the most recent 1,024 kept)."""
        with self._lock:
            for key in keys:
                if key is not None:
                    self._over_budget[key] = None
                    self._over_budget.move_to_end(key)
            while len(self._over_budget) > REMEMBERED_OVER_BUDGET:
                self._over_budget.popitem(last=False)

    def close(self) -> None:
        """Kill the idle children (a busy one is killed when its job returns)."""
        with self._lock:
            self._closed = True
        while True:
            try:
                child = self._idle.get_nowait()
            except queue.Empty:
                return
            if child is not None:
                child.kill()


def _compiler_failed() -> CompilerUnavailable:
    return CompilerUnavailable("the grammar compiler failed; try again")
