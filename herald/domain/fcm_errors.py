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
``DEVICE_QUOTA_EXCEEDED``  429     QUOTA_EXCEEDED whose ``QuotaFailure`` names the       retry
                                   device's message rate, not the project's             (device)
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

"retry (device)": that device alone is retried later (``Retry-After``, else the back-off), and no
campaign sends to it before then; the rest of the campaign and the project's rate go on as they
were. A 429 is read as the device's only when Google's ``google.rpc.QuotaFailure`` detail says so
(``herald/adapters/fcm.py``): any doubt is the project's quota, which slows everything.

"stop" means the campaign stops (every sender, within one window of requests each) and ends
``failed`` with Google's message: the same request would fail for every recipient, and no
token is retired for it.
"""

from __future__ import annotations

import math
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
    DEVICE_QUOTA_EXCEEDED = "DEVICE_QUOTA_EXCEEDED"
    """``QUOTA_EXCEEDED`` about one device's message rate (a qualified code: FCM's errorCode
    is ``QUOTA_EXCEEDED`` for the project's, a device's and a topic's rate alike)."""
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


RETRYABLE = frozenset({FcmError.QUOTA_EXCEEDED, FcmError.DEVICE_QUOTA_EXCEEDED,
                       FcmError.UNAVAILABLE, FcmError.INTERNAL, FcmError.CONNECTION_ERROR})
"""Worth another try after a back-off (FCM's guidance for 429 and 5xx; nothing was delivered)."""
ONE_DEVICE = frozenset({FcmError.DEVICE_QUOTA_EXCEEDED})
"""Push-back about one device: it holds that device alone. Any other push-back's ``Retry-After``
holds every request of the fleet (the project's quota, an overload)."""

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

ERASED = "HERALD_ERASED"
"""Recorded for a recipient whose person was erased before its chunk was sent: nothing was sent
to them, and nothing ever will be (``herald/service_layer/erasure.py``)."""

TOKEN_UNUSABLE = frozenset({*TOKEN_ERRORS, FcmError.SENDER_ID_MISMATCH.value, ERASED})
"""Recorded errors after which sending to the token again fails again: dead tokens, tokens
of another Firebase project, and erased recipients (who have no token any more). A retry skips
them; the gate of a staged rollout counts the second kind (many at once mean a wrong
project)."""


def token_is_dead(error: str | None) -> bool:
    """Whether a recorded outcome's error means the device's token will never work again."""
    return error in TOKEN_ERRORS


def token_is_unusable(error: str | None) -> bool:
    """Whether sending to this recipient again would fail again for its token alone."""
    return error in TOKEN_UNUSABLE


# --- "another Firebase project": a token's, or the credentials'? ------------------------------------
WRONG_PROJECT_SHARE = 0.9
"""The share of mismatches above which the credentials, not the tokens, are of another project."""
WRONG_PROJECT_Z = 3.09
"""One-sided normal quantile of the Wilson bounds: 99.9% confidence."""
WRONG_PROJECT_MIN_ANSWERS = 50
"""No decision either way before this many telling answers (the bound alone needs 86 to stop)."""


def wilson_bounds(hits: int, trials: int, z: float = WRONG_PROJECT_Z) -> tuple[float, float]:
    """The Wilson score interval of a proportion, ``hits`` of ``trials`` ((0, 1) for none):
    each bound one-sided at the confidence ``z`` gives."""
    if trials == 0:
        return 0.0, 1.0
    share, z2 = hits / trials, z * z
    centre = share + z2 / (2 * trials)
    spread = z * math.sqrt(share * (1 - share) / trials + z2 / (4 * trials * trials))
    scale = 1 + z2 / trials
    low = 0.0 if hits == 0 else (centre - spread) / scale  # exact there, not rounded
    high = 1.0 if hits == trials else (centre + spread) / scale
    return low, high


def wrong_project(mismatched: int, answered: int) -> bool:
    """Whether the credentials, not the tokens, are of another project: then nothing is retired
    and the campaign stops. ``answered`` counts the answers that tell a token's project (accepted,
    or ``SENDER_ID_MISMATCH``; every other answer says nothing of it), ``mismatched`` the second.

    Concluded only when nearly every answer is a mismatch: at least
    :data:`WRONG_PROJECT_MIN_ANSWERS` of them, and the Wilson lower bound of the mismatch share,
    one-sided at 99.9% (:data:`WRONG_PROJECT_Z`), above :data:`WRONG_PROJECT_SHARE` (0.9).

    Why: a project migration leaves a share of old tokens that answer ``SENDER_ID_MISMATCH`` to
    the right credentials (30%, even 70%), and such a campaign must never stop, however small its
    rollout waves or recording groups; and a pod asks again after every group it records, so
    a rule that is right on average is asked thousands of times per campaign. The former rule
    (>= 20 answers, >= 50% mismatched) stopped a 30%-mismatch campaign whenever 10 of its first
    20 answers were mismatches (4.8% of the time at that one check alone), and every 70% one.
    This one, checked after *every* answer (the worst case), stops a campaign with a true
    mismatch share of 70% with probability at most 1.7e-13 over any number of answers, 80% at
    most 3.7e-8, 30% at most 2e-45 (union bounds, per pod and campaign, computed exactly in
    ``tests/unit/test_wrong_project.py``); yet a truly wrong project (every answer a mismatch)
    stops at its 86th telling answer, well within a sender's first window of requests.
    """
    if answered < WRONG_PROJECT_MIN_ANSWERS:
        return False
    return wilson_bounds(mismatched, answered)[0] > WRONG_PROJECT_SHARE


def may_retire_mismatched(mismatched: int, answered: int) -> bool:
    """Whether this campaign's ``SENDER_ID_MISMATCH`` tokens may be excluded from later
    audiences: only once the answers show, with the same confidence, that the credentials are
    of this project (the Wilson upper bound of the mismatch share below
    :data:`WRONG_PROJECT_SHARE`, after :data:`WRONG_PROJECT_MIN_ANSWERS`). Retiring under the
    wrong credentials would retire the audience; every answer a mismatch never allows it."""
    if answered < WRONG_PROJECT_MIN_ANSWERS:
        return False
    return wilson_bounds(mismatched, answered)[1] < WRONG_PROJECT_SHARE


def tells_project(error: str | None) -> bool:
    """Whether an answer tells which project the token is of: accepted (this one), or
    ``SENDER_ID_MISMATCH`` (another); the counts of :func:`wrong_project` are of these."""
    return error is None or error == FcmError.SENDER_ID_MISMATCH


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
