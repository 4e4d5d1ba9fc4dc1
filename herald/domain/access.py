"""Who may do what: scopes (what the code checks), roles (what people hand out), API keys, the
actor of every change, and the operator log's entries.

A key is shown once, as ``hrld_<id>_<secret>``: the id is not secret (it names the key in lists
and logs), the secret is 256 random bits. Only a SHA-256 digest of the whole token is kept, which
is enough for a secret that cannot be guessed (nothing here is a password), and it is compared in
constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

KEY_PREFIX = "hrld"
SECRET_BYTES = 32


class Scope(StrEnum):
    CAMPAIGNS_READ = "campaigns:read"  # campaigns, their audits, live events, estimates
    CAMPAIGNS_CANCEL = "campaigns:cancel"
    CAMPAIGNS_SEND = "campaigns:send"  # create, edit, retarget, retry, amend, correct, test send
    CAMPAIGNS_APPROVE = "campaigns:approve"  # approve another key's large campaign
    SCHEDULES_READ = "schedules:read"
    SCHEDULES_WRITE = "schedules:write"
    DEVICES_WRITE = "devices:write"
    DEVICES_READ = "devices:read"  # a device's tokens in the audit, counts by user, attribute, topic
    PODS_READ = "pods:read"
    OPERATOR_LOG_READ = "operator_log:read"
    KEYS_MANAGE = "keys:manage"


class Role(StrEnum):
    VIEWER = "viewer"  # reads everything
    RESPONDER = "responder"  # the on-call lead: viewer, and stops campaigns; sends nothing
    OPERATOR = "operator"  # marketing: responder, and sends, edits and schedules
    INGEST = "ingest"  # the app backend: registers devices, nothing else
    ADMIN = "admin"  # everything, keys included


_VIEWER = frozenset({Scope.CAMPAIGNS_READ, Scope.SCHEDULES_READ, Scope.PODS_READ,
                     Scope.OPERATOR_LOG_READ})
_RESPONDER = _VIEWER | {Scope.CAMPAIGNS_CANCEL}
_OPERATOR = _RESPONDER | {Scope.CAMPAIGNS_SEND, Scope.CAMPAIGNS_APPROVE, Scope.SCHEDULES_WRITE,
                          Scope.DEVICES_READ}

ROLE_SCOPES: dict[Role, frozenset[Scope]] = {
    Role.VIEWER: _VIEWER,
    Role.RESPONDER: _RESPONDER,
    Role.OPERATOR: _OPERATOR,
    Role.INGEST: frozenset({Scope.DEVICES_WRITE}),
    Role.ADMIN: frozenset(Scope),
}


def allows(role: Role, scope: Scope) -> bool:
    return scope in ROLE_SCOPES[role]


def roles_allowed(scope: Scope) -> list[Role]:
    """The roles whose keys hold ``scope``, in the order of :class:`Role`."""
    return [role for role in Role if allows(role, scope)]


SHOWN_TOKEN_CHARS = 8


def masked_token(token: str) -> str:
    """A device's token as a key without ``devices:read`` sees it (and as every preview shows
    it): ``…`` and its last characters (8, at most half of it), enough to tell tokens apart in
    a list, of no use to send to."""
    return "…" + token[-min(SHOWN_TOKEN_CHARS, len(token) // 2):] if len(token) > 1 else "…"


class ActorKind(StrEnum):
    API_KEY = "api_key"
    AMQP = "amqp"  # a cancel message published to herald.cancel
    SYSTEM = "system"  # Herald itself (a schedule firing, a sweep)


@dataclass(frozen=True, slots=True)
class Actor:
    """Who made a change. ``verified`` is False only for what a caller declared about itself
    (an AMQP cancel without a ``user_id`` property names its sender in ``requested_by``).
    ``owner`` is the person a key belongs to (``ApiKey.person``), recorded with the change: the
    keys of one person are one person for approval."""

    id: str
    name: str
    kind: ActorKind
    verified: bool = True
    owner: str | None = None

    @property
    def person(self) -> str:
        """Who is behind it: its key's owner; an actor recorded before keys had owners (or
        not a key) is a person of its own, its id."""
        return self.owner or self.id

    @property
    def label(self) -> str:
        """How people read it: ``lead (key 6b04…)``, ``amqp:herald-cancel``..."""
        if self.kind is ActorKind.API_KEY:
            return f"{self.name} (key {self.id})"
        return self.name if self.verified else f"{self.name} (unverified)"


SYSTEM = Actor(id="herald", name="herald", kind=ActorKind.SYSTEM)


def amqp_actor(user_id: str | None, declared: str | None) -> Actor:
    """The actor of a cancel message: its AMQP ``user_id`` (RabbitMQ refuses one that is not
    the publishing connection's user, so it is verified), else what the message declares."""
    if user_id:
        return Actor(id=f"amqp:{user_id}", name=f"amqp:{user_id}", kind=ActorKind.AMQP)
    name = f"amqp:{declared}" if declared else "amqp"
    return Actor(id="amqp", name=name, kind=ActorKind.AMQP, verified=False)


OWNER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,99}$"
"""A key's owner: a person's principal (an e-mail address, a login), plain printable text."""

