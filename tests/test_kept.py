"""The prompt caches' least-recently-used store (gateway/prompts/kept.py)."""

from __future__ import annotations

from gateway.prompts.kept import Kept


def test_the_least_recently_used_goes_first_and_a_get_makes_one_recent() -> None:
    kept: Kept[str, int] = Kept(2)
    kept.keep("a", 1)
    kept.keep("b", 2)
    assert kept.get("a") == 1  # now b is the least recently used
    kept.keep("c", 3)
    assert (kept.get("a"), kept.get("b"), kept.get("c")) == (1, None, 3)


def test_keeping_a_key_again_replaces_its_value_and_none_is_kept_past_the_bound() -> None:
    kept: Kept[tuple[str, bytes], str] = Kept(1)
    kept.keep(("t", b"x"), "one")
    kept.keep(("t", b"x"), "two")
    assert kept.get(("t", b"x")) == "two"
    nothing: Kept[str, str] = Kept(0)
    nothing.keep("a", "text")
    assert nothing.get("a") is None
