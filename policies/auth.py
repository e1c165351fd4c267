"""Who is calling: the API key of a request (Authorization: Bearer, api-key, x-api-key), checked by
its SHA-256 against the policy store. The tenant comes from the key only; raw keys are never kept."""

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


def presented_key(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The key of `Authorization: Bearer KEY`, else `api-key: KEY`, else `x-api-key: KEY`; AuthError when one of
    these headers comes several times with different values (which key counts would be a guess)."""
    values: dict[bytes, bytes] = {}
    for name, value in headers:
        if name in KEY_HEADERS and values.setdefault(name, value) != value:
            raise AuthError(f"several different '{name.decode()}' headers: send one API key")
    authorization = values.get(b"authorization")
    if authorization is not None:
        scheme, _, value = authorization.decode("latin-1").strip().partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    for name in (b"api-key", b"x-api-key"):
        value = values.get(name, b"").decode("latin-1").strip()
        if value:
            return value
    return None


def authenticate(store: PolicyStore, headers: Iterable[tuple[bytes, bytes]], today: dt.date | None = None) -> Caller:
    """The caller of a request; AuthError when it has no valid key."""
    key = presented_key(headers)
    if key is None:
        raise AuthError("no API key: send 'Authorization: Bearer YOUR_KEY' (or an 'api-key' or 'x-api-key' header)")
    digest = hash_key(key)
    found = store.lookup(digest)
    if found is None or not hmac.compare_digest(found[1].sha256, digest):
        raise AuthError("the API key is not valid")
    policy, entry = found
    if entry.expired(today or dt.datetime.now(dt.UTC).date()):
        raise AuthError(f"the API key {entry.id!r} expired on {entry.expires.isoformat()}")
    return Caller(policy, entry)
