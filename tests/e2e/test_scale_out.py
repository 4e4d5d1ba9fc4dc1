"""Scale-out at reduced size (``bench/scale_out.py`` at full size): 2 api replicas, 2 dispatchers,
4 senders and 3 schedulers on one broker, database and Redis; a 5,000-device campaign while
another is cancelled and a schedule fires; one dispatcher and one sender killed with SIGKILL
mid-way. Every promise is checked from the FCM emulator's own record."""

from __future__ import annotations

from bench.scale_out import SCALED, run_story
from devstack.stack import Stack

DEVICES = 5_000


def test_scaled_out_fleet_survives_kills_and_keeps_every_promise(stack: Stack) -> None:
    figures = run_story(stack, SCALED, DEVICES)
    assert figures.killed and figures.killed[-1] == "sender-1"
    assert figures.problems == [], figures
    assert figures.schedule_runs == 1
