"""A model's replicas behind the one Backend interface: choice, health, circuit breakers, retries, deadlines.

- Choice: the least outstanding requests, except that a request whose long prompt prefix a replica
  served recently goes there (its KV cache holds the prefix) unless that replica carries more than
  `affinity_slack` requests above the least loaded.
- Health: an active check of every replica each `health_interval_s`, and a circuit breaker per
  replica fed by the outcome of real requests. A check that goes unanswered in time does not mark down a
  replica that delivered output since the previous check: it is busy, not dead (and the late answer may be
  the gateway's own busy event loop's doing).
- Failover: a connection refused or reset, an answer's head that does not come in time (the HTTP client's
  `head_timeout`), a 429 or a 5xx (a refusal's status, or the one a stream's error event or abort names: the
  replica's failure) or a malformed stream (`MalformedStream`; a first chunk with an id outside the request's
  `vocab_size` is one) moves the request to another replica (never one already tried, at most `max_attempts` in
  all, within the one deadline), but only while nothing has been yielded; a 4xx is the request's own, passed on
  untried elsewhere; with no replica left a malformed stream is a 502 (the replicas are broken, not busy); after
  the first chunk a failure goes to the caller, so a stream never repeats or reorders output. The failed try counts
  for its replica's breaker; the caller's admission (a tenant's reservation) covers every try.
- Deadlines: `request_timeout_s` bounds a request from its first try to its last chunk, and once a
  stream has started, `stall_timeout_s` bounds the silence between two chunks (a hung replica that
  keeps its connection open).
- Drain: a replica that leaves the DNS answer takes no new requests and is closed once its own requests finish.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncIterator, Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from backends.base import Backend, BackendError, GenerateChunk, GenerateRequest, MalformedStream, check_vocabulary
from backends.circuit_breaker import CircuitBreaker
from backends.discovery import DNSService, Resolver, resolve_addresses
from backends.observer import RouterObserver
from backends.prefix_affinity import PrefixAffinity

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RoutingPolicy:
    """How a Router picks, checks and retries replicas."""

    max_attempts: int = 3
    request_timeout_s: float | None = 600.0
    health_interval_s: float = 5.0
    health_timeout_s: float = 2.0
    failure_threshold: int = 3
    """Failed requests in a row that open a replica's circuit breaker."""
    cooldown_s: float = 2.0
    """How long an open breaker waits before its trial request (doubling, up to a minute)."""
    stall_timeout_s: float | None = 60.0
    """Once a stream has started, the longest silence before it counts as stalled (the replica failed)."""
    affinity_min_tokens: int = 256
    affinity_block_tokens: int = 64
    affinity_slack: int = 2


class Replica:
    """One backend server of a model, with its load and health."""

    def __init__(self, url: str, backend: Backend, policy: RoutingPolicy):
        self.url = url
        self.backend = backend
        self.breaker = CircuitBreaker(policy.failure_threshold, policy.cooldown_s)
        self.outstanding = 0
        self.healthy = True
        self.draining = False
        self.delivered = 0
        """Chunks received from this replica (the health check reads it as proof of life)."""
        self._delivered_at_check = 0

    def delivered_since_last_check(self) -> bool:
        """Whether output arrived from this replica since the previous call (the previous health check)."""
        delivered, self._delivered_at_check = self.delivered != self._delivered_at_check, self.delivered
        return delivered

    def eligible(self) -> bool:
        return self.healthy and not self.draining and self.breaker.available()

    def __repr__(self) -> str:
        return f"Replica({self.url}, outstanding={self.outstanding}, healthy={self.healthy})"


