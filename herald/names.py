"""Every name Herald puts on the wire or in a store, in one place.

Queue, exchange, collection and Redis key names are part of the contract with operators (they appear
in dashboards, in ``rabbitmqctl list_queues`` and in runbooks), so they are never spelled out anywhere
else in the code.
"""

from __future__ import annotations

# --- RabbitMQ -------------------------------------------------------------------------------------
CANCEL_EXCHANGE = "herald.cancel"
"""Fanout exchange: a cancel message published here reaches every live pod at once."""

DISPATCH_QUEUE = "herald.dispatch"
"""Work queue of campaigns ready to be paged into chunks (a wake-up hint; MongoDB holds the truth)."""

CHUNKS_QUEUE = "herald.chunks"
"""Work queue of the ``standard`` lane's chunk messages, consumed by senders."""
URGENT_CHUNKS_QUEUE = "herald.chunks.urgent"
"""The ``urgent`` lane's chunks: consumed on a channel of their own, started first."""
BULK_CHUNKS_QUEUE = "herald.chunks.bulk"
"""The ``bulk`` lane's chunks."""
PACED_CHUNKS_QUEUE = "herald.chunks.paced"
"""Chunks of capped campaigns (standard and bulk): held by senders while they wait for their
campaign's rate, with a prefetch of their own, so they never take a place another campaign
needs (``herald/domain/lanes.py``)."""

CHUNK_QUEUES = {"urgent": URGENT_CHUNKS_QUEUE, "standard": CHUNKS_QUEUE,
                "bulk": BULK_CHUNKS_QUEUE, "paced": PACED_CHUNKS_QUEUE}
"""The chunk queue of each route (``herald.domain.lanes.Route``)."""

DEAD_LETTER_EXCHANGE = "herald.dead-letter"
"""Direct exchange receiving rejected messages, routed by the kind of message."""

DEAD_CHUNKS_QUEUE = "herald.chunks.dead"
DEAD_CHUNKS_ROUTING_KEY = "chunks"

DEAD_MESSAGES_QUEUE = "herald.dead"
"""Malformed dispatch and chunk messages land here, for an operator to read."""
DEAD_MESSAGES_ROUTING_KEY = "malformed"
DEAD_MESSAGES_POLICY = "herald-dead-bound"
"""The broker policy that bounds ``herald.dead`` (``devstack/broker_users.py``)."""

DEAD_CANCELS_QUEUE = "herald.dead.cancel"
"""Malformed messages published to ``herald.cancel``: a place of their own, so that whoever may
publish a cancel cannot push out of ``herald.dead`` what operators keep there."""
DEAD_CANCELS_ROUTING_KEY = "cancel"
DEAD_CANCELS_POLICY = "herald-dead-cancel-bound"


def pod_cancel_queue(pod_id: str) -> str:
    """Name of a pod's own exclusive queue bound to the cancel exchange."""
    return f"herald.cancel.{pod_id}"


# --- MongoDB collections --------------------------------------------------------------------------
DEVICES = "devices"
CAMPAIGNS = "campaigns"
CHUNKS = "chunks"
DELIVERIES = "deliveries"
SCHEDULES = "schedules"
IDEMPOTENCY_KEYS = "idempotency_keys"
API_KEYS = "api_keys"
OPERATOR_LOG = "operator_log"
TEST_SENDS = "test_sends"
ARCHIVE_ERASURES = "archive_erasures"
"""People erased after archives that list them were written, until those are rewritten."""


FLEET_RATE_BUCKET = "fcm"
"""Scope of the fleet-wide FCM token bucket (``RedisKeys.rate_bucket``)."""
BULK_RATE_BUCKET = "fcm-bulk"
"""Scope of the ``bulk`` lane's share of the FCM rate (the rest is kept for urgent sends)."""


# --- Redis keys -----------------------------------------------------------------------------------
class RedisKeys:
    """Redis key names, namespaced by stack so several stacks can share one Redis database.

    The namespace is the MongoDB database name: a stack is its database, so keys of two stacks on
    the same Redis never meet.
    """

    def __init__(self, namespace: str) -> None:
        self.prefix = f"herald:{namespace}:"

    def everything(self) -> str:
        """A pattern matching every key of the namespace (to clean a test's keys up)."""
        return f"{self.prefix}*"

    def cancel_flag(self, campaign_id: str) -> str:
        return f"{self.prefix}cancel:{campaign_id}"

    def cancel_flag_pattern(self) -> str:
        return f"{self.prefix}cancel:*"

    def pod(self, pod_id: str) -> str:
        return f"{self.prefix}pod:{pod_id}"

    def pod_pattern(self) -> str:
        return f"{self.prefix}pod:*"

    def rate_bucket(self, scope: str) -> str:
        return f"{self.prefix}rate:{scope}"

    def fleet_rate(self) -> str:
        """What the fleet sends in a second, per sender, as last measured (a hash)."""
        return f"{self.prefix}fleet-rate"

    def api_rate_bucket(self, scope: str) -> str:
        """Calls a key may still make from one of its budgets (``<key id>:<budget>``)."""
        return f"{self.prefix}api-rate:{scope}"

    def auth_failures(self, address: str) -> str:
        """Failed authentications a client address may still make."""
        return f"{self.prefix}auth-failures:{address}"

    def event_streams(self, key_id: str) -> str:
        """The event streams a key holds open (a sorted set: stream id by last sign of life)."""
        return f"{self.prefix}event-streams:{key_id}"

    def frequency_cap(self, person_digest: str) -> str:
        """One person's marketing sends within the cap's windows (a sorted set: send key by
        the time it was counted, ``herald/adapters/frequency_caps.py``)."""
        return f"{self.prefix}cap:{person_digest}"

    def device_pace(self, token_digest: str) -> str:
        """One device's earliest moment for its next message (milliseconds of Redis' clock;
        ``herald/adapters/device_pace.py``), gone once it has passed."""
        return f"{self.prefix}pace:{token_digest}"

    def first_seen(self, kind: str, digest: str) -> str:
        """A broadcast one pod already acted on (one copy, not one per pod): a malformed
        message dead-lettered (``malformed``), an outside tool's request decided (``request``)."""
        return f"{self.prefix}{kind}:{digest}"
