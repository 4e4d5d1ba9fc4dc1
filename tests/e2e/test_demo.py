"""``make demo``'s story at a reduced size, the same code path (issue 11's demo, issue 14's ending):
5,000 devices, a stop at about 1,000 sent by a responder key, the audit, one correction, and
the proof from the FCM emulator's record. The story checks itself; this test re-checks the key
numbers independently, from the API and the emulator."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from pathlib import Path

from devstack.demo import (
    FIXED_URL,
    LEAD,
    StoryResult,
    expected_replacement,
    replacement_of,
    run_story,
)
from devstack.stack import Stack
from fcm_emulator.client import EmulatorClient
from tests.e2e.harness import Api, dead

DEVICES = 5_000
STOP_AT = 1_000
SLOW_FCM_MS = 300.0
"""FCM slowed so that requests are visibly in flight when the stop lands."""
RATE_PER_S = 400  # 4,000 devices in ~10 s: the stop at 1,000 lands mid-flight


def _lines(path: Path) -> int:
    return sum(1 for line in path.read_bytes().splitlines() if line.strip())


def _recheck_original(api: Api, result: StoryResult) -> dict[str, set[str]]:
    campaign = api.campaign(result.campaign_id)
    counts = campaign["counts"]
    assert campaign["status"] == "cancelled"
    assert campaign["cancel"]["requested_by"]["name"] == LEAD == result.stopped_by
    assert campaign["cancel"]["requested_by"]["kind"] == "api_key"
    assert counts["sent"] >= STOP_AT and counts["unsent"] > 0
    assert counts["sent"] + counts["failed"] + counts["unsent"] == counts["targeted"]
    assert (result.counts.sent, result.counts.unsent) == (counts["sent"], counts["unsent"])
    audit = {outcome: set(api.audit_tokens(result.campaign_id, outcome))
             for outcome in ("sent", "failed", "unsent")}
    for outcome, path in result.audit_files.items():
        assert _lines(path) == len(audit[outcome]) == counts[outcome]
    return audit


def test_the_story_stops_audits_and_corrects_everyone(
        stack: Stack, api: Api, emulator: EmulatorClient, tmp_path: Path) -> None:
    stack.start(senders=2, schedulers=0)
    result = run_story(api.http, emulator, devices=DEVICES, stop_at=STOP_AT,
                       out_dir=tmp_path / "demo", slow_fcm_ms=SLOW_FCM_MS, rate_per_s=RATE_PER_S)

    audit = _recheck_original(api, result)
    original = api.campaign(result.campaign_id)
    key = expected_replacement(original["replace_key"])
    stopped_at = datetime.fromisoformat(original["finished_at"]).timestamp()
    record = emulator.received()
    assert {replacement_of(r) for r in record} == {key}, "one key: a follow-up replaces"
    requests = Counter(r.token for r in record)
    late = Counter(r.token for r in record if r.received_at > stopped_at)
    # The sent got the broken one, then one replacement; the unsent one new message; nobody else
    # anything after the stop.
    assert {token for token, n in requests.items() if n == 2} == audit["sent"] == {
        token for token, n in late.items() if n == 1 and token not in audit["unsent"]}
    assert all(requests[token] == late[token] == 1 for token in audit["unsent"])
    assert set(late) == audit["sent"] | audit["unsent"]
    assert set(requests) == audit["sent"] | audit["failed"] | audit["unsent"]
    retarget, amend = api.campaign(result.retarget_id), api.campaign(result.amend_id)
    assert amend["counts"]["sent"] == len(audit["sent"]) == result.proof.replaced
    assert retarget["counts"]["targeted"] == len(audit["unsent"])
    dead_unsent = sum(1 for token in audit["unsent"] if dead(token))
    assert retarget["counts"]["failed"] == dead_unsent == result.proof.dead_unsent
    assert result.proof.new == len(audit["unsent"]) - dead_unsent > 0
    assert retarget["data"]["landingUrl"] == amend["data"]["landingUrl"] == FIXED_URL
    assert result.stop.call_to_cancelled_ms > 0
