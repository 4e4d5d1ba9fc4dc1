"""Records for tests, built the way Herald builds them, with only what a test cares about named.

Shared by every tier (unit tests with fakes, integration tests on the real stores), so no test
module imports factories from another test module.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import timedelta
from itertools import product
from typing import Any

from herald.clock import utcnow
from herald.contracts.http import CampaignTemplate, DeviceIn, ScheduleCreate
from herald.domain.access import Actor, ActorKind
from herald.domain.audience import (
    MAX_AUDIENCE_ATTRIBUTES,
    MAX_AUDIENCE_LOCALES,
    MAX_AUDIENCE_TOPICS,
    MAX_AUDIENCE_USER_IDS,
    MAX_CONDITION_VALUES,
    Audience,
)
from herald.domain.documents import (
    Campaign,
    CampaignContent,
    CampaignCounts,
    CancelRecord,
    Decision,
    DecisionKind,
    Dispatch,
    Progress,
    Schedule,
    new_id,
)
from herald.domain.messages import Recipient, SendChunk
from herald.domain.outcomes import RecipientOutcome, Target
from herald.domain.payload import MAX_PAYLOAD_BYTES, build_payload, payload_size
from herald.domain.personalize import MAX_PLACEHOLDERS
from herald.domain.pods import PodBeat
from herald.domain.rendering import MAX_TRANSLATIONS
from herald.domain.status import Status
from herald.domain.types import MAX_CONDITION_TEXT_CHARS, MAX_TOPIC_CHARS, MAX_USER_ID_CHARS
from herald.service_layer.campaigns import new_campaign
from herald.service_layer.ports import Bus, Stores
from herald.service_layer.recipients import final_counts
from herald.service_layer.scheduling import new_schedule

EVERYONE = Audience(push_enabled=None)
"""Every device whose token is still valid (push enabled or not)."""

ACTOR = Actor(id="6b0000000000000000000001", name="test-operator", kind=ActorKind.API_KEY)
"""Who made the changes a test makes (an operator's key)."""


def actor(name: str) -> Actor:
    """A key named ``name`` (its id is its name), as the actor of a change."""
    return Actor(id=name, name=name, kind=ActorKind.API_KEY)


def campaign(due_in_s: float = 0.0, *, status: Status | None = None, chunk_size: int = 500,
             **changes: Any) -> Campaign:
    """A campaign to every push-enabled device, due ``due_in_s`` from now."""
    now = utcnow()
    fresh = new_campaign(
        content=CampaignContent(title="t", body="b"), name="c", audience=Audience(), follow_up=None,
        chunk_size=chunk_size, rate_per_s=None, due_at=now + timedelta(seconds=due_in_s), now=now,
        source="test")
    if status is not None:
        changes["status"] = status
    return replace(fresh, **changes)


async def insert(stores: Stores, due_in_s: float = 0.0, **changes: Any) -> str:
    """Store a ``campaign(...)``; its id."""
    record = campaign(due_in_s, **changes)
    await stores.campaigns.insert(record)
    return record.id


def cancelling(expected_pods: Iterable[str] = (), **record: Any) -> dict[str, Any]:
    """Changes that make a ``campaign(...)`` one whose cancel is under way (its decision the
    latest)."""
    decision = Decision(id=new_id(), kind=DecisionKind.CANCEL, at=utcnow())
    return {"status": Status.CANCELLING, "decision": decision,
            "cancel": CancelRecord(requested_at=decision.at, expected_pods=tuple(expected_pods),
                                   decision_id=decision.id, **record)}


async def begin_cancel(stores: Stores, campaign_id: str, **record: Any) -> Campaign | None:
    """The store's guarded ``begin_cancel`` as the decider calls it (after the latest decision)."""
    current = await stores.campaigns.get(campaign_id)
    decision = Decision(id=new_id(), kind=DecisionKind.CANCEL, at=utcnow())
    return await stores.campaigns.begin_cancel(
        campaign_id, CancelRecord(requested_at=decision.at, decision_id=decision.id, **record),
        decision, after=current.decision if current is not None else None,
        status=current.status if current is not None else Status.IN_PROGRESS)


def paged(chunks: int, targeted: int, *, owner: str = "dispatcher", done: bool = True
          ) -> dict[str, Any]:
    """Changes that make a ``campaign(...)`` one a dispatcher paged into ``chunks`` chunks."""
    return {"status": Status.IN_PROGRESS,
            "dispatch": Dispatch(owner=owner, next_seq=chunks, done=done),
            "progress": Progress(chunks_published=chunks),
            "counts": CampaignCounts(targeted=targeted)}


async def sending_campaign(stores: Stores, chunks: list[list[str]],
                           status: Status = Status.IN_PROGRESS,
                           replace_key: str | None = None, **changes: Any) -> Campaign:
    """A campaign as a dispatcher leaves it: paged, its chunks written (not published)."""
    record = campaign(**{**paged(len(chunks), sum(map(len, chunks))), "status": status},
                      replace_key=replace_key, **changes)
    await stores.campaigns.insert(record)
    for seq, tokens in enumerate(chunks):
        await stores.chunks.create(record.id, seq, recipients_of(tokens), None, utcnow())
    return record


async def publish_chunks(bus: Bus, campaign: Campaign, chunks: list[list[str]]) -> None:
    """Publish the messages of ``sending_campaign``'s chunks, as its dispatcher would."""
    for seq, tokens in enumerate(chunks):
        await bus.send_chunk(SendChunk(campaign_id=campaign.id, seq=seq,
                                       recipients=recipients_of(tokens)))


def recipients_of(tokens: Iterable[str]) -> list[Recipient]:
    return [Recipient(token=token) for token in tokens]


def recipients(first: int, end: int) -> list[Recipient]:
    """Recipients ``tok-<first>`` to ``tok-<end - 1>``, each with a user id."""
    return [Recipient(token=f"tok-{i:05d}", user_id=f"u{i}") for i in range(first, end)]


def device(i: int, **fields: Any) -> DeviceIn:
    """Device number ``i`` (token ``tok-<i>``), on Android unless ``fields`` say otherwise.

    Its ``timezone`` is not validated, so a test can store one the API would refuse today (as a
    device registered under an older zone database could hold)."""
    timezone = fields.pop("timezone", None)
    base: dict[str, Any] = {"token": f"tok-{i:05d}", "user_id": f"u{i}", "platform": "android"}
    return DeviceIn.model_validate({**base, **fields}).model_copy(update={"timezone": timezone})


CAMPAIGN_BODY = {"title": "Live now", "body": "Tap to watch",
                 "data": {"landingUrl": "https://x.test"}}
"""A valid ``POST /v1/campaigns`` body."""


async def paged_campaign(stores: Stores) -> str:
    """Three chunks of 10 (tokens ``tok-00000``..): the first fully recorded (one token twice),
    the second partly (``tok-00011`` failed UNREGISTERED), the third not at all."""
    record = campaign(**paged(3, 30, owner="d"))  # as checkpointed
    await stores.campaigns.insert(record)
    now = utcnow()
    for seq in range(3):
        await stores.chunks.create(record.id, seq, recipients(10 * seq, 10 * seq + 10),
                                   cursor=None, now=now)
    await stores.deliveries.record(record.id, 0, "s1", at((p, None) for p in range(6)), now)
    await stores.deliveries.record(record.id, 0, "s2", at((p, None) for p in range(5, 10)), now)
    await stores.deliveries.record(record.id, 1, "s1",
                                   at([(0, None), (1, "UNREGISTERED"), (2, None)]), now)
    return record.id


async def cancelled_paged_campaign(stores: Stores) -> Campaign:
    """``paged_campaign`` stopped by a cancel (12 sent, 1 failed, 17 unsent of 30), with the
    exact counts a cancel finishes with."""
    campaign_id = await paged_campaign(stores)
    now = utcnow()
    await begin_cancel(stores, campaign_id)
    paged = await stores.campaigns.get(campaign_id)
    assert paged is not None
    cancelled = await stores.campaigns.confirm_cancel(
        campaign_id, (await final_counts(stores, paged)).counts, now)
    assert cancelled is not None
    return cancelled


def schedule(*, cron: str = "0 9 * * *", timezone: str = "UTC",
             misfire_grace_s: int | None = None, **changes: Any) -> Schedule:
    """An active schedule of a small campaign template, next due at its next occurrence."""
    request = ScheduleCreate(name="s", template=CampaignTemplate(title="t", body="b"), cron=cron,
                             timezone=timezone, misfire_grace_s=misfire_grace_s)
    return replace(new_schedule(request, utcnow()), **changes)


def pod_beat(pod_id: str, service: str = "sender", campaigns: Iterable[str] = ()) -> PodBeat:
    """A heartbeat of pod ``pod_id`` working on ``campaigns``."""
    return PodBeat(id=pod_id, service=service, host="test", pid=1, version="test",
                   started_at=0.0, campaigns=list(campaigns))


def at(pairs: Iterable[tuple[int, str | None]], tokens: Sequence[str] | None = None
       ) -> list[RecipientOutcome]:
    """Outcomes from ``(position, error)`` pairs (the token from ``tokens`` by position)."""
    return [RecipientOutcome(Target(position, tokens[position] if tokens else ""), error)
            for position, error in pairs]


# --- the largest campaign a body may hold ----------------------------------------------------------
LARGEST_KEY = "k" * 64
WIDE = "é"
"""Two bytes of UTF-8, six as a JSON escape (``\\u00e9``): the costliest character per byte of a
message."""
UNUSUAL = '{{ (attributes.a%02d) | default("%s") | truncate(40) }}'
"""A placeholder in a shape only Jinja2's parser checks (the parentheses): the costliest."""


def _filled(title: str, head: str) -> str:
    """``head``, then as many ``WIDE`` characters as keep the message within FCM's size."""
    def size(body: str) -> int:
        return payload_size(build_payload(title, body, {}, replace_key=LARGEST_KEY))
    body = head + WIDE * ((MAX_PAYLOAD_BYTES - size(head)) // len(WIDE.encode()))
    assert size(body) <= MAX_PAYLOAD_BYTES < size(body + WIDE + WIDE)
    return body


def _languages() -> list[str]:
    return ["".join(pair) for pair in product(string.ascii_lowercase, repeat=2)]


def largest_campaign(*, placeholders: bool = False) -> dict[str, Any]:
    """A ``POST /v1/campaigns`` body at every limit at once, in the characters that cost most
    once escaped; with ``placeholders``, every variant also holds the most placeholders a
    message may, each in the shape that costs most to check, and each variant's its own."""
    title = WIDE * 10
    tags = [f"{language}-x-abcdefgh-abcdefgh-abcdefgh-abc"
            for language in _languages()[:MAX_TRANSLATIONS]]

    def body(variant: int) -> str:
        head = "".join(UNUSUAL % (i, f"{variant:03d}{WIDE}") for i in range(MAX_PLACEHOLDERS))
        return _filled(title, head if placeholders else "")

    conditions: dict[str, Any] = {"a00": {"in": [
        f"{i:04d}" + WIDE * (MAX_CONDITION_TEXT_CHARS - 4) for i in range(MAX_CONDITION_VALUES)]}}
    conditions.update({f"a{i:02d}{'b' * 60}": {op: WIDE * MAX_CONDITION_TEXT_CHARS
                                               for op in ("gt", "gte", "lt", "lte")}
                       for i in range(1, MAX_AUDIENCE_ATTRIBUTES)})
    return {
        "name": WIDE * 200, "title": title, "body": body(0),
        "translations": {tag: {"title": title, "body": body(1 + n)} for n, tag in enumerate(tags)},
        "audience": {
            "user_ids": [f"{i:04d}" + WIDE * (MAX_USER_ID_CHARS - 4)
                         for i in range(MAX_AUDIENCE_USER_IDS)],
            "topics": [f"{i:03d}" + "t" * (MAX_TOPIC_CHARS - 3) for i in range(MAX_AUDIENCE_TOPICS)],
            "locales": [f"{language}-abcdefgh-abcdefgh-abcdefgh-abcde"
                        for language in _languages()[:MAX_AUDIENCE_LOCALES]],
            "attributes": conditions,
        },
        "chunk_size": 5000, "rate_per_s": 1_000_000, "replace_key": LARGEST_KEY,
        "send_at": "2099-12-01T09:00:00", "timezone": "America/Argentina/ComodRivadavia",
        "deliver_in_local_time": True,
        "rollout": {"waves": [{"percent": 5 * (i + 1), "hold_s": 604_800} for i in range(20)],
                    "halt_when": {"failure_rate_above": 0.999, "min_attempts": 1_000_000_000}},
    }
