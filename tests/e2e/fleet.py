"""The default fleet (api, dispatcher, senders) that the end-to-end modules share, and how each
test gets it back whole (``tests/e2e/conftest.py`` makes one per session)."""

from __future__ import annotations

import itertools
from typing import Any

import httpx
from pymongo import MongoClient

from devstack.processes import free_port, wait_until
from devstack.stack import Stack, replica_name
from fcm_emulator.client import EmulatorClient
from tests.e2e.harness import Api

SENDING = ("awaiting_approval", "scheduled", "pending", "in_progress", "paused", "cancelling",
           "finalizing")
"""Statuses in which a campaign may send now or later, or is stopping."""


class Fleet:
    """A module's stack, shared by its tests: api, dispatcher and ``senders`` senders."""

    STORES = ("mongodb", "fcm-emulator")
    LEFT_BEHIND = ("devices", "chunks", "deliveries")
    """What earlier tests' finished campaigns leave and nobody reads again."""
    _tags = itertools.count(1)

    def __init__(self, stack: Stack, senders: int) -> None:
        self.stack = stack
        stack.start(senders=senders, schedulers=0)
        self._services = {"api": "api", "dispatcher": "dispatcher",
                          **{replica_name("sender", i): "sender" for i in range(1, senders + 1)}}
        self._kept: set[str] = set()

    def keep(self, name: str) -> None:
        """Let a process a module added (an api replica with other settings) outlive ``heal``
        until ``release``: its tests share it instead of starting one each."""
        self._kept.add(name)

    def release(self, name: str) -> None:
        self._kept.discard(name)
        process = self.stack.processes.pop(name, None)
        if process is not None:
            process.terminate(timeout_s=15)

    def heal(self) -> None:
        """Stop what a test added (unless a module keeps it), restart what it stopped or
        killed, wait until every restarted worker announced itself and the api is ready; reset
        the emulator and remove the devices, chunks and deliveries of earlier tests."""
        stack = self.stack
        for name in [n for n in stack.processes
                     if n not in self._services and n not in self.STORES and n not in self._kept]:
            stack.processes.pop(name).terminate(timeout_s=15)
        restarted = [stack.start_service(service, name, HERALD_METRICS_PORT=str(free_port()))
                     for name, service in self._services.items()
                     if not stack.processes[name].alive()]
        workers = {process.pid for process in restarted if process.name != "api"}
        wait_until(lambda: workers <= self._live_pids() and self._ready(), 60,
                   "the shared stack to be whole again")
        self._end_leftovers()
        emulator = EmulatorClient(stack.config.fcm_url)
        try:
            emulator.reset()
        finally:
            emulator.close()
        with MongoClient(stack.config.mongodb_url) as client:  # on nx-27017 every audience
            db = client[stack.config.database]                # query scans all devices
            for collection in self.LEFT_BEHIND:
                db[collection].delete_many({})

    def import_own(self, api: Api, population: list[dict[str, Any]]
                   ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """``population`` made the test's own (a topic and a token suffix no other test uses;
        the emulator reads a token's prefix) and imported; it and the audience that selects
        exactly it."""
        topic = f"t{next(self._tags)}"
        own = [{**device, "token": f"{device['token']}-{topic}", "topics": [topic]}
               for device in population]
        api.import_devices(own)
        return own, {"topics": [topic]}

    def _end_leftovers(self) -> None:
        """Cancel what an earlier test left sending (a campaign it did not wait for), and wait
        until nothing sends: its requests would reach the emulator during the next test."""
        config = self.stack.config
        with httpx.Client(base_url=config.api_url, headers=config.api_headers(),
                          timeout=10) as http:
            def sending() -> list[str]:
                page = http.get("/v1/campaigns", params={
                    "status": list(SENDING), "limit": 200}).json()
                return [campaign["id"] for campaign in page["items"]]

            told: set[str] = set()

            def ended() -> bool:
                left = sending()
                for campaign_id in set(left) - told:
                    http.post(f"/v1/campaigns/{campaign_id}/cancel",
                              json={"reason": "left by an earlier test"})
                    told.add(campaign_id)
                return not left

            wait_until(ended, 60, "the earlier tests' campaigns to end")

    def _live_pids(self) -> set[int]:
        try:
            pods = httpx.get(f"{self.stack.config.api_url}/v1/pods", timeout=2,
                             headers=self.stack.config.api_headers()).json()["pods"]
        except (httpx.HTTPError, KeyError, ValueError):
            return set()
        return {int(pod["pid"]) for pod in pods}

    def _ready(self) -> bool:
        try:
            return httpx.get(f"{self.stack.config.api_url}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False
