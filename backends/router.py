"""A model's replicas behind the one Backend interface: choice, health, circuit breakers, retries, deadlines.

- Choice: the least outstanding requests, except that a request whose long prompt prefix a replica
  served recently goes there (its KV cache holds the prefix) unless that replica carries more than
  `affinity_slack` requests above the least loaded.
- Health: an active check of every replica each `health_interval_s`, and a circuit breaker per
  replica fed by the outcome of real requests. A check that goes unanswered in time does not mark down a
  replica that delivered output since the previous check: it is busy, not dead (and the late answer may be
  the gateway's own busy event loop's doing).
- Retries: a connection failure, a 429 or a 5xx moves the request to another replica, but only while
  nothing has been yielded; after the first chunk a failure goes to the caller.
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
from contextlib import aclosing, suppress
from dataclasses import dataclass

from backends.base import Backend, BackendError, GenerateChunk, GenerateRequest
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
        self._loops: list[asyncio.Task[None]] = []
        self._closing: set[asyncio.Task[None]] = set()
        if urls is not None:
            self._sync(urls)

    @property
    def replicas(self) -> list[Replica]:
        return list(self._replicas)

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        await self._start()
        loop = asyncio.get_running_loop()
        timeout = self.policy.request_timeout_s
        deadline = None if timeout is None else loop.time() + timeout
        hashes = self._affinity.prefix_hashes(request.input_ids)
        tried: list[Replica] = []
        last: BackendError | None = None
        while len(tried) < self.policy.max_attempts:
            replica = self._choose(hashes, tried)
            if replica is None:
                break
            tried.append(replica)
            self._affinity.record(hashes, replica.url)
            yielded = False
            try:
                async with aclosing(self._attempt(replica, request, deadline)) as chunks:
                    async for chunk in chunks:
                        yielded = True
                        yield chunk
                return
            except BackendError as e:
                if yielded or not e.retryable:
                    raise
                log.warning("request %s failed on %s, trying another replica: %s", request.rid, replica.url, e)
                self.observer.retried(replica.url, e)
                last = e
        raise self._unavailable(last, len(tried))

    async def _attempt(
        self, replica: Replica, request: GenerateRequest, deadline: float | None
    ) -> AsyncIterator[GenerateChunk]:
        """One try on one replica, its outcome fed to the replica's breaker."""
        replica.outstanding += 1
        replica.breaker.acquire()
        verdict: bool | None = None
        loop = asyncio.get_running_loop()
        stall = self.policy.stall_timeout_s
        self.observer.dispatched(replica.url)
        try:
            async with aclosing(replica.backend.generate(request)) as chunks:
                limit = deadline
                while True:
                    try:
                        async with asyncio.timeout_at(limit):
                            chunk = await anext(chunks, None)
                    except TimeoutError:
                        raise self._timed_out(limit != deadline) from None
                    if stall is not None:  # from the first chunk on, a silent backend is a stalled one
                        limit = loop.time() + stall if deadline is None else min(deadline, loop.time() + stall)
                    if chunk is None or chunk.finish_reason is not None:
                        verdict = True  # the caller may close the stream once it has the finish
                    if chunk is None:
                        return
                    replica.delivered += 1
                    yield chunk
        except BackendError as e:
            if verdict is None and e.status not in (429, 504):  # overloaded or slow is not broken: no verdict
                verdict = e.status < 500
            self.observer.failed(replica.url, e)
            raise
        finally:
            replica.outstanding -= 1
            if verdict is True:
                replica.breaker.succeeded()
            elif verdict is False:
                replica.breaker.failed()
            else:
                replica.breaker.released()
            if replica.draining and replica.outstanding == 0:
                self._retire(replica)

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
        pool = [r for r in self._replicas if r not in tried and r.eligible()]
        if not pool:
            return None
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
        """The error when no replica could take the request: 503 with a Retry-After."""
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
        if self._started is None:
            self._started = asyncio.get_running_loop().create_task(self._first_start())
        await asyncio.shield(self._started)

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
