"""Access control: authenticating a presented API key, minting, listing and revoking keys, the
bootstrap admin key, and the append-only operator log.

Keys are looked up by the digest of the presented token, so the api never holds or logs a
secret. A successful lookup is remembered for at most ``KEY_CACHE_S``: a revoked key is refused by
every api replica within that time, without a database read on every request.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from herald.clock import utcnow
from herald.domain.access import (
    KEY_PREFIX,
    SYSTEM,
    Actor,
    ApiKey,
    LogEntry,
    Role,
    Scope,
    allows,
    digest,
    matches,
    new_token,
    outcome_of,
    owner_of_new_key,
    tallied,
)
from herald.domain.documents import new_id
from herald.service_layer.ports import ApiKeyRepository, OperatorLogRepository

log = logging.getLogger(__name__)

KEY_CACHE_S = 0.5
"""How long a key found valid is trusted without reading it again (revocation takes at most
this long to reach every api replica)."""

TOUCH_EVERY = timedelta(minutes=1)
"""``last_used_at`` is written at most this often per key (not once per request)."""


class Unauthenticated(Exception):
    """No key, an unknown one, or one revoked or expired (401)."""


class Forbidden(Exception):
    """The key is valid but its role lacks the scope (403)."""

    def __init__(self, key: ApiKey, scope: Scope) -> None:
        super().__init__(f"the {key.role.value} key {key.name!r} lacks the scope {scope.value!r}")
        self.key = key
        self.scope = scope


class KeyNotFound(LookupError):
    def __init__(self, key_id: str) -> None:
        super().__init__(f"no API key {key_id}")


@dataclass(frozen=True)
class MintedKey:
    key: ApiKey
    token: str
    """The secret, shown to its owner once and stored nowhere."""


class Authenticator:
    """Finds the key behind a presented token, with a short per-replica cache."""

    def __init__(self, keys: ApiKeyRepository,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._keys = keys
        self._monotonic = monotonic
        self._found: dict[str, tuple[ApiKey, float]] = {}

    async def key_for(self, token: str | None) -> ApiKey:
        """The valid key ``token`` is; ``Unauthenticated`` otherwise."""
        if not token:
            raise Unauthenticated("send Authorization: Bearer <API key>")
        hashed = digest(token)
        key = await self._lookup(hashed)
        now = utcnow()
        if key is None or not matches(token, key.secret_hash) or not key.usable_at(now):
            self._found.pop(hashed, None)
            raise Unauthenticated("unknown, revoked or expired API key")
        if key.last_used_at is None or now - key.last_used_at > TOUCH_EVERY:
            await self._keys.touch(key.id, now)
        return key

    async def authorize(self, token: str | None, scope: Scope) -> ApiKey:
        key = await self.key_for(token)
        if not allows(key.role, scope):
            raise Forbidden(key, scope)
        return key

    async def _lookup(self, hashed: str) -> ApiKey | None:
        cached = self._found.get(hashed)
        if cached is not None and self._monotonic() - cached[1] < KEY_CACHE_S:
            return cached[0]
        key = await self._keys.by_digest(hashed)
        if key is not None:
            self._found[hashed] = (key, self._monotonic())
        return key


async def mint_key(keys: ApiKeyRepository, name: str, role: Role, expires_at: datetime | None,
                   by: Actor, owner: str | None = None) -> MintedKey:
    """A new key for ``owner`` (the person it belongs to; None: ``by``'s own person, so an
    admin's key minted for nobody in particular is the admin's for approval)."""
    key_id = new_id()
    token = new_token(key_id)
    key = ApiKey(id=key_id, name=name, role=role, secret_hash=digest(token),
                 created_at=utcnow(), created_by=by, expires_at=expires_at,
                 owner=owner_of_new_key(owner, by))
    await keys.insert(key)
    log.info("API key %s (%s, %s) of %s created by %s", key.prefix, name, role.value,
             key.owner, by.label)
    return MintedKey(key, token)


async def revoke_key(keys: ApiKeyRepository, key_id: str, by: Actor) -> ApiKey:
    revoked = await keys.revoke(key_id, by, utcnow())
    if revoked is None:
        raise KeyNotFound(key_id)
    log.info("API key %s revoked by %s", revoked.prefix, by.label)
    return revoked


async def ensure_bootstrap_key(keys: ApiKeyRepository, token: str) -> ApiKey:
    """The ``admin`` key named ``bootstrap`` with exactly the configured secret.

    Revocation is a fact of the database: a bootstrap key once revoked stays revoked, whatever
    the api is started with; a new secret is the way back in, and retires the bootstrap keys of
    older secrets (a rotation)."""
    now = utcnow()
    key = await keys.ensure_bootstrap(digest(token), now)
    if key.revoked_at is not None:
        log.warning("the configured bootstrap key (%s) was revoked and stays revoked; configure "
                    "a new secret to get an admin key back (docs/access.md: rotating the bootstrap key)",
                    key.prefix)
        return key
    for retired in await keys.retire_bootstraps_before(key, SYSTEM, now):
        log.info("bootstrap key %s_%s revoked: a newer bootstrap secret is configured",
                 KEY_PREFIX, retired)
    return key


class OperatorLog:
    """Appends what operators did, and counts what they were refused (one entry per key,
    action, status and minute, with a count); never edits or deletes anything else."""

    def __init__(self, entries: OperatorLogRepository) -> None:
        self._entries = entries

    async def record(self, *, actor: Actor | None, action: str, status_code: int,
                     target_kind: str | None = None, target_id: str | None = None,
                     campaign_id: str | None = None, address: str | None = None,
                     on_behalf_of: str | None = None, detail: str | None = None) -> LogEntry:
        entry = LogEntry(id=new_id(), at=utcnow(), actor=actor, action=action,
                         outcome=outcome_of(status_code), status_code=status_code,
                         target_kind=target_kind, target_id=target_id, campaign_id=campaign_id,
                         address=address, on_behalf_of=on_behalf_of, detail=detail)
        if actor is not None and tallied(entry.outcome):
            await self._entries.tally(entry)
        else:
            await self._entries.append(entry)
        return entry
