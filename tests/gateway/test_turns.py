"""Requests that arrive together take turns, a few per event-loop iteration, in arrival order (api/turns.py)."""

from __future__ import annotations

import asyncio

from gateway.api.turns import Turns


async def _request(turns: Turns, name: str, log: list[str], work=None) -> None:
    turn = turns.take()
    if turn is not None:
        await turn
    log.append(name)
    if work is not None:
        work()


def _arrive_together(turns: Turns, names: list[str], log: list[str], work: dict | None = None) -> list[str]:
    """`names` started as tasks in one loop iteration (as uvicorn starts the requests of one socket read);
    `log` gets each request's start and what its work woke."""

    async def main() -> None:
        tasks = [asyncio.create_task(_request(turns, n, log, (work or {}).get(n))) for n in names]
        await asyncio.gather(*tasks)

    asyncio.run(main())
    return log


def test_an_answer_woken_by_the_first_request_runs_before_the_second_request_starts() -> None:
    log: list[str] = []
    loop_calls = {"r1": lambda: asyncio.get_running_loop().call_soon(log.append, "answer to r1")}
    _arrive_together(Turns(per_iteration=1, max_wait_s=60), ["r1", "r2", "r3"], log, loop_calls)
    assert log == ["r1", "answer to r1", "r2", "r3"]


def test_without_turns_every_request_starts_before_any_answer() -> None:
    """What the turns change: with every request allowed in one iteration, the answer waits for all of them."""
    log: list[str] = []
    loop_calls = {"r1": lambda: asyncio.get_running_loop().call_soon(log.append, "answer to r1")}
    _arrive_together(Turns(per_iteration=3, max_wait_s=60), ["r1", "r2", "r3"], log, loop_calls)
    assert log == ["r1", "r2", "r3", "answer to r1"]


def test_requests_start_a_few_per_iteration_in_arrival_order() -> None:
    iteration = [0]
    started: list[tuple[str, int]] = []

    async def tick() -> None:
        while True:  # one step per loop iteration
            iteration[0] += 1
            await asyncio.sleep(0)

    async def request(turns: Turns, name: str) -> None:
        turn = turns.take()
        if turn is not None:
            await turn
        started.append((name, iteration[0]))

    async def main() -> None:
        ticker = asyncio.create_task(tick())
        await asyncio.sleep(0)
        turns = Turns(per_iteration=2, max_wait_s=60)
        await asyncio.gather(*(asyncio.create_task(request(turns, f"r{i}")) for i in range(5)))
        ticker.cancel()

    asyncio.run(main())
    assert [name for name, _ in started] == ["r0", "r1", "r2", "r3", "r4"]
    iterations = [i for _, i in started]
    assert iterations[0] == iterations[1] < iterations[2] == iterations[3] < iterations[4]


def test_a_request_alone_starts_at_once_and_a_later_one_too() -> None:
    async def main() -> tuple[object, object]:
        turns = Turns(per_iteration=1, max_wait_s=60)
        first = turns.take()
        await asyncio.sleep(0)  # a later iteration: the turn is free again
        await asyncio.sleep(0)
        return first, turns.take()

    assert asyncio.run(main()) == (None, None)


def test_a_waiter_that_was_cancelled_gives_its_turn_to_the_next() -> None:
    async def main() -> list[str]:
        turns = Turns(per_iteration=1, max_wait_s=60)
        log: list[str] = []
        assert turns.take() is None
        gone = turns.take()
        assert gone is not None
        gone.cancel()  # its request ended while it waited
        await _request(turns, "next", log)
        return log

    assert asyncio.run(main()) == ["next"]


def test_requests_that_waited_too_long_all_start_in_the_next_iteration() -> None:
    def answers(name: str, log: list[str]) -> dict:
        return {name: lambda: asyncio.get_running_loop().call_soon(log.append, f"answer to {name}")}

    log: list[str] = []
    _arrive_together(Turns(per_iteration=1, max_wait_s=0.0), ["r1", "r2", "r3"], log, answers("r2", log))
    assert log == ["r1", "r2", "r3", "answer to r2"]
    log = []
    _arrive_together(Turns(per_iteration=1, max_wait_s=60), ["r1", "r2", "r3"], log, answers("r2", log))
    assert log == ["r1", "r2", "answer to r2", "r3"]
