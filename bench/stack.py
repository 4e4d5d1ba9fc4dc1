"""A private Herald stack for the benches that measure the whole system (``bench.pipeline``,
``bench.cancel_latency``): its own nx-27017, FCM emulator, api, dispatcher and senders, started
as ``make up`` starts them, with clients for the api and the emulator, all gone afterwards."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from devstack.isolation import private_stack
from devstack.processes import wait_until
from devstack.stack import Stack
from fcm_emulator.client import EmulatorClient

DEVICES_PER_IMPORT = 10_000
"""Devices per ``POST /v1/devices/bulk`` call."""

Campaign = dict[str, Any]


@dataclass(frozen=True)
class BenchStack:
    stack: Stack
    api: httpx.Client
    emulator: EmulatorClient


@contextlib.contextmanager
def running_stack(senders: int, api_timeout_s: float,
                  extra_env: dict[str, str] | None = None) -> Iterator[BenchStack]:
    """Start a private stack with ``senders`` senders and no scheduler (the benches send now);
    stop it and remove its database, vhost and Redis keys on the way out."""
    with (tempfile.TemporaryDirectory() as run_dir,
          private_stack(Path(run_dir), extra_env=extra_env) as stack):
        stack.start(senders=senders, schedulers=0)
        emulator = EmulatorClient(stack.config.fcm_url)
        try:
            with httpx.Client(base_url=stack.config.api_url, timeout=api_timeout_s,
                              headers=stack.config.api_headers()) as api:
                yield BenchStack(stack, api, emulator)
        finally:
            emulator.close()


def import_devices(api: httpx.Client, devices: Sequence[dict[str, Any]]) -> None:
    """Register ``devices`` through the api, in calls of ``DEVICES_PER_IMPORT``; opted in to
    marketing unless they say otherwise (a bench's campaigns are marketing, the default)."""
    for start in range(0, len(devices), DEVICES_PER_IMPORT):
        batch = [{"marketing_enabled": True, **device}
                 for device in devices[start:start + DEVICES_PER_IMPORT]]
        response = api.post("/v1/devices/bulk", json={"devices": batch})
        response.raise_for_status()


def create_campaign(api: httpx.Client, content: dict[str, Any]) -> str:
    """A campaign to every device with push enabled, sent now; its id."""
    response = api.post("/v1/campaigns", json=content)
    response.raise_for_status()
    return str(response.json()["id"])


def wait_for_campaign(api: httpx.Client, campaign_id: str, reached: Callable[[Campaign], bool],
                      what: str, timeout_s: float, interval_s: float) -> Campaign:
    """Poll the campaign every ``interval_s`` until ``reached`` holds; the campaign as it then was."""
    latest: list[Campaign] = []

    def check() -> bool:
        latest[:] = [fetch_campaign(api, campaign_id)]
        return reached(latest[0])

    wait_until(check, timeout_s, what, interval_s=interval_s)
    return latest[0]


def fetch_campaign(api: httpx.Client, campaign_id: str) -> Campaign:
    return dict(api.get(f"/v1/campaigns/{campaign_id}").json())


