"""OAuth access tokens for FCM (herald/adapters/oauth.py): read in UTC whatever ``TZ`` says,
renewed ahead of expiry off the sending path, dropped on a 401, and a refusing token endpoint
asked only a handful of times a minute. The grant itself is faked here (google-auth's call);
the conformance tier runs the real one against the emulator's token endpoint."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from herald.adapters.oauth import (
    BACKOFF_FIRST_S,
    REFRESH_AHEAD_MAX_S,
    AccessTokens,
    TokenUnavailable,
    refresh_ahead_s,
    seconds_left,
)


class Grants:
    """A token endpoint: each grant a new token living ``lifetime_s``, its expiry naive UTC as
    google-auth returns it; it can refuse, stall until let go, or fail to answer."""

    def __init__(self, lifetime_s: float = 3600.0) -> None:
        self.lifetime_s = lifetime_s
        self.count = 0
        self.refuse = False
        self.silent = False
        self.hold = threading.Event()
        self.hold.set()

    def __call__(self) -> tuple[str, datetime | None]:
        self.count += 1
        self.hold.wait(10)
        if self.refuse:
            raise TokenUnavailable("invalid_grant: Invalid JWT Signature.", refused=True)
        if self.silent:
            raise TokenUnavailable("timed out", refused=False)
        expiry = datetime.now(UTC) + timedelta(seconds=self.lifetime_s)
        return f"token-{self.count}", expiry.replace(tzinfo=None)


@pytest.fixture(params=["Asia/Tokyo", "America/Los_Angeles", "UTC"])
def zone(request: pytest.FixtureRequest) -> Iterator[str]:
    """The process's local time zone, as ``TZ`` sets it."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = request.param
    time.tzset()
    yield request.param
    if before is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = before
    time.tzset()


# --- time ------------------------------------------------------------------------------------------
def test_a_naive_expiry_is_read_as_utc() -> None:
    now = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
    assert seconds_left(datetime(2026, 11, 24, 13, 0), now) == 3600
    assert seconds_left(datetime(2026, 11, 24, 13, 0, tzinfo=UTC), now) == 3600


def test_renewal_comes_five_minutes_ahead_or_at_half_life() -> None:
    assert refresh_ahead_s(3600) == REFRESH_AHEAD_MAX_S == 300
    assert refresh_ahead_s(60) == 30


async def test_one_grant_serves_a_whole_token_lifetime_whatever_the_time_zone(zone: str) -> None:
    grants = Grants()
    tokens = AccessTokens(grants)
    headers = {await tokens.header() for _ in range(1000)}
    assert headers == {"Bearer token-1"}
    assert grants.count == 1
    tokens.close()


async def test_an_expired_token_is_never_handed_out_whatever_the_time_zone(zone: str) -> None:
    grants = Grants(lifetime_s=1.0)
    tokens = AccessTokens(grants)
    assert await tokens.header() == "Bearer token-1"
    await asyncio.sleep(1.1)
    assert await tokens.header() != "Bearer token-1"
    tokens.close()


# --- renewal off the sending path ----------------------------------------------------------------
async def test_a_token_is_renewed_before_it_expires_without_anyone_waiting() -> None:
    grants = Grants(lifetime_s=2.0)  # renewed at half life: after 1 s
    tokens = AccessTokens(grants)
    assert await tokens.header() == "Bearer token-1"
    await asyncio.sleep(1.3)
    assert grants.count == 2
    started = time.monotonic()
    assert await tokens.header() == "Bearer token-2"
    assert time.monotonic() - started < 0.05
    tokens.close()


async def test_a_stalled_token_endpoint_delays_nothing_while_the_token_holds() -> None:
    grants = Grants(lifetime_s=4.0)  # renewed after 2 s; valid until ~3.6 s
    tokens = AccessTokens(grants)
    await tokens.header()
    grants.hold.clear()  # the renewal will hang
    await asyncio.sleep(2.2)
    assert grants.count == 2  # the renewal started and hangs
    waits = []
    for _ in range(20):
        started = time.monotonic()
        assert await tokens.header() == "Bearer token-1"
        waits.append(time.monotonic() - started)
        await asyncio.sleep(0.05)
    assert max(waits) < 0.05
    grants.hold.set()
    await asyncio.sleep(0.1)
    assert await tokens.header() == "Bearer token-2"
    tokens.close()


# --- 401 ----------------------------------------------------------------------------------------
async def test_a_rejected_token_is_replaced_once_for_every_request_that_saw_it() -> None:
    grants = Grants()
    tokens = AccessTokens(grants)
    first = await tokens.header()
    for _ in range(50):  # every request on the wire got its 401
        tokens.rejected(first)
    headers = await asyncio.gather(*(tokens.header() for _ in range(50)))
    assert set(headers) == {"Bearer token-2"}
    assert grants.count == 2
    tokens.rejected(first)  # a late 401 for the old token changes nothing
    assert await tokens.header() == "Bearer token-2"
    assert grants.count == 2
    tokens.close()


# --- a refusing or silent token endpoint ----------------------------------------------------------
async def test_a_refused_grant_fails_at_once_and_is_not_asked_again_before_the_back_off() -> None:
    grants = Grants()
    grants.refuse = True
    tokens = AccessTokens(grants)
    for _ in range(100):
        with pytest.raises(TokenUnavailable) as refused:
            await tokens.header()
        assert refused.value.refused
        assert "invalid_grant" in refused.value.message
    assert grants.count == 1
    tokens.close()


async def test_after_the_back_off_the_endpoint_is_asked_again_and_may_have_been_fixed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    grants = Grants()
    grants.refuse = True
    tokens = AccessTokens(grants, clock=lambda: now[0])
    with pytest.raises(TokenUnavailable):
        await tokens.header()
    grants.refuse = False
    now[0] += BACKOFF_FIRST_S + 0.1
    assert await tokens.header() == "Bearer token-2"
    assert grants.count == 2
    tokens.close()


async def test_the_back_off_grows_to_a_handful_of_grants_a_minute() -> None:
    now = [0.0]
    grants = Grants()
    grants.refuse = True
    tokens = AccessTokens(grants, clock=lambda: now[0])
    for _ in range(600):  # ten minutes, a request every second
        with pytest.raises(TokenUnavailable):
            await tokens.header()
        now[0] += 1.0
    assert grants.count <= 5 + 10 * 60 / 60 * 1.25  # 5, 10, 20, 40 s, then at most one a minute
    tokens.close()


async def test_an_endpoint_that_does_not_answer_is_not_a_refusal() -> None:
    grants = Grants()
    grants.silent = True
    tokens = AccessTokens(grants)
    with pytest.raises(TokenUnavailable) as failed:
        await tokens.header()
    assert not failed.value.refused
    tokens.close()


async def test_a_refused_renewal_of_a_rejected_token_is_not_asked_again_by_a_stale_timer(
        ) -> None:
    grants = Grants(lifetime_s=1.0)  # renewal due after 0.5 s
    tokens = AccessTokens(grants)
    header = await tokens.header()
    grants.refuse = True
    tokens.rejected(header)  # a 401: the token is gone, and so is its renewal's timer
    with pytest.raises(TokenUnavailable):
        await tokens.header()
    await asyncio.sleep(0.8)
    assert grants.count == 2  # the grant and the one refused: nothing behind the back-off
    tokens.close()
