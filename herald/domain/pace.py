"""The per-device pace (issue 32, point 4): no device gets more than ``HERALD_DEVICE_RATE_PER_MIN``
messages a minute from Herald, whatever the campaigns and senders, below FCM's own limit of about
240 a minute to one device ("device message rate exceeded", answered ``QUOTA_EXCEEDED``).

A device's pace is one number, the earliest moment its next message may leave (a theoretical
arrival time, as in the generic cell rate algorithm without burst): a message may go when that
moment has come, and moves it one interval (60 s / rate) on; one that may not go yet waits until
then. Two messages to one device so always start at least one interval apart, and any minute holds
at most ``rate`` of them. The store runs this same rule for a whole batch of devices at once
(``herald/adapters/device_pace.py``, a Redis script on Redis' clock); the unit fakes run it here.

A device FCM answered "device message rate exceeded" is held: its earliest moment moves to FCM's
``Retry-After`` (or Herald's back-off) from now, so no campaign sends to it before then.
"""

from __future__ import annotations

from dataclasses import dataclass

FCM_DEVICE_RATE_PER_MIN = 240
"""FCM's own limit to one device, as Google's throttling guide gives it."""


@dataclass(frozen=True, slots=True)
class Reserved:
    """One device's answer: its next earliest moment, and how long this message must wait
    (0: it goes now, and the moment has moved on)."""

    next_ms: int
    wait_ms: int

    @property
    def now(self) -> bool:
        return self.wait_ms == 0


def interval_ms(rate_per_min: float) -> int | None:
    """The least time between two messages to one device; None when the pace is off (0)."""
    if rate_per_min <= 0:
        return None
    return max(1, round(60_000 / rate_per_min))


def reserve(next_ms: int, now_ms: int, interval: int) -> Reserved:
    """A message to a device whose earliest moment is ``next_ms`` (0: none), asked at
    ``now_ms``: it goes now if that moment has come, else it waits for it."""
    if next_ms <= now_ms:
        return Reserved(now_ms + interval, 0)
    return Reserved(next_ms, next_ms - now_ms)


def hold(next_ms: int, now_ms: int, seconds: float) -> int:
    """A device's earliest moment once FCM said it had too many: no sooner than ``seconds``
    from now (and never earlier than it already was)."""
    return max(next_ms, now_ms + round(seconds * 1000))
