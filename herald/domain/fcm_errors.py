"""FCM's answers, and what Herald concludes from each: a recipient's outcome, a retry, a fresh
OAuth token, or a configuration error that stops the whole campaign.

Taken from Google's own description of FCM HTTP v1 (the ErrorCode reference and the
``google.rpc.Status`` error model), not from what Herald's code expects:

=========================  ======  ====================================================  ==========
recorded as                HTTP    what Google says it means                             Herald
=========================  ======  ====================================================  ==========
``UNREGISTERED``           404     the token is no longer valid (FcmError)               token dead
``INVALID_ARGUMENT``       400     an FcmError *about the registration token*            token dead
``SENDER_ID_MISMATCH``     403     the token belongs to another project (FcmError)       excluded
``QUOTA_EXCEEDED``         429     back off, honour ``Retry-After``                      retry
``UNAVAILABLE``            503     retry with exponential back-off                       retry
``INTERNAL``               500     retry with exponential back-off                       retry
``UNAUTHENTICATED``        401     the OAuth token is missing, expired or revoked        refresh
``INVALID_PAYLOAD``        400     INVALID_ARGUMENT not about the token: fix the request  stop
``PERMISSION_DENIED``      403     without FcmError: wrong credentials or project        stop
``THIRD_PARTY_AUTH_ERROR`` 401     APNs certificate or web push key invalid (FcmError)   stop
``NOT_FOUND``              404     without FcmError: the project does not exist          stop
``OAUTH_REFUSED``          -       the service account's token endpoint refused a grant  stop
``TIMEOUT``                -       no answer in time: it may have been delivered         recorded
``CONNECTION_ERROR``       -       no connection: nothing was delivered                  retry
=========================  ======  ====================================================  ==========

"stop" means the campaign stops (every sender, within one window of requests each) and ends
``failed`` with Google's message: the same request would fail for every recipient, and no
token is retired for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class FcmError(StrEnum):
    """An FCM answer as Herald records it: FCM's ``errorCode`` values where FCM gives one, and
    the qualified codes of the table above where Google's status alone says what happened."""

    UNSPECIFIED_ERROR = "UNSPECIFIED_ERROR"
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    UNREGISTERED = "UNREGISTERED"
    SENDER_ID_MISMATCH = "SENDER_ID_MISMATCH"
    QUOTA_EXCEEDED = "QUOTA_EXCEEDED"
    UNAVAILABLE = "UNAVAILABLE"
    INTERNAL = "INTERNAL"
    THIRD_PARTY_AUTH_ERROR = "THIRD_PARTY_AUTH_ERROR"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    INVALID_PAYLOAD = "INVALID_PAYLOAD"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    NOT_FOUND = "NOT_FOUND"
    OAUTH_REFUSED = "OAUTH_REFUSED"
    TIMEOUT = "TIMEOUT"
    CONNECTION_ERROR = "CONNECTION_ERROR"


class Consequence(StrEnum):
    """What an answer means for the request, the recipient and the campaign."""

    RECIPIENT = "recipient"  # this recipient's outcome: recorded failed
    RETRY = "retry"  # back off and send it again
    REAUTH = "reauth"  # fetch a new OAuth token and send it again, once
    STOP = "stop"  # a configuration error: the campaign stops, no token is retired
    UNCERTAIN = "uncertain"  # may have been delivered: recorded, never re-sent blindly


RETRYABLE = frozenset({FcmError.QUOTA_EXCEEDED, FcmError.UNAVAILABLE, FcmError.INTERNAL,
                       FcmError.CONNECTION_ERROR})
"""Worth another try after a back-off (FCM's guidance for 429 and 5xx; nothing was delivered)."""

CONFIGURATION_ERRORS = frozenset({FcmError.INVALID_PAYLOAD, FcmError.PERMISSION_DENIED,
                                  FcmError.THIRD_PARTY_AUTH_ERROR, FcmError.NOT_FOUND,
                                  FcmError.OAUTH_REFUSED})
"""The request, the credentials or the project are wrong: every recipient would get the same
answer. (``UNAUTHENTICATED`` joins them when it survives a fresh token.)"""


def consequence(error: FcmError) -> Consequence:
    """What Herald does about an answer recorded as ``error``."""
    if error in RETRYABLE:
        return Consequence.RETRY
    if error is FcmError.UNAUTHENTICATED:
        return Consequence.REAUTH
    if error in CONFIGURATION_ERRORS:
        return Consequence.STOP
    if error is FcmError.TIMEOUT:
        return Consequence.UNCERTAIN
    return Consequence.RECIPIENT


TOKEN_IS_DEAD = frozenset({FcmError.UNREGISTERED, FcmError.INVALID_ARGUMENT})
"""FCM said the token is bad: the device is retired and never targeted again."""

TOKEN_ERRORS = frozenset(error.value for error in TOKEN_IS_DEAD)
"""Recorded errors (as stored) that say the device's token is dead: sending again fails again."""

TOKEN_UNUSABLE = frozenset({*TOKEN_ERRORS, FcmError.SENDER_ID_MISMATCH.value})
"""Recorded errors after which sending to the token again fails again: dead tokens, and tokens
of another Firebase project. A retry skips them; the gate of a staged rollout counts the second
kind (many at once mean a wrong project)."""


def token_is_dead(error: str | None) -> bool:
    """Whether a recorded outcome's error means the device's token will never work again."""
    return error in TOKEN_ERRORS


def token_is_unusable(error: str | None) -> bool:
    """Whether sending to this recipient again would fail again for its token alone."""
    return error in TOKEN_UNUSABLE


WRONG_PROJECT_MIN_ANSWERS = 20
WRONG_PROJECT_SHARE = 0.5


def wrong_project(mismatched: int, answered: int) -> bool:
    """Whether ``SENDER_ID_MISMATCH`` answers are so many that the credentials, not the tokens,
    are of another project: then nothing is retired and the campaign stops."""
    return answered >= WRONG_PROJECT_MIN_ANSWERS and mismatched >= WRONG_PROJECT_SHARE * answered


def may_retire_mismatched(mismatched: int, answered: int) -> bool:
    """Whether this campaign's ``SENDER_ID_MISMATCH`` tokens may be excluded from later
    audiences: only once enough answers show that most tokens are of this project."""
    return answered >= WRONG_PROJECT_MIN_ANSWERS and not wrong_project(mismatched, answered)


@dataclass(frozen=True, slots=True)
class SendResult:
    """FCM's answer to one request, as the FCM adapter reads it."""

    error: FcmError | None = None
    retry_after_s: float | None = None
    message: str | None = None
    """Google's ``error.message`` (or why no request was made), for the log and the reason."""
    attempted: bool = True
    """False when no request left (no access token): the recipient stays unsent."""
    credential: str | None = None
    """The ``Authorization`` header it was sent with, for a 401 to reject."""
    withheld: bool = False
    """Not sent after all: the last check before the bytes left said no (a cancel, a fence)."""

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def consequence(self) -> Consequence | None:
        return None if self.error is None else consequence(self.error)

    @property
    def retryable(self) -> bool:
        return self.consequence is Consequence.RETRY


SENT = SendResult()
