"""How long Herald keeps what only served for a while: the api's part of keeping the database
the size it needs (``recover(now)``, run by the api's background loop).

- Idempotency keys expire after ``HERALD_IDEMPOTENCY_TTL_S`` (24 h): a retry with the same key
  within it gets the first answer back; after it, the key is free again (as Stripe's are).
- Test sends' records expire after ``HERALD_RETENTION_DAYS`` (90 days).
- A finished campaign's chunks and deliveries go after the same time, archived first:
  ``archiving.py``, run beside this.

Herald deletes them itself, indexed by their time, rather than through MongoDB TTL indexes: a
TTL index's duration is fixed when it is built (a changed setting would need the index rebuilt),
and chunks and deliveries must be archived before they go, which no TTL index does. (nx-27017
0.8.1 does expire documents through a TTL index, within about a minute as MongoDB's monitor does:
checked on 2026-11-27; an earlier note here said it did not.)
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from herald.service_layer.ports import IdempotencyRepository, TestSendRepository

log = logging.getLogger(__name__)

EVERY_S = 300.0
"""How often the api looks for what expired."""


@dataclass(frozen=True)
class RetentionPolicy:
    idempotency_ttl: timedelta
    test_sends_kept: timedelta


class Retention:
    def __init__(self, idempotency: IdempotencyRepository, test_sends: TestSendRepository,
                 policy: RetentionPolicy) -> None:
        self._idempotency = idempotency
        self._test_sends = test_sends
        self._policy = policy
        self._ran_at = -float("inf")

    async def recover(self, now: datetime) -> None:
        """Delete what expired, at most every ``EVERY_S``."""
        if time.monotonic() - self._ran_at < EVERY_S:
            return
        self._ran_at = time.monotonic()
        keys = await self._idempotency.expire(now - self._policy.idempotency_ttl)
        sends = await self._test_sends.expire(now - self._policy.test_sends_kept)
        if keys or sends:
            log.info("expired %d idempotency keys and %d test sends' records", keys, sends)
