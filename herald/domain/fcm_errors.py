"""FCM's error model, and what Herald concludes from each error: retry it, or retire the token.

These are facts about FCM's HTTP v1 contract (``FcmError.errorCode``), used by the sender to
decide what to do next and by the audit to tell a dead token from a failure a retry could fix.
"""

from __future__ import annotations

from enum import StrEnum


class FcmError(StrEnum):
    """FCM's ``FcmError.errorCode`` values, plus the two ways a request can fail before FCM."""

    UNSPECIFIED_ERROR = "UNSPECIFIED_ERROR"
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    UNREGISTERED = "UNREGISTERED"
    SENDER_ID_MISMATCH = "SENDER_ID_MISMATCH"
    QUOTA_EXCEEDED = "QUOTA_EXCEEDED"
    UNAVAILABLE = "UNAVAILABLE"
    INTERNAL = "INTERNAL"
    THIRD_PARTY_AUTH_ERROR = "THIRD_PARTY_AUTH_ERROR"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    TIMEOUT = "TIMEOUT"
    CONNECTION_ERROR = "CONNECTION_ERROR"


RETRYABLE = frozenset({FcmError.QUOTA_EXCEEDED, FcmError.UNAVAILABLE, FcmError.INTERNAL,
                       FcmError.TIMEOUT, FcmError.CONNECTION_ERROR})
"""Worth another try after a backoff (FCM's guidance for 429 and 5xx)."""

TOKEN_IS_DEAD = frozenset({FcmError.UNREGISTERED, FcmError.INVALID_ARGUMENT})
"""The device token will never work again: the device is marked invalid and skipped from then on."""


TOKEN_ERRORS = frozenset(error.value for error in TOKEN_IS_DEAD)
"""Recorded errors (as stored) that say the device's token is dead: sending again fails again."""


def token_is_dead(error: str | None) -> bool:
    """Whether a recorded outcome's error means the device's token will never work again."""
    return error in TOKEN_ERRORS