BOOTSTRAP_OWNER = "bootstrap"
"""The owner of every bootstrap key (and so of every key a bootstrap key mints for nobody)."""


@dataclass(frozen=True, slots=True)
class ApiKey:
    id: str
    name: str
    role: Role
    secret_hash: str
    created_at: datetime
    created_by: Actor | None = None
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
    revoked_by: Actor | None = None
    last_used_at: datetime | None = None
    owner: str | None = None
    """The person the key belongs to, named when it was minted (else its minter's person).
    None only for keys minted before owners existed: each is then a person of its own."""

    @property
    def person(self) -> str:
        """Who holds the key, for approval: its owner, or (a key older than owners) its id."""
        return self.owner or self.id

    @property
    def prefix(self) -> str:
        """The key's non-secret beginning, ``hrld_<id>``: enough to recognise it in a list."""
        return f"{KEY_PREFIX}_{self.id}"

    def usable_at(self, now: datetime) -> bool:
        return self.revoked_at is None and (self.expires_at is None or now < self.expires_at)

    def as_actor(self) -> Actor:
        return Actor(id=self.id, name=self.name, kind=ActorKind.API_KEY, owner=self.person)


def owner_of_new_key(named: str | None, minter: Actor) -> str:
    """Whose a new key is: the person the admin named, else the minter's own."""
    return named or minter.person


def new_token(key_id: str) -> str:
    """A fresh secret for key ``key_id``, as shown to its owner once."""
    return f"{KEY_PREFIX}_{key_id}_{secrets.token_urlsafe(SECRET_BYTES)}"


def digest(token: str) -> str:
    """What is stored of a token (and looked up by): its SHA-256, hex."""
    return hashlib.sha256(token.encode()).hexdigest()


def matches(token: str, secret_hash: str) -> bool:
    """Whether ``token`` is the key stored as ``secret_hash``, compared in constant time."""
    return hmac.compare_digest(digest(token), secret_hash)


class LogOutcome(StrEnum):
    """How an operator's request ended, as the operator log records it."""

    DONE = "done"  # 2xx
    REFUSED = "refused"  # 403: the key lacks the scope
    REJECTED = "rejected"  # any other 4xx: unknown, conflicting, invalid, too many
    FAILED = "failed"  # 5xx


def outcome_of(status_code: int) -> LogOutcome:
    if status_code == 403:
        return LogOutcome.REFUSED
    if 400 <= status_code < 500:
        return LogOutcome.REJECTED
    return LogOutcome.FAILED if status_code >= 500 else LogOutcome.DONE


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One line of the append-only operator log: who did what, when, to what, from where."""

    id: str
    at: datetime
    actor: Actor | None
    """None when the request carried no valid key (only refusals have no actor)."""
    action: str
    outcome: LogOutcome
    status_code: int
    target_kind: str | None = None
    target_id: str | None = None
    campaign_id: str | None = None
    address: str | None = None
    on_behalf_of: str | None = None
    detail: str | None = None
    count: int = 1
    """How many calls the entry stands for: the refusals of one key, action and status within
    one minute are one entry (``TALLY_WINDOW_S``), so no client writes thousands of lines."""


TALLY_WINDOW_S = 60


def tallied(outcome: LogOutcome) -> bool:
    """Whether calls that ended so are counted in one entry per key, action, status and minute
    (refusals: 403 and other 4xx) rather than written one by one (changes done, failures)."""
    return outcome in (LogOutcome.REFUSED, LogOutcome.REJECTED)
