"""OAuth 2 access tokens for FCM from a service account, kept fresh off the sending path.

google-auth makes the grant: the service account's JWT-bearer assertion, signed RS256 with its
private key, posted to the ``token_uri`` of its JSON file, scope ``firebase.messaging``. This
module decides *when*, so that sending never waits for it while a token is valid:

- The expiry google-auth returns is a naive datetime in UTC. It is read as UTC and turned into a
  monotonic deadline at once, so neither the process's ``TZ`` nor a wall-clock step matters.
- A token is renewed in the background before it expires: when ``min(300 s, lifetime / 2)`` is
  left (a one-hour token 5 minutes ahead; at most two grants per token lifetime). A slow or
  stalled token endpoint therefore delays nothing as long as the current token holds.
- A ``401 UNAUTHENTICATED`` on a request (a revoked or expired token) drops that token; the
  request is sent again once with the next one (``rejected``).
- A grant that fails is tried again after a back-off (5 s doubling to 60 s: a handful of grants
  a minute at most); meanwhile, with no valid token, ``header`` fails at once with the last
  failure: ``refused`` when the endpoint answered with an OAuth error (``invalid_grant``: a key
  disabled, deleted, or of another account), which stops the campaign as a configuration error,
  or not when it did not answer (a timeout, a 5xx), which is retried like an FCM outage.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

log = logging.getLogger(__name__)

FCM_SCOPE = "https://www.googleapis.com/auth/firebase.messaging"
GRANT_TIMEOUT_S = 30.0
"""Longest one grant may take (google-auth's own default is 120 s)."""
REFRESH_AHEAD_MAX_S = 300.0
BACKOFF_FIRST_S = 5.0
BACKOFF_MAX_S = 60.0
LIFETIME_UNKNOWN_S = 3000.0
"""Assumed lifetime of a token granted without an expiry (Google always gives one)."""


class TokenUnavailable(Exception):
    """No valid access token: the token endpoint refused (``refused``) or did not answer."""

    def __init__(self, message: str, *, refused: bool) -> None:
        super().__init__(message)
        self.message = message
        self.refused = refused


Grant = Callable[[], tuple[str, datetime | None]]
"""One OAuth grant, blocking: the access token and its expiry (naive UTC, as google-auth gives
it), or ``TokenUnavailable``."""


def service_account_grant(path: Path) -> Grant:
    """Grants for the service account in ``path`` through google-auth (loaded once, here)."""
    import google.auth.exceptions
    import google.auth.transport.requests
    from google.oauth2 import service_account

    credentials = service_account.Credentials.from_service_account_file(  # type: ignore[no-untyped-call]
        str(path), scopes=[FCM_SCOPE])
    request = functools.partial(google.auth.transport.requests.Request(), timeout=GRANT_TIMEOUT_S)

    def grant() -> tuple[str, datetime | None]:
        try:
            credentials.refresh(request)
        except google.auth.exceptions.RefreshError as exc:  # the endpoint answered: no
            raise TokenUnavailable(_short(exc), refused=not getattr(exc, "retryable", False)) \
                from None
        except google.auth.exceptions.TransportError as exc:  # no answer
            raise TokenUnavailable(_short(exc), refused=False) from None
        return str(credentials.token), credentials.expiry

    return grant


def _short(exc: Exception) -> str:
    text = " ".join(str(arg) for arg in exc.args if isinstance(arg, str)) or type(exc).__name__
    return text[:300]


def seconds_left(expiry: datetime | None, now_utc: datetime) -> float:
    """Seconds until ``expiry``, a naive datetime in UTC (google-auth's convention)."""
    if expiry is None:
        return LIFETIME_UNKNOWN_S
    aware = expiry if expiry.tzinfo is not None else expiry.replace(tzinfo=UTC)
    return (aware - now_utc).total_seconds()


def refresh_ahead_s(lifetime_s: float) -> float:
    """How long before expiry a token is renewed: 5 minutes, or half its life if shorter."""
    return min(REFRESH_AHEAD_MAX_S, lifetime_s / 2)


class AccessTokens:
    """The current ``Authorization`` header for FCM, renewed in the background."""

    def __init__(self, grant: Grant, *, clock: Callable[[], float] = time.monotonic,
                 utcnow: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._grant = grant
        self._clock = clock
        self._utcnow = utcnow
        self._header: str | None = None
        self._valid_until = 0.0
        self._refreshing: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._failure: TokenUnavailable | None = None
        self._failures = 0
        self._retry_at = 0.0
        self.grants = 0
        """Grants asked for so far (successful or not)."""

    async def header(self) -> str:
        """``Bearer <token>``; waits only when no valid token is held."""
        if self._header is not None and self._clock() < self._valid_until:
            return self._header
        return await self._fresh()

    def rejected(self, header: str) -> None:
        """FCM answered ``401`` to a request sent with ``header``: do not use it again."""
        if header == self._header:
            self._valid_until = 0.0
            if self._timer is not None:  # the next request asks for one now
                self._timer.cancel()
                self._timer = None

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._refreshing is not None:
            self._refreshing.cancel()

    async def _fresh(self) -> str:
        if self._failure is not None and self._clock() < self._retry_at:
            raise self._failure
        await asyncio.shield(self._refresh())
        if self._header is not None and self._clock() < self._valid_until:
            return self._header
        raise self._failure or TokenUnavailable("the token granted has expired already",
                                                refused=False)

    def _refresh(self) -> asyncio.Task[None]:
        """The grant in progress, or a new one."""
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.get_running_loop().create_task(self._run_grant())
        return self._refreshing

    async def _run_grant(self) -> None:
        self.grants += 1
        try:
            token, expiry = await asyncio.to_thread(self._grant)
        except TokenUnavailable as exc:
            self._failed(exc)
            return
        except Exception as exc:  # the credentials file went bad, say: not worth a crash
            self._failed(TokenUnavailable(_short(exc), refused=True))
            return
        self._granted(token, expiry)

    def _granted(self, token: str, expiry: datetime | None) -> None:
        now = self._clock()
        lifetime = seconds_left(expiry, self._utcnow())
        self._header = f"Bearer {token}"
        self._valid_until = now + lifetime - min(10.0, lifetime / 20)  # transit, clock skew
        self._failure, self._failures = None, 0
        self._schedule(max(0.0, lifetime - refresh_ahead_s(lifetime)))

    def _failed(self, failure: TokenUnavailable) -> None:
        self._failures += 1
        delay = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (self._failures - 1))
        delay *= random.uniform(0.8, 1.0)
        self._failure, self._retry_at = failure, self._clock() + delay
        log.warning("FCM access token not granted (%s; %s); next try in %.0f s", failure.message,
                    "refused" if failure.refused else "no answer", delay)
        if self._header is not None and self._clock() < self._valid_until:
            self._schedule(delay)  # the current token still holds: keep trying in the background
        elif self._timer is not None:  # no token to keep fresh: the next request asks again
            self._timer.cancel()
            self._timer = None

    def _schedule(self, delay_s: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(delay_s, self._refresh)
