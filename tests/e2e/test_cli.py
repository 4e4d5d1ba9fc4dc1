"""The ``herald`` command line against a running stack: watch, cancel, audit, retarget."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson

from devstack.stack import Stack
from fcm_emulator.client import EmulatorClient
from tests.e2e.harness import Api, reachable_devices
from tests.support import wait_for

HERALD = str(Path(sys.executable).parent / "herald")


def herald(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HERALD, *args, "--api", stack.config.api_url], capture_output=True,
                          text=True, timeout=120,
                          env={**os.environ, "HERALD_API_KEY": stack.config.api_key})


def test_watch_follows_a_campaign_to_its_end(stack: Stack, api: Api) -> None:
    stack.start(senders=1, schedulers=0)
    api.import_devices(reachable_devices(2_000))
    campaign_id = api.create_campaign()
    watched = herald(stack, "campaigns", "watch", campaign_id)
    assert watched.returncode == 0, watched.stderr
    assert "completed" in watched.stdout
    assert api.campaign(campaign_id)["status"] == "completed"


def test_cancel_audit_and_retarget_from_the_command_line(stack: Stack, api: Api,
                                                         emulator: EmulatorClient) -> None:
    stack.start(senders=2, schedulers=0)
    api.import_devices(reachable_devices(10_000))
    emulator.configure(latency_ms=50)
    campaign_id = api.create_campaign()
    wait_for(lambda: api.campaign(campaign_id)["counts"]["sent"] >= 500, 60, "sending")
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
