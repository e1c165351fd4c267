"""The id formats clients see, all drawn from `random_hex`."""

from __future__ import annotations

import re

from gateway.ids import item_id, new_call_id, new_id, random_hex


def test_random_hex_is_fresh_hex_of_the_asked_length() -> None:
    assert re.fullmatch(r"[0-9a-f]{32}", random_hex())
    assert re.fullmatch(r"[0-9a-f]{24}", random_hex(12))
    assert random_hex() != random_hex()


def test_each_door_keeps_its_id_format() -> None:
    assert re.fullmatch(r"chatcmpl-[0-9a-f]{32}", new_id("chatcmpl"))
    assert re.fullmatch(r"resp_[0-9a-f]{32}", item_id("resp"))
    assert re.fullmatch(r"call_[0-9a-f]{24}", new_call_id())
