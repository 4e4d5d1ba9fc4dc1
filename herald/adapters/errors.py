"""Failures of the infrastructure (a store or the broker unreachable), told apart from bugs.

Work that fails for one of these is handed back to be retried later and never counts as an
attempt towards dead-lettering: an outage must not turn healthy messages into poison.
"""

from __future__ import annotations

import aiormq.exceptions
import pymongo.errors
import redis.exceptions

INFRASTRUCTURE_ERRORS: tuple[type[BaseException], ...] = (
    pymongo.errors.ConnectionFailure,  # AutoReconnect, NetworkTimeout, ServerSelectionTimeout...
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    aiormq.exceptions.AMQPConnectionError,
    aiormq.exceptions.ChannelInvalidStateError,
    ConnectionError,
    TimeoutError,
)