class Router(Backend):
    """Routes each generation to one of a model's replicas (a static list, or a DNS name)."""

    def __init__(
        self,
        make_backend: Callable[[str], Backend],
        *,
        urls: list[str] | None = None,
        dns: DNSService | None = None,
        policy: RoutingPolicy = RoutingPolicy(),
        resolve: Resolver = resolve_addresses,
    ):
        if (urls is None) == (dns is None):
            raise ValueError("a Router takes either urls or dns")
        self.policy = policy
        self.observer = RouterObserver()
        """Told of attempts, retries and failures (the gateway sets its metrics here)."""
        self._make_backend = make_backend
        self._dns = dns
        self._resolve = resolve
        self._replicas: list[Replica] = []
        self._affinity: PrefixAffinity[str] = PrefixAffinity(policy.affinity_block_tokens, policy.affinity_min_tokens)
        self._turn = 0
        self._started: asyncio.Task[None] | None = None
        self._up = False
        """The first start finished (its loops run)."""
        self._loops: list[asyncio.Task[None]] = []
        self._closing: set[asyncio.Task[None]] = set()
        if urls is not None:
            self._sync(urls)

    @property
    def replicas(self) -> list[Replica]:
        return list(self._replicas)

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        if not self._up:  # (every request after the first start: no coroutine to await)
            await self._start()
        loop = asyncio.get_running_loop()
        timeout = self.policy.request_timeout_s
        deadline = None if timeout is None else loop.time() + timeout
        stall = self.policy.stall_timeout_s
        hashes = self._affinity.prefix_hashes(request.input_ids)
        tried: list[Replica] = []
        last: BackendError | None = None
        while len(tried) < self.policy.max_attempts:
            replica = self._choose(hashes, tried)
            if replica is None:
                break
            if last is not None:  # a failover: the previous replica failed before any output
                log.warning("request %s failed on %s, moving to %s: %s", request.rid, tried[-1].url, replica.url, last)
                self.observer.retried(tried[-1].url, last)
            tried.append(replica)
            self._affinity.record(hashes, replica.url)
            attempt = _Attempt(self, replica)
            clock = _AttemptClock(loop, deadline)
            vocab = request.vocab_size  # the first chunk's ids checked (None: checked, or nothing to check against)
            try:
                # One try, inline (not a generator of its own: this loop runs once per chunk of every stream);
                # closed in the finally below (as `aclosing` would, without its two awaits per try).
                chunks = replica.backend.generate(request)
                next_chunk = chunks.__anext__  # awaited as it is: `anext(chunks, None)` wraps each await
                try:
                    while True:
                        clock.wait_by(asyncio.current_task(loop))  # with its loop: no getpid() per chunk
                        try:
                            chunk = await next_chunk()
                        except StopAsyncIteration:
                            chunk = None
                        except asyncio.CancelledError:
                            if clock.expired():
                                raise self._timed_out(clock.stalled) from None
                            raise
                        finally:
                            clock.waiting = None
                        if stall is not None:  # from the first chunk on, a silent backend is a stalled one
                            clock.next_chunk_within(stall)
                        if vocab is not None and chunk is not None:  # before any output: a bad id fails over
                            check_vocabulary(chunk, vocab)
                            vocab = None
                        if chunk is None or chunk.finish_reason is not None:
                            attempt.verdict = True  # the caller may close the stream once it has the finish
                        if chunk is None:
                            return
                        replica.delivered += 1
                        attempt.yielded = True
                        yield chunk
                finally:
                    await chunks.aclose()
            except BackendError as e:
                attempt.failed(e)
                if attempt.yielded or not (e.retryable or isinstance(e, MalformedStream)):
                    raise
                last = e
            finally:
                clock.stop()
                attempt.end()
        raise self._unavailable(last, len(tried))

    def _timed_out(self, stalled: bool) -> BackendError:
        """A stream gone silent (502: its replica failed) or a request past its deadline (504: only slow)."""
        if stalled:
            return BackendError(
                f"the backend sent nothing for {self.policy.stall_timeout_s} s in the middle of the answer",
                status=502,
                code="backend_stalled",
            )
        return BackendError(
            f"the request ran past its deadline of {self.policy.request_timeout_s} s", status=504, code="timeout"
        )

    def _choose(self, hashes: list[int], tried: list[Replica]) -> Replica | None:
        replicas = self._replicas
        if len(replicas) == 1:  # (a model of one replica: its pool without a comprehension; only read below)
            pool = replicas if replicas[0] not in tried and replicas[0].eligible() else []
        else:
            pool = [r for r in replicas if r not in tried and r.eligible()]
        if not pool:
            return None
        if len(pool) == 1 and not hashes:  # one replica, a prompt too short for affinity: what the rest would pick
            self._turn += 1
            return pool[0]
        least = min(r.outstanding for r in pool)
        by_url = {r.url: r for r in pool}
        for url in self._affinity.candidates(hashes):
            replica = by_url.get(url)
            if replica is not None and replica.outstanding <= least + self.policy.affinity_slack:
                return replica
        lightest = [r for r in pool if r.outstanding == least]
        self._turn += 1
        return lightest[self._turn % len(lightest)]

    def _unavailable(self, last: BackendError | None, tries: int) -> BackendError:
        """The error when no replica could take the request: 503 with a Retry-After (a 429 passed on; a malformed
        stream a 502)."""
        if isinstance(last, MalformedStream):  # broken, not busy: no Retry-After, no 503
            return last if tries == 1 else MalformedStream(f"{last} (the last of {tries} replicas tried)")
        waits = [r.breaker.retry_in() for r in self._replicas if not r.draining and r.healthy]
        retry_after = max(1, math.ceil(min(waits) if waits else self.policy.health_interval_s))
        if last is not None and last.status == 429:
            last.retry_after = retry_after
            return last
        reason = f"; the last one said: {last}" if last is not None else ""
        return BackendError(
            f"no backend replica could take the request ({tries} tried of {len(self._replicas)}){reason}",
            status=503,
            retryable=True,
            code="backend_unavailable",
            retry_after=retry_after,
        )

    async def ready(self) -> bool:
        await self._start()
        return any(r.eligible() for r in self._replicas)

    async def _start(self) -> None:
        """On first use, in the serving loop: resolve DNS once, then start the health and DNS loops."""
        if self._up:
            return  # every request after the first start: no shield, no await
        if self._started is None:
            self._started = asyncio.get_running_loop().create_task(self._first_start())
        await asyncio.shield(self._started)
        self._up = True

    async def _first_start(self) -> None:
        if self._dns is not None:
            await self._refresh_dns()
            self._loops.append(asyncio.create_task(self._every(self._dns.refresh_s, self._refresh_dns)))
        await self._check_health()
        self._loops.append(asyncio.create_task(self._every(self.policy.health_interval_s, self._check_health)))

    @staticmethod
    async def _every(interval: float, work: Callable[[], object]) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await work()  # type: ignore[misc]
            except Exception:
                log.exception("replica maintenance failed")

    async def _check_health(self) -> None:
        replicas = [r for r in self._replicas if not r.draining]
        states = await asyncio.gather(*(self._probe(r) for r in replicas))
        for replica, state in zip(replicas, states):
            alive = replica.delivered_since_last_check()
            ok = state if state is not None else (replica.healthy and alive)
            if ok != replica.healthy:
                log.warning("replica %s is %s", replica.url, "healthy again" if ok else "unhealthy")
            replica.healthy = ok

    async def _probe(self, replica: Replica) -> bool | None:
        """The replica's answer to its health check; None when none came within `health_timeout_s`."""
        try:
            return await asyncio.wait_for(replica.backend.ready(), self.policy.health_timeout_s)
        except TimeoutError:
            return None
        except OSError:
            return False

    async def _refresh_dns(self) -> None:
        assert self._dns is not None
        urls = await self._dns.urls(self._resolve)
        if urls is not None:
            self._sync(urls)

    def set_urls(self, urls: list[str]) -> None:
        """The replicas are now `urls` (e.g. a restarted worker's new port); the others drain."""
        self._sync(urls)

    def _sync(self, urls: list[str]) -> None:
        """Make the replica set `urls`: new ones join, missing ones drain."""
        known = {r.url: r for r in self._replicas}
        for url in dict.fromkeys(urls):
            if url in known:
                known[url].draining = False
            else:
                log.info("replica %s joined", url)
                self._replicas.append(Replica(url, self._make_backend(url), self.policy))
        for replica in self._replicas:
            if replica.url not in urls and not replica.draining:
                log.info("replica %s left; draining %d requests", replica.url, replica.outstanding)
                replica.draining = True
                if replica.outstanding == 0:
                    self._retire(replica)

    def _retire(self, replica: Replica) -> None:
        """Remove a drained replica and close its connections."""
        if replica not in self._replicas:
            return
        self._replicas.remove(replica)
        self._affinity.forget(replica.url)
        task = asyncio.get_running_loop().create_task(replica.backend.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        for task in self._loops:
            task.cancel()
        for task in self._loops:
            with suppress(asyncio.CancelledError):
                await task
        self._loops.clear()
        if self._closing:
            await asyncio.wait(self._closing)
        for replica in self._replicas:
            await replica.backend.close()


class _Attempt:
    """One try on one replica: counted as outstanding while it runs, its outcome fed to the replica's breaker."""

    def __init__(self, router: Router, replica: Replica):
        self._router = router
        self._replica = replica
        self.verdict: bool | None = None
        """True: the replica did its job; False: it failed; None: no verdict (overloaded, slow, or cut short)."""
        self.yielded = False
        replica.outstanding += 1
        replica.breaker.acquire()
        router.observer.dispatched(replica.url)

    def failed(self, error: BackendError) -> None:
        if self.verdict is None and error.status not in (429, 504):  # overloaded or slow is not broken: no verdict
            self.verdict = error.status < 500
        self._router.observer.failed(self._replica.url, error)

    def end(self) -> None:
        replica = self._replica
        replica.outstanding -= 1
        if self.verdict is True:
            replica.breaker.succeeded()
        elif self.verdict is False:
            replica.breaker.failed()
        else:
            replica.breaker.released()
        if replica.draining and replica.outstanding == 0:
            self._router._retire(replica)


class _AttemptClock:
    """An attempt's deadline and stall limit, kept by one timer rather than one per chunk.

    The limit moves with every chunk (a float store); the timer, set at an older limit, finds the limit moved
    when it fires and sets itself again. It cancels the task only while that task waits for the backend (`waiting`),
    so a consumer holding a chunk is never cancelled; a limit that passed meanwhile counts once the wait starts
    (as a fresh timeout would): the timer is set again, due at once, when the next wait begins.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, deadline: float | None):
        self._loop = loop
        self._deadline = deadline
        self.limit = deadline
        self.stalled = False
        """The limit in force is the stall limit (not the request's deadline)."""
        self.waiting: asyncio.Task[Any] | None = None
        """The task now waiting for the backend (None: no wait under way; `wait_by` starts one)."""
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._cancelled: tuple[asyncio.Task[Any], int] | None = None
        """The task this clock cancelled, and its cancel count before."""

    def wait_by(self, task: asyncio.Task[Any] | None) -> None:
        """`task` starts waiting for the backend (a plain `waiting = None` ends the wait: no call per chunk)."""
        self.waiting = task
        if task is not None and self._timer is None and self.limit is not None:
            self._set_timer(self.limit)

    def next_chunk_within(self, seconds: float) -> None:
        limit = self._loop.time() + seconds
        deadline = self._deadline
        self.stalled = deadline is None or limit < deadline
        self.limit = limit if self.stalled else deadline
        if self._timer is not None and self.limit < self._timer_at:  # the first stall limit, before the deadline
            self._timer.cancel()
            self._timer = None

    def _set_timer(self, when: float) -> None:
        self._timer, self._timer_at = self._loop.call_at(when, self._due), when

    def _due(self) -> None:
        self._timer = None
        limit = self.limit
        if limit is not None and self._loop.time() < limit:
            self._set_timer(limit)
        elif self.waiting is not None and self._cancelled is None:
            self._cancelled = (self.waiting, self.waiting.cancelling())
            self.waiting.cancel()

    def expired(self) -> bool:
        """Whether the cancellation being handled is this clock's own (and only its own: it is then taken back)."""
        if self._cancelled is None:
            return False
        task, before = self._cancelled
        return task.uncancel() <= before

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
