"""The engine-to-loop hand-off: every event delivered in order, one loop wake-up per burst."""

from __future__ import annotations

import asyncio
import threading

from backends.worker.handoff import LoopMailbox


def _post_from_a_thread(mailbox: LoopMailbox, deliver, items: range) -> None:
    thread = threading.Thread(target=lambda: [mailbox.post(deliver, i) for i in items])
    thread.start()
    thread.join()


def test_a_burst_wakes_the_loop_once_and_keeps_its_order():
    async def scenario() -> tuple[list[int], int]:
        mailbox = LoopMailbox(asyncio.get_running_loop())
        received: list[int] = []
        _post_from_a_thread(mailbox, received.append, range(100))  # the loop is busy meanwhile: one burst
        while len(received) < 100:
            await asyncio.sleep(0)
        _post_from_a_thread(mailbox, received.append, range(100, 103))  # delivered: the next burst wakes it again
        while len(received) < 103:
            await asyncio.sleep(0)
        return received, mailbox.wakeups

    received, wakeups = asyncio.run(scenario())
    assert received == list(range(103))
    assert wakeups == 2
