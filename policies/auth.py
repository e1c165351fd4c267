"""Who is calling: the API key of a request (Authorization: Bearer, api-key, x-api-key), checked by
its SHA-256 against the policy store. The tenant comes from the key only; raw keys are never kept.

A request may carry different credentials in those headers: Claude Desktop's Claude Code tab sends its own Anthropic
session token as `Authorization: Bearer sk-ant-oat...` beside the gateway's key in `x-api-key`, and a proxy in front
may add an `Authorization` of its own. The key is the one this gateway knows; two different keys it knows (of one
tenant or two) are a 401, since which one counts would be a guess. No header outranks another.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass

from policies.policy import Key, Policy
from policies.store import PolicyStore

TENANT_HEADERS = frozenset({b"x-tenant-id", b"x-llm-d-inference-fairness-id", b"x-gateway-tenant", b"x-tenant"})
"""Headers that would name a tenant or fairness id: a client cannot set them; they are dropped."""
KEY_HEADERS = frozenset({b"authorization", b"api-key", b"x-api-key"})


class AuthError(Exception):
    """401: no key, an unknown key, or an expired one (the message says which)."""


@dataclass(frozen=True)
class Caller:
    """An authenticated request's tenant policy and key (the policy it is admitted under)."""

    policy: Policy
    key: Key


def hash_key(key: str) -> str:
    """The hex SHA-256 of a key, as policy files hold it."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def presented_keys(headers: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """Each distinct key sent (`Authorization: Bearer KEY`, `api-key: KEY`, `x-api-key: KEY`) → the header that
    brought it first; AuthError when one of these headers comes several times with different values."""
    values: dict[bytes, bytes] = {}
    for name, value in headers:
        if name in KEY_HEADERS and values.setdefault(name, value) != value:
            raise AuthError(f"several different '{name.decode()}' headers: send one API key")
    keys: dict[str, str] = {}
    for name in (b"authorization", b"api-key", b"x-api-key"):
        text = values.get(name, b"").decode("latin-1").strip()
        if name == b"authorization":
            scheme, _, text = text.replace("\t", " ").partition(" ")  # RFC 7235 says SP; clients send HTAB too
            text = text.strip() if scheme.lower() == "bearer" else ""
        if text:
            keys.setdefault(text, name.decode())
    return keys


def _known(store: PolicyStore, key: str) -> tuple[Policy, Key] | None:
    digest = hash_key(key)
    found = store.lookup(digest)
    return found if found is not None and hmac.compare_digest(found[1].sha256, digest) else None


def authenticate(store: PolicyStore, headers: Iterable[tuple[bytes, bytes]], today: dt.date | None = None) -> Caller:
    """The caller of a request: the one key of this gateway among those sent; AuthError when there is none, or
    several different ones."""
    keys = presented_keys(headers)
    if not keys:
        raise AuthError("no API key: send 'Authorization: Bearer YOUR_KEY' (or an 'api-key' or 'x-api-key' header)")
    known = [(header, found) for key, header in keys.items() if (found := _known(store, key)) is not None]
    if not known:
        raise AuthError("the API key is not valid")
    if len(known) > 1:
        headers_named = " and ".join(f"'{header}'" for header, _ in known)
        raise AuthError(f"different API keys in {headers_named}: send one API key")
    policy, entry = known[0][1]
    if entry.expired(today or dt.datetime.now(dt.UTC).date()):
        raise AuthError(f"the API key {entry.id!r} expired on {entry.expires.isoformat()}")
    return Caller(policy, entry)
