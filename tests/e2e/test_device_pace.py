"""Issue 32, point 4 end to end: a stack of its own (api, dispatcher, two senders, the FCM
emulator) with ``HERALD_DEVICE_RATE_PER_MIN=20`` (one message every 3 s to a device, so the proof
takes seconds, not minutes). Two campaigns created at once to the same 50 devices: each device
gets both, never two within its pace, from whichever senders, and both campaigns end with exact
counts. One device answers FCM's per-device "device message rate exceeded" to its first request
(the emulator's ``devicequota-`` token: 429, FcmError ``QUOTA_EXCEEDED``, a ``QuotaFailure``
naming the device, ``Retry-After: 1``): Herald reads it as that device's alone, retries it after
``Retry-After`` and sends it. Asserted from the emulator's own record and the senders'
metrics."""

from __future__ import annotations

from collections import defaultdict

from devstack.stack import Stack
from fcm_emulator.client import EmulatorClient
from tests.e2e.harness import Api, pod_metric, reachable_devices

RATE_PER_MIN = 20
INTERVAL_S = 60 / RATE_PER_MIN
SLACK_S = 1.0
"""Between a device's moment in Redis and its request's arrival at the emulator: a loaded
machine's admission, permit and request (a moment is taken before the permit)."""
DEVICES = 50


def test_two_campaigns_to_the_same_devices_keep_each_device_s_pace_and_a_device_s_429_is_its_own(
        stack: Stack, api: Api, emulator: EmulatorClient) -> None:
    stack.config.extra_env["HERALD_DEVICE_RATE_PER_MIN"] = str(RATE_PER_MIN)
    stack.start(senders=2, schedulers=0)
    devices = [{**device, "topics": ["paced"]} for device in reachable_devices(DEVICES)]
    devices[0]["token"] = f"devicequota-{devices[0]['token']}"
    api.import_devices(devices)
    tokens = {device["token"] for device in devices}

    campaigns = [api.create_campaign(audience={"topics": ["paced"]}) for _ in range(2)]
    for campaign_id in campaigns:
        done = api.wait_finished(campaign_id, timeout_s=60)
        assert done["status"] == "completed", done
        assert {k: done["counts"][k] for k in ("targeted", "sent", "failed", "unsent")} == \
            {"targeted": DEVICES, "sent": DEVICES, "failed": 0, "unsent": 0}

    requests = defaultdict(list)
    for request in emulator.received():
        requests[request.token].append(request)
    assert set(requests) == tokens
    for token, received in requests.items():
        accepted = sorted(r.received_at for r in received if r.error is None)
        assert len(accepted) == 2, (token, received)  # each device got both campaigns, once
        assert accepted[1] - accepted[0] >= INTERVAL_S - SLACK_S, (token, accepted)

    quota = devices[0]["token"]
    refused, *_ = sorted(requests[quota], key=lambda r: r.received_at)
    assert refused.error == "QUOTA_EXCEEDED"  # FCM's errorCode; the QuotaFailure names the device
    first_accepted = min(r.received_at for r in requests[quota] if r.error is None)
    assert first_accepted - refused.received_at >= 1.0  # Retry-After honoured
    assert pod_metric(api, "sender", "herald_fcm_errors_total", code="DEVICE_QUOTA_EXCEEDED") == 1
    assert pod_metric(api, "sender", "herald_device_pace_deferred_total") >= DEVICES - 1
