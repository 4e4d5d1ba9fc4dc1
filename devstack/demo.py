"""``make demo``: 50,000 synthetic devices, one campaign to those with push enabled, live
progress, and a summary checked against the FCM emulator's own count."""

from __future__ import annotations

import random
import string
import sys
import time
from datetime import datetime
from typing import Any

import httpx

from fcm_emulator.client import EmulatorClient

TERMINAL = {"completed", "failed", "cancelled", "missed"}
BULK_SIZE = 10_000


def synthetic_devices(count: int, seed: int = 2026) -> list[dict[str, Any]]:
    """Realistic-looking devices: FCM-sized tokens, 20% push disabled, some dead tokens."""
    rnd = random.Random(seed)
    alphabet = string.ascii_letters + string.digits + "-_"
    devices = []
    for i in range(count):
        body = "".join(rnd.choices(alphabet, k=140))
        roll = rnd.random()
        prefix = "unregistered-" if roll < 0.02 else "invalid-" if roll < 0.025 else ""
        devices.append({
            "token": f"{prefix}d{i:06d}:{body}", "user_id": f"user-{i // 2:06d}",
            "platform": rnd.choice(["android", "android", "ios", "web"]),
            "push_enabled": rnd.random() >= 0.2, "marketing_enabled": rnd.random() < 0.5,
            "topics": rnd.sample(["news", "sports", "live", "offers"], k=rnd.randint(0, 3)),
            "locale": rnd.choice(["en-US", "ko-KR", "es-ES"]),
            "timezone": rnd.choice(["America/New_York", "Asia/Seoul", "Europe/Madrid"]),
            "attributes": {"gender": rnd.choice("fm"), "birth_year": rnd.randint(1950, 2008)},
        })
    return devices


def import_devices(api: httpx.Client, devices: list[dict[str, Any]]) -> float:
    started = time.monotonic()
    for start in range(0, len(devices), BULK_SIZE):
        response = api.post("/v1/devices/bulk", json={"devices": devices[start:start + BULK_SIZE]})
        response.raise_for_status()
    return time.monotonic() - started


def watch(api: httpx.Client, campaign_id: str) -> dict[str, Any]:
    """Poll the campaign, drawing a progress bar, until it reaches a final status."""
    while True:
        campaign = api.get(f"/v1/campaigns/{campaign_id}").raise_for_status().json()
        _draw(campaign)
        if campaign["status"] in TERMINAL:
            print()
            return dict(campaign)
        time.sleep(0.25)


def _draw(campaign: dict[str, Any]) -> None:
    counts = campaign["counts"]
    done = counts["sent"] + counts["failed"]
    share = done / counts["targeted"] if counts["targeted"] else 0.0
    bar = "#" * int(share * 40)
    line = (f"\r  [{bar:<40}] {share:6.1%}  {campaign['status']:<11} sent {counts['sent']:>6}"
            f"  failed {counts['failed']:>5}  of {counts['targeted']:>6}")
    sys.stdout.write(line)
    sys.stdout.flush()


def summary(campaign: dict[str, Any], accepted_by_fcm: int) -> str:
    counts = campaign["counts"]
    started = datetime.fromisoformat(campaign["started_at"])
    finished = datetime.fromisoformat(campaign["finished_at"])
    elapsed = (finished - started).total_seconds()
    done = counts["sent"] + counts["failed"]
    return "\n".join([
        f"  campaign   {campaign['id']}  {campaign['status']}",
        f"  targeted   {counts['targeted']:>7}",
        f"  sent       {counts['sent']:>7}   (the FCM emulator accepted {accepted_by_fcm})",
        f"  failed     {counts['failed']:>7}   (unregistered or invalid tokens, now retired)",
        f"  unsent     {counts['unsent']:>7}",
        f"  elapsed    {elapsed:>7.2f} s from claim to completion",
        f"  rate       {done / elapsed if elapsed else 0:>7.0f} recipients/s",
    ])


def run(api_url: str, fcm_url: str, api_key: str, devices: int = 50_000) -> int:
    api = httpx.Client(base_url=api_url, timeout=120,
                       headers={"Authorization": f"Bearer {api_key}"})
    emulator = EmulatorClient(fcm_url)
    emulator.reset()
    print(f"Importing {devices:,} synthetic devices (bulk upsert, 10,000 per call)...")
    print(f"  done in {import_devices(api, synthetic_devices(devices)):.1f} s")
    response = api.post("/v1/campaigns", json={
        "name": "Live stream starts now", "title": "We are live!",
        "body": "The stream is starting, tap to watch.",
        "data": {"landingUrl": "https://example.com/live/2026", "campaignKind": "live"},
        "audience": {"push_enabled": True}})
    response.raise_for_status()
    campaign_id = response.json()["id"]
    print(f"Campaign {campaign_id} created; sending to every device with push enabled:")
    campaign = watch(api, campaign_id)
    accepted = emulator.stats()["by_error"].get("OK", 0)
    print(summary(campaign, accepted))
    ok = campaign["status"] == "completed" and accepted == campaign["counts"]["sent"]
    return 0 if ok else 1
