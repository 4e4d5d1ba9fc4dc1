"""The ``herald`` command line against a running stack: estimate, watch (server-sent events),
cancel, audit, retarget."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson
import pytest

from devstack.stack import REPO, Stack
from fcm_emulator.client import EmulatorClient
from tests.e2e.fleet import Fleet
from tests.e2e.harness import Api, reachable_devices
from tests.support import wait_for

# ``python -m herald_cli`` from the repository root: the code under test, even where the installed
# ``herald`` script belongs to another checkout sharing the virtualenv.
HERALD = [sys.executable, "-m", "herald_cli"]


def herald(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HERALD, *args, "--api", stack.config.api_url], capture_output=True,
                          text=True, timeout=120, cwd=REPO,
                          env={**os.environ, "HERALD_API_KEY": stack.config.api_key})


@pytest.fixture
def stack(shared_stack: Stack) -> Stack:
    return shared_stack


def _progress(line: str) -> tuple[str, int] | None:
    """(status, sent) of one of watch's progress lines (not a terminal: a line per change)."""
    words = line.split()
    return (words[0], int(words[2])) if len(words) == 9 and words[1] == "sent" else None


def test_watch_follows_a_campaign_to_its_end_over_server_sent_events(
        stack: Stack, fleet: Fleet, api: Api, emulator: EmulatorClient) -> None:
    _, audience = fleet.import_own(api, reachable_devices(2_000))
    emulator.configure(latency_ms=100)
    estimated = herald(stack, "audiences", "estimate", "--filter",
                       orjson.dumps({**audience, "push_enabled": True}).decode())
    assert estimated.returncode == 0, estimated.stderr
    assert estimated.stdout.split() == ["2000", "devices"]
    # At most 500/s: 4 s of sending however fast the machine is, so that the watcher (a new
    # Python process, 1-3 s to start) sees progress before the end.
    campaign_id = api.create_campaign(audience=audience, rate_per_s=500)
    watched = herald(stack, "campaigns", "watch", campaign_id)
    assert watched.returncode == 0, watched.stderr
    lines = watched.stdout.strip().splitlines()
    progress = [p for p in map(_progress, lines) if p]
    sent = [count for _, count in progress]
    assert len({count for count in sent if 0 < count < 2_000}) >= 1, watched.stdout
    assert sent == sorted(sent) and progress[-1] == ("completed", 2_000)
    assert lines[-1] == "completed: sent 2000, failed 0, unsent 0 of 2000 targeted"
    assert api.campaign(campaign_id)["status"] == "completed"
    gone = herald(stack, "campaigns", "watch", "0" * 24)
    assert gone.returncode == 1 and "campaign_not_found" in gone.stderr


def test_cancel_audit_and_retarget_from_the_command_line(stack: Stack, fleet: Fleet, api: Api,
                                                         emulator: EmulatorClient) -> None:
    # Capped at 200/s, 4,000 take ~20 s: uncapped, two senders could finish them in the
    # ~2 s the command takes to start, and the cancel found nothing to stop; at 1,500/s (~7 s)
    # a loaded machine started the command too late once (2026-11-27).
    _, audience = fleet.import_own(api, reachable_devices(4_000))
    emulator.configure(latency_ms=50)
    campaign_id = api.create_campaign(audience=audience, rate_per_s=200)
    wait_for(lambda: api.campaign(campaign_id)["counts"]["sent"] >= 200, 60, "sending")
    cancelled = herald(stack, "campaigns", "cancel", campaign_id, "--reason", "broken link",
                       "--by", "lead")
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.strip().splitlines()[-1].startswith("cancelled: sent ")
    campaign = api.campaign(campaign_id)
    assert campaign["cancel"]["requested_by"]["name"] == "bootstrap"  # the key that called
    assert campaign["cancel"]["on_behalf_of"] == "lead"
    unsent = herald(stack, "campaigns", "recipients", campaign_id, "--outcome", "unsent")
    lines = [orjson.loads(line) for line in unsent.stdout.splitlines()]
    assert len(lines) == campaign["counts"]["unsent"] > 0
    emulator.configure(latency_ms=0)
    follow_up = herald(stack, "campaigns", "retarget", campaign_id, "--title", "Fixed")
    assert follow_up.returncode == 0, follow_up.stderr
    done = api.wait_finished(follow_up.stdout.strip())
    assert done["counts"]["sent"] == len(lines)
    again = herald(stack, "campaigns", "cancel", campaign_id)
    gone = herald(stack, "campaigns", "show", "0" * 24)
    assert again.returncode == 0 and "cancelled" in again.stdout
    assert gone.returncode == 1 and "campaign_not_found" in gone.stderr
