"""In-memory fakes of every port of the service layer (cosmicpython's fake repositories).

Each fake does what its MongoDB, RabbitMQ or Redis adapter does, write for write: a conditional
update applies only when its conditions hold (the status table of ``herald.domain.status``, the
lease and checkpoint conditions), counters add, a chunk's first writer wins, a campaign already
finished keeps its counts, an update that matched but changed nothing reports no change
(MongoDB's ``modified_count``). ``tests/unit/store_contract.py`` holds the assertions that show it.

Every call starts with one ``await asyncio.sleep(0)``, the fakes' round trip: concurrent callers
interleave between calls as they would against a server, and each call is then atomic, as a
``findOneAndUpdate`` is. Nothing here waits on time.

Records are handed out as stored, not copied: they are frozen, and nothing in Herald changes
the dicts inside them (a ``Content.data``, a schedule's ``template``); a test that did would
change the "database" too. Two differences from MongoDB are deliberate: instants keep the
microseconds they were given (take them from ``utcnow``, which MongoDB would store unchanged),
and ``run_key`` is unique only among campaigns that have one, which is what the sparse index
means to say.

Devices are asked for with the domain's ``Audience`` (and a wave's ``Zones``), as the port
takes them: ``FakeDevices`` evaluates them directly (``Audience.admits``), and the store contract,
run against this fake and against MongoDB, holds the adapter's translation to the same answers.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import asdict, replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

import orjson
import redis.exceptions
from pymongo.errors import DuplicateKeyError, WriteError

from herald.adapters.fcm import SENT, WITHHELD, FcmClient, SendResult
from herald.adapters.rate_limit import RedisRateLimits, TokenBucket
from herald.adapters.records import from_bson, to_bson
from herald.clock import utcnow
from herald.contracts.http import DeviceIn
from herald.domain.access import TALLY_WINDOW_S, Actor, ApiKey, LogEntry, Role
from herald.domain.audience import Audience, Zones
from herald.domain.device_import import DeviceFields, ImportCounts, plan_batch
from herald.domain.documents import (
    CHUNK_CLOSED_FOR_GOOD,
    Approval,
    Campaign,
    CampaignCounts,
    CancelRecord,
    Chunk,
    ChunkState,
    ChunkStatus,
    Cursor,
    Decision,
    DecisionKind,
    Delivery,
    Device,
    IdempotencyBinding,
    PauseRecord,
    Recorded,
    Schedule,
    ScheduleClaim,
    ScheduleRunRecord,
    ScheduleState,
    TestSend,
    UpsertCounts,
    new_id,
)
from herald.domain.erasure import ErasedPerson
from herald.domain.fcm_errors import FcmError
from herald.domain.frequency_cap import CapRule, admits
from herald.domain.lanes import Lane, Route
from herald.domain.messages import CancelCampaign, Profile, ProfileNeed, Recipient, SendChunk
from herald.domain.outcomes import RecipientOutcome
from herald.domain.pace import hold, reserve
from herald.domain.pods import PodBeat
from herald.domain.rollout import RolloutProgress
from herald.domain.status import TERMINAL, Status, Transition, sources_for, target_of
from herald.domain.timing import Wave
from herald.domain.types import OBJECT_ID_PATTERN
from herald.service_layer.ports import Bus, CancelFlags, PodRegistry, Stores

Record = TypeVar("Record")

RECENT_RUNS = 20
"""Runs a schedule keeps (``herald.adapters.schedules.RECENT_RUNS``)."""


async def _round_trip() -> None:
    """Where a real store would wait for the server: other tasks may run here."""
    await asyncio.sleep(0)


def _is_id(record_id: str | None) -> bool:
    """Whether ``record_id`` could be an ``ObjectId`` (the adapters find nothing otherwise)."""
    return record_id is not None and OBJECT_ID_PATTERN.match(record_id) is not None


def _with_fields(record: Record, changes: Mapping[str, Any]) -> Record:
    """``record`` after MongoDB's ``$set`` of ``changes`` (dotted paths reach into subdocuments)."""
    document = to_bson(record, object_id_key=False)
    for path, value in changes.items():
        *parents, leaf = path.split(".")
        target = document
        for name in parents:
            child = target.setdefault(name, {})
            if not isinstance(child, dict):  # MongoDB refuses to set a field inside null
                raise WriteError(f"cannot set {path!r}: {name!r} is {child!r}", 28)
            target = child
        target[leaf] = value
    return from_bson(type(record), document)


# --- campaigns -----------------------------------------------------------------------------------
def _pausing(campaign: Campaign, pause_id: str) -> bool:
    return (campaign.status is Status.PAUSED and campaign.pause is not None
            and campaign.pause.pause_id == pause_id)


class FakeCampaigns:
    """``herald.adapters.campaigns.CampaignStore`` in memory."""

    def __init__(self) -> None:
        self._rows: dict[str, Campaign] = {}

    async def insert(self, campaign: Campaign) -> None:
        await _round_trip()
        self._insert(campaign)

    def _insert(self, campaign: Campaign) -> None:
        if campaign.id in self._rows:
            raise DuplicateKeyError(f"duplicate _id {campaign.id}")
        # run_key is unique among the campaigns that have one (the index's intent).
        if campaign.run_key is not None and any(
                row.run_key == campaign.run_key for row in self._rows.values()):
            raise DuplicateKeyError(f"duplicate run_key {campaign.run_key}")
        self._rows[campaign.id] = campaign

    async def get(self, campaign_id: str) -> Campaign | None:
        await _round_trip()
        return self._rows.get(campaign_id)

    async def page(self, statuses: Iterable[Status] | None, before: str | None,
                   limit: int) -> list[Campaign]:
        await _round_trip()
        wanted = set(statuses) if statuses else None
        if before is not None and not _is_id(before):
            return []
        found = [c for c in self._rows.values()
                 if (wanted is None or c.status in wanted) and (before is None or c.id < before)]
        return _limited(sorted(found, key=lambda c: c.id, reverse=True), limit)

    async def with_status(self, status: Status, limit: int = 0) -> list[Campaign]:
        await _round_trip()
        return _limited(sorted(self._where(lambda c: c.status is status), key=lambda c: c.id),
                        limit)

    async def transition(self, campaign_id: str, transition: Transition, now: datetime, *,
                         also_set: Mapping[str, Any] | None = None) -> Campaign | None:
        await _round_trip()
        return self._transition(campaign_id, transition, now, also_set or {})

    def _transition(self, campaign_id: str, transition: Transition, now: datetime,
                    also_set: Mapping[str, Any]) -> Campaign | None:
        current = self._rows.get(campaign_id)
        if current is None or current.status not in sources_for(transition):
            return None
        changed = replace(current, status=target_of(transition), updated_at=now)
        return self._store(_with_fields(changed, also_set) if also_set else changed)

    def _apply(self, campaign_id: str, transition: Transition, now: datetime,
               change: Callable[[Campaign], Campaign]) -> Campaign | None:
        """A named transition: the status change, plus what it records."""
        moved = self._transition(campaign_id, transition, now, {})
        return None if moved is None else self._store(change(moved))

    def put(self, campaign: Campaign) -> None:
        """Replace a stored campaign at once, as another pod's write that lands between two
        of this one's awaits."""
        self._store(campaign)

    def _decide(self, campaign_id: str, transition: Transition, decision: Decision,
                after: Decision | None, change: Callable[[Campaign], Campaign]
                ) -> Campaign | None:
        """A decision's transition, only while ``after`` is the campaign's latest decision."""
        current = self._rows.get(campaign_id)
        latest = None if current is None or current.decision is None else current.decision.id
        if latest != (None if after is None else after.id):
            return None
        return self._apply(campaign_id, transition, decision.at,
                           lambda c: replace(change(c), decision=decision))

    async def fire(self, campaign_id: str, now: datetime, fired_by: str, *,
                   due_at: datetime) -> Campaign | None:
        await _round_trip()
        if not self._due_at(campaign_id, due_at):
            return None
        return self._apply(campaign_id, Transition.FIRE, now,
                           lambda c: replace(c, fired_at=now, fired_by=fired_by))

    async def miss(self, campaign_id: str, reason: str, now: datetime, *,
                   due_at: datetime) -> Campaign | None:
        await _round_trip()
        if not self._due_at(campaign_id, due_at):
            return None
        return self._apply(campaign_id, Transition.MISS, now,
                           lambda c: replace(c, error=reason, finished_at=now))

    def _due_at(self, campaign_id: str, due_at: datetime) -> bool:
        current = self._rows.get(campaign_id)
        return current is not None and current.due_at == due_at

    async def finish(self, campaign_id: str, transition: Transition, counts: CampaignCounts,
                     error: str | None, now: datetime) -> Campaign | None:
        await _round_trip()
        return self._apply(campaign_id, transition, now,
                           lambda c: replace(c, counts=counts, finished_at=now, error=error))

    async def begin_cancel(self, campaign_id: str, record: CancelRecord, decision: Decision,
                           *, after: Decision | None, status: Status) -> Campaign | None:
        await _round_trip()
        current = self._rows.get(campaign_id)
        if current is None or current.status is not status:
            return None
        return self._decide(campaign_id, Transition.BEGIN_CANCEL, decision, after,
                            lambda c: replace(c, cancel=record))

    async def confirm_cancel(self, campaign_id: str, counts: CampaignCounts, now: datetime,
                             error: str | None = None) -> Campaign | None:
        await _round_trip()
        transition = Transition.CONFIRM_CANCEL if error is None else Transition.CONFIRM_STOP
        return self._apply(campaign_id, transition, now, lambda c: replace(
            _with_fields(c, {"cancel.acknowledged_at": now}), counts=counts, finished_at=now,
            error=error if error is not None else c.error))

    async def recount(self, campaign_id: str, counts: CampaignCounts) -> bool:
        await _round_trip()
        current = self._rows.get(campaign_id)
        if current is None or current.status not in TERMINAL:
            return False
        self._rows[campaign_id] = replace(current, counts=counts)
        return True

    async def insert_run(self, campaign: Campaign) -> Campaign:
        await _round_trip()
        try:
            self._insert(campaign)
        except DuplicateKeyError:
            return next(c for c in self._rows.values() if c.run_key == campaign.run_key)
        return campaign

    async def find_run(self, run_key: str) -> Campaign | None:
        await _round_trip()
        return next((c for c in self._rows.values() if c.run_key == run_key), None)

    async def due_scheduled(self, now: datetime, limit: int = 100) -> list[Campaign]:
        await _round_trip()
        due = self._where(lambda c: c.status is Status.SCHEDULED and c.due_at <= now)
        return _limited(sorted(due, key=lambda c: c.due_at), limit)

    async def next_scheduled_due(self) -> datetime | None:
        await _round_trip()
        return min((c.due_at for c in self._where(lambda c: c.status is Status.SCHEDULED)),
                   default=None)

    async def patch_scheduled(self, edited: Campaign, now: datetime,
                              was: Status = Status.SCHEDULED) -> Campaign | None:
        await _round_trip()
        current = self._rows.get(edited.id)
        if current is None or current.status is not was or current.revision != edited.revision:
            return None
        return self._store(replace(
            current, name=edited.name, content=edited.content, audience=edited.audience,
            due_at=edited.due_at, local_time=edited.local_time, edited_by=edited.edited_by,
            rate_per_s=edited.rate_per_s, status=edited.status, approvals=edited.approvals,
            approval_required=edited.approval_required, editors=edited.editors,
            audience_estimate=edited.audience_estimate, revision=current.revision + 1,
            updated_at=now))

    async def approve(self, campaign: Campaign, transition: Transition,
                      approvals: Sequence[Approval], now: datetime) -> Campaign | None:
        await _round_trip()
        current = self._rows.get(campaign.id)
        if current is None or current.revision != campaign.revision:
            return None
        return self._apply(campaign.id, transition, now,
                           lambda c: replace(c, approvals=tuple(approvals), editors=()))

    async def hold_for_approval(self, campaign_id: str, audience_estimate: int, now: datetime,
                                *, due_at: datetime) -> Campaign | None:
        await _round_trip()
        if not self._due_at(campaign_id, due_at):
            return None
        return self._apply(campaign_id, Transition.HOLD_FOR_APPROVAL, now, lambda c: replace(
            c, approval_required=True, audience_estimate=audience_estimate))

    async def claim_for_dispatch(self, campaign_id: str | None, pod_id: str, now: datetime,
                                 lease_until: datetime) -> Campaign | None:
        await _round_trip()
        if campaign_id is not None and not _is_id(campaign_id):
            return None
        if campaign_id is not None:
            return self._claim(lambda c: c.id == campaign_id, pod_id, now, lease_until)
        return (self._claim(lambda c: c.lane is Lane.URGENT, pod_id, now, lease_until)
                or self._claim(lambda _c: True, pod_id, now, lease_until))

    def _claim(self, targeted: Callable[[Campaign], bool], pod_id: str, now: datetime,
               lease_until: datetime) -> Campaign | None:
        fresh = self._first(lambda c: targeted(c) and c.status in sources_for(Transition.CLAIM)
                            and c.due_at <= now)
        if fresh is not None:
            return self._store(replace(
                fresh, status=target_of(Transition.CLAIM), started_at=now, updated_at=now,
                dispatch=replace(fresh.dispatch, owner=pod_id, lease_until=lease_until)))
        lapsed = self._first(lambda c: targeted(c) and c.status is Status.IN_PROGRESS
                             and not c.dispatch.done and _before(c.dispatch.lease_until, now))
        if lapsed is None:
            return None
        dispatch = lapsed.dispatch
        return self._store(replace(lapsed, updated_at=now, dispatch=replace(
            dispatch, owner=pod_id, lease_until=lease_until, takeovers=dispatch.takeovers + 1)))

    async def renew_lease(self, campaign_id: str, pod_id: str, lease_until: datetime) -> bool:
        await _round_trip()
        return self._update(
            campaign_id, lambda c: (c.status is Status.IN_PROGRESS
                                    and c.dispatch.owner == pod_id and not c.dispatch.done),
            lambda c: replace(c, dispatch=replace(c.dispatch, lease_until=lease_until)))

    async def paging(self, limit: int = 0) -> list[Campaign]:
        await _round_trip()
        return _limited(self._where(
            lambda c: c.status is Status.IN_PROGRESS and not c.dispatch.done), limit)

    async def take_over(self, campaign_id: str, dead_owner: str, pod_id: str,
                        lease_until: datetime) -> Campaign | None:
        await _round_trip()
        current = self._rows.get(campaign_id)
        if (current is None or current.status is not Status.IN_PROGRESS
                or current.dispatch.done or current.dispatch.owner != dead_owner):
            return None
        dispatch = current.dispatch
        return self._store(replace(current, dispatch=replace(
            dispatch, owner=pod_id, lease_until=lease_until, takeovers=dispatch.takeovers + 1)))

    async def paged_and_open(self, limit: int = 0) -> list[Campaign]:
        await _round_trip()
        return _limited(self._where(
            lambda c: c.status is Status.IN_PROGRESS and c.dispatch.done), limit)

    async def stuck_finalizing(self, older_than: datetime, limit: int = 0) -> list[Campaign]:
        await _round_trip()
        return _limited(self._where(
            lambda c: c.status is Status.FINALIZING and c.updated_at < older_than), limit)

    async def fix_dispatch_bound(self, campaign_id: str, pod_id: str, until: str | None,
                                 waves: Sequence[Wave] | None = None) -> Campaign | None:
        await _round_trip()

        def bound(c: Campaign) -> Campaign:
            fixed = replace(c.dispatch, until=until)
            return replace(c, dispatch=fixed if waves is None else replace(fixed,
                                                                           waves=tuple(waves)))

        self._update(campaign_id, lambda c: c.dispatch.owner == pod_id and c.dispatch.until is None,
                     bound)
        return self._rows.get(campaign_id)

    async def checkpoint(self, campaign_id: str, pod_id: str, seq: int, size: int,
                         lease_until: datetime) -> bool:
        await _round_trip()
        return self._update(
            campaign_id, lambda c: c.dispatch.owner == pod_id and c.dispatch.next_seq == seq,
            lambda c: replace(
                c, dispatch=replace(c.dispatch, next_seq=seq + 1, lease_until=lease_until),
                counts=replace(c.counts, targeted=c.counts.targeted + size),
                progress=replace(c.progress,
                                 chunks_published=c.progress.chunks_published + 1)))

    async def finish_dispatch(self, campaign_id: str, pod_id: str,
                              now: datetime) -> Campaign | None:
        await _round_trip()
        done = self._update(
            campaign_id, lambda c: c.dispatch.owner == pod_id and not c.dispatch.done,
            lambda c: replace(c, updated_at=now,
                              dispatch=replace(c.dispatch, done=True, lease_until=now)),
            matched_is_enough=True)
        return self._rows[campaign_id] if done else None

    async def release_dispatch(self, campaign_id: str, pod_id: str, until: datetime) -> None:
        await _round_trip()
        self._update(campaign_id, lambda c: c.dispatch.owner == pod_id,
                     lambda c: replace(c, dispatch=replace(c.dispatch, lease_until=until)))

    async def count_finished_chunk(self, campaign_id: str, sent: int, failed: int,
                                   *, done: bool, suppressed: int = 0) -> Campaign | None:
        await _round_trip()
        counted = self._update(campaign_id, lambda c: c.status not in TERMINAL, lambda c: replace(
            c, counts=replace(c.counts, sent=c.counts.sent + sent,
                              failed=c.counts.failed + failed,
                              suppressed=c.counts.suppressed + suppressed),
            progress=replace(c.progress, chunks_done=c.progress.chunks_done + int(done))),
            matched_is_enough=True)
        return self._rows[campaign_id] if counted else None

    async def mark_first_request(self, campaign_id: str, at: datetime) -> bool:
        await _round_trip()
        return self._update(campaign_id, lambda c: c.first_request_at is None,
                            lambda c: replace(c, first_request_at=at))

    async def claim_cancel_finalization(self, campaign_id: str, pod_id: str, now: datetime,
                                        until: datetime) -> bool:
        await _round_trip()

        def claimable(c: Campaign) -> bool:
            cancel = c.cancel
            return c.status is Status.CANCELLING and (
                cancel is None or cancel.finalizer is None
                or _before(cancel.finalizer_until, now))

        return self._update(campaign_id, claimable, lambda c: _with_fields(
            c, {"cancel.finalizer": pod_id, "cancel.finalizer_until": until}))

    async def add_ack(self, campaign_id: str, decision: Decision, pod_id: str) -> None:
        await _round_trip()

        def acknowledged(c: Campaign) -> Campaign:
            if decision.kind is DecisionKind.PAUSE:
                assert c.pause is not None
                acks = c.pause.acks if pod_id in c.pause.acks else (*c.pause.acks, pod_id)
                return replace(c, pause=replace(c.pause, acks=acks))
            assert c.cancel is not None
            acks = c.cancel.acks if pod_id in c.cancel.acks else (*c.cancel.acks, pod_id)
            return replace(c, cancel=replace(c.cancel, acks=acks))

        self._update(campaign_id, lambda c: c.decision is not None
                     and c.decision.id == decision.id, acknowledged)

    async def mark_offered(self, campaign_id: str, resume_id: str, now: datetime) -> bool:
        await _round_trip()
        return self._update(
            campaign_id, lambda c: c.pause is not None and c.pause.resume_id == resume_id
            and c.pause.offered_at is None,
            lambda c: replace(c, pause=c.pause and replace(c.pause, offered_at=now)))

    async def resumed_unoffered(self) -> list[Campaign]:
        await _round_trip()
        return self._where(lambda c: c.status is Status.IN_PROGRESS and c.decision is not None
                           and c.decision.kind is DecisionKind.RESUME and c.pause is not None
                           and c.pause.offered_at is None)

    async def with_rollout(self) -> list[Campaign]:
        await _round_trip()
        return self._where(lambda c: c.status is Status.IN_PROGRESS
                           and c.rollout_progress is not None)

    async def set_rate(self, campaign_id: str, rate_per_s: int | None, by: Actor, now: datetime,
                       *, among: Iterable[Status],
                       approvals: Sequence[Approval] | None = None) -> Campaign | None:
        await _round_trip()
        statuses = set(among)
        changed = self._update(campaign_id, lambda c: c.status in statuses, lambda c: replace(
            c, rate_per_s=rate_per_s, edited_by=by, updated_at=now,
            approvals=c.approvals if approvals is None else tuple(approvals)))
        return self._rows[campaign_id] if changed else None

    async def update_rollout(self, campaign_id: str, wave: int, progress: RolloutProgress
                             ) -> Campaign | None:
        await _round_trip()

        def at_wave(c: Campaign) -> bool:
            return (c.status is Status.IN_PROGRESS and c.rollout_progress is not None
                    and c.rollout_progress.wave == wave)

        changed = self._update(campaign_id, at_wave,
                               lambda c: replace(c, rollout_progress=progress))
        return self._rows[campaign_id] if changed else None

    async def begin_pause(self, campaign_id: str, record: PauseRecord, decision: Decision,
                          *, after: Decision | None) -> Campaign | None:
        await _round_trip()
        return self._decide(campaign_id, Transition.PAUSE, decision, after,
                            lambda c: replace(c, pause=record))

    async def settle_pause(self, campaign_id: str, pause_id: str, counts: CampaignCounts,
                           now: datetime) -> Campaign | None:
        await _round_trip()

        def settled(c: Campaign) -> Campaign:
            assert c.pause is not None
            return replace(c, updated_at=now,
                           pause=replace(c.pause, settled_at=now, counts=counts))

        changed = self._update(campaign_id, lambda c: _pausing(c, pause_id)
                               and c.pause is not None and c.pause.settled_at is None, settled)
        return self._rows[campaign_id] if changed else None

    async def resume(self, campaign_id: str, by: Actor | None, decision: Decision,
                     *, after: Decision | None) -> Campaign | None:
        await _round_trip()

        def resumed(c: Campaign) -> Campaign:
            pause = c.pause and replace(c.pause, resumed_at=decision.at, resumed_by=by,
                                        resume_id=decision.id, offered_at=None)
            return replace(c, pause=pause)

        return self._decide(campaign_id, Transition.RESUME, decision, after, resumed)

    async def follow_ups_of(self, campaign_id: str) -> list[Campaign]:
        await _round_trip()
        return self._where(lambda c: c.follow_up is not None
                           and c.follow_up.campaign_id == campaign_id)

    async def link_amendment(self, campaign_id: str, amend_id: str) -> None:
        await _round_trip()
        self._update(campaign_id, lambda c: amend_id not in c.amended_by,
                     lambda c: replace(c, amended_by=(*c.amended_by, amend_id)))

    # --- helpers ---------------------------------------------------------------------------------
    def _store(self, campaign: Campaign) -> Campaign:
        self._rows[campaign.id] = campaign
        return campaign

    def _where(self, test: Callable[[Campaign], bool]) -> list[Campaign]:
        return [c for c in self._rows.values() if test(c)]

    def _first(self, test: Callable[[Campaign], bool]) -> Campaign | None:
        return min(self._where(test), key=lambda c: c.id, default=None)

    def _update(self, campaign_id: str, test: Callable[[Campaign], bool],
                change: Callable[[Campaign], Campaign], *, matched_is_enough: bool = False
                ) -> bool:
        """An ``update_one``: True if the campaign matched and changed (MongoDB's
        ``modified_count``), or only matched (a ``findOneAndUpdate`` returns it either way)."""
        current = self._rows.get(campaign_id)
        if current is None or not test(current):
            return False
        changed = self._store(change(current))
        return matched_is_enough or changed != current


def _before(instant: datetime | None, now: datetime) -> bool:
    """``{"$lt": now}`` on a field that may be null (null never compares)."""
    return instant is not None and instant < now


def _limited(found: list[Record], limit: int) -> list[Record]:
    """MongoDB's ``limit``: 0 means no limit."""
    return found[:limit] if limit else found


# --- chunks and deliveries ---------------------------------------------------------------------
class FakeChunks:
    """``herald.adapters.chunks.ChunkStore`` in memory."""

    def __init__(self) -> None:
        self._rows: dict[tuple[str, int], Chunk] = {}

    async def create(self, campaign_id: str, seq: int, recipients: Sequence[Recipient],
                     cursor: Cursor, now: datetime,
                     status: ChunkStatus = ChunkStatus.PENDING) -> Chunk:
        await _round_trip()
        existing = self._rows.get((campaign_id, seq))
        if existing is not None:
            return existing
        state = ChunkState(campaign_id=campaign_id, seq=seq, size=len(recipients), cursor=cursor,
                           status=status, created_at=now)
        chunk = Chunk(state, tuple(recipients))
        self._rows[(campaign_id, seq)] = chunk
        return chunk

    async def get(self, campaign_id: str, seq: int) -> Chunk | None:
        await _round_trip()
        return self._rows.get((campaign_id, seq))

    async def state(self, campaign_id: str, seq: int) -> ChunkState | None:
        await _round_trip()
        chunk = self._rows.get((campaign_id, seq))
        return None if chunk is None else chunk.state

    async def claim(self, campaign_id: str, seq: int, pod_id: str, holder: str | None,
                    until: datetime, fence: int = 0) -> ChunkState | None:
        await _round_trip()
        before = self._state_if(campaign_id, seq, lambda s: (
            s.status is ChunkStatus.PENDING and s.owner == holder
            and (not fence or s.fence == fence)))
        if before is not None:
            self._set_state(replace(before, owner=pod_id, owner_until=until,
                                    attempts=before.attempts + 1, fence=before.fence + 1))
        return before

    async def renew(self, campaign_id: str, seq: int, pod_id: str, fence: int,
                    until: datetime) -> int | None:
        await _round_trip()
        held = self._state_if(campaign_id, seq, lambda s: (
            s.status is ChunkStatus.PENDING and s.owner == pod_id and s.fence == fence))
        if held is None:
            return None
        self._set_state(replace(held, owner_until=until, fence=held.fence + 1))
        return held.fence + 1

    async def release(self, campaign_id: str, seq: int, pod_id: str, *, refund: bool) -> None:
        await _round_trip()
        held = self._state_if(campaign_id, seq, lambda s: s.owner == pod_id)
        if held is not None:
            self._set_state(replace(held, owner=None,
                                    attempts=held.attempts - 1 if refund else held.attempts))

    async def finish(self, campaign_id: str, seq: int, status: ChunkStatus, sent: int,
                     failed: int, now: datetime, owner: str | None,
                     suppressed: int = 0) -> bool:
        await _round_trip()
        held = self._state_if(campaign_id, seq, lambda s: (s.status is ChunkStatus.PENDING
                                                           and s.owner == owner))
        if held is None:
            return False
        self._set_state(replace(held, status=status, sent=sent, failed=failed,
                                suppressed=suppressed, finished_at=now, owner=None))
        return True

    async def in_order(self, campaign_id: str) -> AsyncIterator[Chunk]:
        await _round_trip()
        for chunk in sorted((c for c in self._rows.values() if c.campaign_id == campaign_id),
                            key=lambda c: c.seq):
            yield chunk

    async def count_closed(self, campaign_id: str) -> int:
        await _round_trip()
        return sum(1 for c in self._rows.values()
                   if c.campaign_id == campaign_id and c.state.status in CHUNK_CLOSED_FOR_GOOD)

    async def pending(self, campaign_id: str) -> list[ChunkState]:
        await _round_trip()
        return [c.state for key, c in sorted(self._rows.items())
                if key[0] == campaign_id and c.state.status is ChunkStatus.PENDING]

    async def pending_everywhere(self) -> list[ChunkState]:
        await _round_trip()
        return [c.state for _, c in sorted(self._rows.items())
                if c.state.status is ChunkStatus.PENDING]

    async def mark_wave_sent(self, campaign_id: str, seq: int, wave: int) -> None:
        await _round_trip()
        held = self._state_if(campaign_id, seq, lambda s: True)
        if held is not None:
            self._set_state(replace(held, wave_sent=wave))

    async def wait_for_next_wave(self, campaign_id: str, seq: int, pod_id: str,
                                 wave: int) -> bool:
        await _round_trip()
        held = self._state_if(campaign_id, seq, lambda s: (s.status is ChunkStatus.PENDING
                                                           and s.owner == pod_id))
        if held is None:
            return False
        self._set_state(replace(held, owner=None, wave_sent=wave, attempts=0))
        return True

    async def mark_rescued(self, held: ChunkState, now: datetime, not_since: datetime) -> bool:
        await _round_trip()
        current = self._state_if(held.campaign_id, held.seq, lambda s: (
            s.status is ChunkStatus.PENDING and s.owner == held.owner and s.fence == held.fence
            and (s.rescued_at is None or s.rescued_at < not_since)))
        if current is None:
            return False
        self._set_state(replace(current, rescued_at=now))
        return True

    async def erase(self, person: ErasedPerson) -> int:
        await _round_trip()
        erased = 0
        for key, chunk in list(self._rows.items()):
            theirs = [person.owns(r.stored()) for r in chunk.recipients]
            if any(theirs):
                recipients = tuple(Recipient.erased_placeholder() if mine else r
                                   for r, mine in zip(chunk.recipients, theirs, strict=True))
                state = replace(chunk.state, erased=chunk.state.erased + sum(theirs))
                self._rows[key] = Chunk(state, recipients)
                erased += sum(theirs)
        return erased

    def _state_if(self, campaign_id: str, seq: int,
                  test: Callable[[ChunkState], bool]) -> ChunkState | None:
        chunk = self._rows.get((campaign_id, seq))
        return chunk.state if chunk is not None and test(chunk.state) else None

    def _set_state(self, state: ChunkState) -> None:
        key = (state.campaign_id, state.seq)
        self._rows[key] = Chunk(state, self._rows[key].recipients)


class FakeDeliveries:
    """``herald.adapters.chunks.DeliveryStore`` in memory: deliveries are only ever appended."""

    def __init__(self) -> None:
        self._rows: list[Delivery] = []

    async def record(self, campaign_id: str, seq: int, pod_id: str,
                     outcomes: Sequence[RecipientOutcome], now: datetime) -> None:
        await _round_trip()
        self._rows.append(Delivery.of(campaign_id, seq, pod_id, now, outcomes))

    async def recorded(self, campaign_id: str, seq: int) -> Recorded:
        await _round_trip()
        recorded: Recorded = {}
        for delivery in self._rows:
            if delivery.campaign_id == campaign_id and delivery.seq == seq:
                delivery.add_to(recorded)
        return recorded

    async def in_order(self, campaign_id: str) -> AsyncIterator[Delivery]:
        await _round_trip()
        # Sorted by chunk; within a chunk in the order written (``_id`` order in MongoDB).
        for delivery in sorted((d for d in self._rows if d.campaign_id == campaign_id),
                               key=lambda d: d.seq):
            yield delivery


class FakeFrequencyCaps:
    """``herald.adapters.frequency_caps.RedisFrequencyCaps`` in memory, deciding with the
    domain's :func:`admits` (what the Lua script is checked against in
    ``tests/unit/cap_contract.py``): person → send key → when it was counted."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.history: dict[str, dict[str, float]] = {}
        self._clock = clock

    async def admit(self, campaign_id: str, rule: CapRule,
                    people: Mapping[str, Sequence[str]], now_s: float | None = None
                    ) -> set[str]:
        await _round_trip()
        now = self._clock() if now_s is None else now_s
        admitted: set[str] = set()
        for person, sends in people.items():
            kept = {key: at for key, at in self.history.get(person, {}).items()
                    if at > now - rule.retention_s}
            self.history[person] = kept
            if admits(kept.items(), campaign_id, rule.windows, now):
                admitted.add(person)
                for key in sends:
                    kept.setdefault(key, now)
        return admitted

    async def release(self, sends: Mapping[str, Sequence[str]]) -> None:
        await _round_trip()
        for person, keys in sends.items():
            for key in keys:
                self.history.get(person, {}).pop(key, None)

    async def forget(self, people: Sequence[str]) -> None:
        await _round_trip()
        for person in people:
            self.history.pop(person, None)

    async def histories(self, people: Sequence[str]) -> dict[str, list[tuple[str, float]]]:
        await _round_trip()
        return {person: sorted(self.history[person].items(), key=lambda kept: kept[1])
                for person in people if self.history.get(person)}


# --- devices -----------------------------------------------------------------------------------
class FakeDevices:
    """``herald.adapters.devices.DeviceStore`` in memory, over documents shaped as it stores them
    (``_id`` a string here), so that audience queries run on what MongoDB would see."""

    def __init__(self) -> None:
        self._documents: dict[str, dict[str, Any]] = {}

    async def upsert(self, devices: Sequence[DeviceIn], now: datetime) -> UpsertCounts:
        await _round_trip()
        by_token = {device.token: device.model_dump(mode="json") for device in devices}
        known = self._ids_of(by_token)
        for token, fields in by_token.items():
            if token in known:
                self._documents[known[token]].update(fields, updated_at=now)
            else:
                device_id = new_id()
                self._documents[device_id] = {"_id": device_id, **fields, "invalid": False,
                                              "created_at": now, "updated_at": now}
        return UpsertCounts(created=len(by_token) - len(known), updated=len(known))

    async def import_batch(self, lines: Sequence[DeviceFields], now: datetime) -> ImportCounts:
        await _round_trip()
        known = self._ids_of([fields["token"] for fields in lines])
        plan = plan_batch(lines, {token: self._documents[device_id]
                                  for token, device_id in known.items()})
        for token, fields in plan.updates.items():
            self._documents[known[token]].update(fields, updated_at=now)
        for fields in plan.inserts.values():
            device_id = new_id()
            self._documents[device_id] = {"_id": device_id, **fields, "invalid": False,
                                          "created_at": now, "updated_at": now}
        return plan.counts

    async def mark_invalid(self, tokens: Sequence[str], reason: str, now: datetime) -> int:
        await _round_trip()
        retired = 0
        for device_id in self._ids_of(tokens).values():
            document = self._documents[device_id]
            if document["invalid"] is False:
                document.update(invalid=True, invalid_reason=reason, updated_at=now)
                retired += 1
        return retired

    async def stream(self, audience: Audience, after: str | None, until: str | None, *,
                     zones: Zones | None = None,
                     need: ProfileNeed | None = None) -> AsyncIterator[tuple[str, Recipient]]:
        await _round_trip()
        if (after is not None and not _is_id(after)) or (until is not None and not _is_id(until)):
            return
        for device_id in sorted(self._documents):
            if (after is not None and device_id <= after) or (until is not None
                                                              and device_id > until):
                continue
            device = self._device(device_id)
            if device is not None and audience.admits(device) and (
                    zones is None or zones.admits(device.timezone)):
                yield device_id, Recipient.model_construct(
                    token=device.token, user_id=device.user_id,
                    profile=None if need is None else need.profile(self._documents[device_id]))

    async def count_between(self, audience: Audience, after: str | None, until: str | None, *,
                            zones: Zones | None = None) -> int:
        return len([one async for one in self.stream(audience, after, until, zones=zones)])

    async def profiles(self, tokens: Sequence[str], need: ProfileNeed) -> dict[str, Profile]:
        await _round_trip()
        return {token: need.profile(self._documents[device_id])
                for token, device_id in self._ids_of(tokens).items()}

    async def locales(self, audience: Audience) -> dict[str | None, int]:
        await _round_trip()
        return dict(Counter(device.locale for device in self._admitted(audience)))

    async def find_by_user_id(self, user_id: str) -> Device | None:
        await _round_trip()
        found = [device_id for device_id, d in self._documents.items()
                 if d.get("user_id") == user_id and not d.get("invalid")]
        return from_bson(Device, self._documents[max(found)]) if found else None

    async def by_timezone(self, audience: Audience) -> dict[str | None, int]:
        await _round_trip()
        return dict(Counter(device.timezone for device in self._admitted(audience)))

    async def timezones(self, audience: Audience) -> list[str]:
        await _round_trip()
        return sorted({device.timezone for device in self._admitted(audience)
                       if device.timezone is not None})

    async def count(self, audience: Audience) -> int:
        await _round_trip()
        return len(self._admitted(audience))

    def _device(self, device_id: str) -> Device | None:
        document = self._documents.get(device_id)
        return None if document is None else from_bson(Device, document)

    def _admitted(self, audience: Audience) -> list[Device]:
        devices = (from_bson(Device, document) for document in self._documents.values())
        return [device for device in devices if audience.admits(device)]

    async def newest_id(self) -> str | None:
        await _round_trip()
        return max(self._documents, default=None)

    async def find_by_token(self, token: str) -> Device | None:
        await _round_trip()
        device_id = self._ids_of([token]).get(token)
        return None if device_id is None else from_bson(Device, self._documents[device_id])

    async def of_user(self, user_id: str) -> list[Device]:
        await _round_trip()
        return [from_bson(Device, d) for d in self._documents.values()
                if d.get("user_id") == user_id]

    async def delete_of_user(self, user_id: str) -> int:
        await _round_trip()
        theirs = [i for i, d in self._documents.items() if d.get("user_id") == user_id]
        for device_id in theirs:
            del self._documents[device_id]
        return len(theirs)

    async def delete_by_token(self, token: str) -> bool:
        await _round_trip()
        device_id = self._ids_of([token]).get(token)
        return device_id is not None and self._documents.pop(device_id) is not None

    def _ids_of(self, tokens: Iterable[str]) -> dict[str, str]:
        wanted = set(tokens)
        return {d["token"]: device_id for device_id, d in self._documents.items()
                if d["token"] in wanted}


# --- schedules and idempotency keys ------------------------------------------------------------
class FakeSchedules:
    """``herald.adapters.schedules.ScheduleStore`` in memory."""

    def __init__(self) -> None:
        self._rows: dict[str, Schedule] = {}

    async def insert(self, schedule: Schedule) -> None:
        await _round_trip()
        if schedule.id in self._rows:
            raise DuplicateKeyError(f"duplicate _id {schedule.id}")
        self._rows[schedule.id] = schedule

    async def get(self, schedule_id: str) -> Schedule | None:
        await _round_trip()
        return self._rows.get(schedule_id)

    async def page(self, before: str | None, limit: int) -> list[Schedule]:
        await _round_trip()
        if before is not None and not _is_id(before):
            return []
        found = [s for s in self._rows.values() if before is None or s.id < before]
        return _limited(sorted(found, key=lambda s: s.id, reverse=True), limit)

    async def update(self, schedule_id: str, changes: Mapping[str, Any],
                     unless_ended: bool = False) -> Schedule | None:
        await _round_trip()
        current = self._rows.get(schedule_id)
        if current is None or (unless_ended and current.state is ScheduleState.ENDED):
            return None
        return self._store(_with_fields(current, changes))

    async def due(self, now: datetime, limit: int = 100) -> list[Schedule]:
        await _round_trip()
        due = [s for s in self._rows.values() if s.state is ScheduleState.ACTIVE
               and s.next_run_at is not None and s.next_run_at <= now]
        return _limited(sorted(due, key=lambda s: s.next_run_at or now), limit)

    async def next_run_at(self) -> datetime | None:
        await _round_trip()
        return min((s.next_run_at for s in self._rows.values()
                    if s.state is ScheduleState.ACTIVE and s.next_run_at is not None),
                   default=None)

    async def claim(self, schedule_id: str, occurrence: datetime, pod_id: str,
                    now: datetime, lease_until: datetime) -> Schedule | None:
        await _round_trip()
        current = self._rows.get(schedule_id)
        if (current is None or current.state is not ScheduleState.ACTIVE
                or current.next_run_at != occurrence
                or (current.claim is not None and not current.claim.until < now)):
            return None
        return self._store(replace(current, claim=ScheduleClaim(by=pod_id, until=lease_until)))

    async def advance(self, claimed: Schedule, pod_id: str, next_run_at: datetime | None,
                      runs: Sequence[ScheduleRunRecord], missed: int, now: datetime) -> bool:
        await _round_trip()
        current = self._rows.get(claimed.id)
        if (current is None or current.claim is None or current.claim.by != pod_id
                or current.next_run_at != claimed.next_run_at):
            return False
        self._store(replace(current, next_run_at=next_run_at, claim=None, updated_at=now,
                            runs=(*claimed.runs, *runs)[-RECENT_RUNS:],
                            missed_total=current.missed_total + missed))
        return True

    def _store(self, schedule: Schedule) -> Schedule:
        self._rows[schedule.id] = schedule
        return schedule


class FakeIdempotency:
    """``herald.adapters.idempotency.IdempotencyKeys`` in memory."""

    def __init__(self) -> None:
        self._bindings: dict[str, IdempotencyBinding] = {}

    async def reserve(self, binding: IdempotencyBinding) -> IdempotencyBinding | None:
        await _round_trip()
        earlier = self._bindings.get(binding.key)
        if earlier is None:
            self._bindings[binding.key] = binding
        return earlier

    async def expire(self, before: datetime) -> int:
        await _round_trip()
        gone = [key for key, b in self._bindings.items() if b.created_at < before]
        for key in gone:
            del self._bindings[key]
        return len(gone)

    async def rebind(self, key: str, stale_campaign_id: str, campaign_id: str) -> bool:
        await _round_trip()
        bound = self._bindings.get(key)
        if bound is None or bound.campaign_id != stale_campaign_id:
            return False
        self._bindings[key] = replace(bound, campaign_id=campaign_id)
        return stale_campaign_id != campaign_id


class FakeApiKeys:
    """API keys by id, found by the digest of their secret (unique, as the adapter's index)."""

    def __init__(self) -> None:
        self.rows: dict[str, ApiKey] = {}

    async def insert(self, key: ApiKey) -> None:
        await _round_trip()
        if key.id in self.rows or any(k.secret_hash == key.secret_hash for k in self.rows.values()):
            raise DuplicateKeyError(f"duplicate key {key.id}")
        self.rows[key.id] = key

    async def by_digest(self, secret_hash: str) -> ApiKey | None:
        await _round_trip()
        return next((k for k in self.rows.values() if k.secret_hash == secret_hash), None)

    async def get(self, key_id: str) -> ApiKey | None:
        await _round_trip()
        return self.rows.get(key_id)

    async def page(self, before: str | None, limit: int) -> list[ApiKey]:
        await _round_trip()
        ids = sorted((i for i in self.rows if before is None or i < before), reverse=True)
        return [self.rows[i] for i in ids[:limit]]

    async def revoke(self, key_id: str, by: Actor, now: datetime) -> ApiKey | None:
        await _round_trip()
        key = self.rows.get(key_id)
        if key is not None and key.revoked_at is None:
            self.rows[key_id] = key = replace(key, revoked_at=now, revoked_by=by)
        return key

    async def touch(self, key_id: str, now: datetime) -> None:
        await _round_trip()
        if key_id in self.rows:
            self.rows[key_id] = replace(self.rows[key_id], last_used_at=now)

    async def ensure_bootstrap(self, secret_hash: str, now: datetime) -> ApiKey:
        await _round_trip()
        found = await self.by_digest(secret_hash)
        if found is None:
            found = ApiKey(id=f"bootstrap{len(self.rows):016x}", name="bootstrap",
                           role=Role.ADMIN, secret_hash=secret_hash, created_at=now,
                           owner="bootstrap")
            self.rows[found.id] = found
        return found

    async def retire_bootstraps_before(self, current: ApiKey, by: Actor,
                                       now: datetime) -> list[str]:
        await _round_trip()
        older = [k.id for k in self.rows.values() if k.name == "bootstrap" and k.created_by is None
                 and k.revoked_at is None and k.id != current.id
                 and k.created_at < current.created_at]
        for key_id in older:
            await self.revoke(key_id, by, now)
        return older


class FakeOperatorLog:
    """The operator log: appended to, read newest first."""

    def __init__(self) -> None:
        self.entries: list[LogEntry] = []

    async def append(self, entry: LogEntry) -> None:
        await _round_trip()
        self.entries.append(entry)

    async def tally(self, entry: LogEntry) -> None:
        await _round_trip()
        minute = int(entry.at.timestamp()) // TALLY_WINDOW_S
        for i, kept in enumerate(self.entries):
            if (kept.actor, kept.action, kept.status_code) == (
                    entry.actor, entry.action, entry.status_code) \
                    and int(kept.at.timestamp()) // TALLY_WINDOW_S == minute:
                self.entries[i] = replace(kept, count=kept.count + 1)
                return
        self.entries.append(entry)

    async def page(self, *, campaign_id: str | None, actor_id: str | None, before: str | None,
                   limit: int) -> list[LogEntry]:
        await _round_trip()
        found = [e for e in reversed(self.entries)
                 if (campaign_id is None or e.campaign_id == campaign_id)
                 and (actor_id is None or (e.actor is not None and e.actor.id == actor_id))
                 and (before is None or e.id < before)]
        return found[:limit]


def fake_stores() -> Stores:
    """Every repository of one stack, in memory (a fresh, empty "database")."""
    return Stores(devices=FakeDevices(), campaigns=FakeCampaigns(), chunks=FakeChunks(),
                  deliveries=FakeDeliveries(), idempotency=FakeIdempotency(),
                  schedules=FakeSchedules(), api_keys=FakeApiKeys(),
                  operator_log=FakeOperatorLog(), test_sends=FakeTestSends())


class FakeTestSends:
    """``herald.adapters.test_sends.TestSendStore`` in memory."""

    def __init__(self) -> None:
        self.records: list[TestSend] = []

    async def expire(self, before: datetime) -> int:
        kept = [r for r in self.records if r.at >= before]
        gone, self.records = len(self.records) - len(kept), kept
        return gone

    async def insert(self, record: TestSend) -> None:
        self.records.append(record)

    async def erase(self, person: ErasedPerson) -> int:
        erased = 0
        for index, record in enumerate(self.records):
            theirs = [person.owns(asdict(o)) for o in record.outcomes]
            outcomes = tuple(replace(o, device_id="", token_suffix="", user_id=None, erased=True)
                             if mine else o for o, mine in zip(record.outcomes, theirs, strict=True))
            self.records[index] = replace(record, outcomes=outcomes)
            erased += sum(theirs)
        return erased

    async def of_campaign(self, campaign_id: str, limit: int = 50) -> list[TestSend]:
        found = [r for r in reversed(self.records) if r.campaign_id == campaign_id]
        return found[:limit] if limit else found

    async def per_device_since(self, device_ids: Sequence[str], since: datetime
                               ) -> dict[str, int]:
        wanted = set(device_ids)
        counted = Counter(o.device_id for r in self.records if r.at >= since
                          for o in r.outcomes if o.device_id in wanted)
        return dict(counted)


class FakeBackground:
    """A pod's ``Background.spawn`` that holds what it is given until the test runs it."""

    def __init__(self) -> None:
        self.spawned: list[tuple[str, Coroutine[Any, Any, None]]] = []

    def spawn(self, coroutine: Coroutine[Any, Any, None], name: str) -> None:
        self.spawned.append((name, coroutine))

    async def run(self) -> list[str]:
        """Run what was spawned (and what that spawns), in order; their names."""
        ran = []
        while self.spawned:
            name, coroutine = self.spawned.pop(0)
            await coroutine
            ran.append(name)
        return ran

    def close(self) -> None:
        for _, coroutine in self.spawned:
            coroutine.close()
        self.spawned.clear()


# --- RabbitMQ and Redis ------------------------------------------------------------------------
class FakeBus:
    """The RabbitMQ bus: records what was published; ``away`` makes every publish fail as a
    broker that is down does."""

    def __init__(self) -> None:
        self.chunks: list[SendChunk] = []
        self.dispatches: list[str] = []
        self.cancels: list[CancelCampaign] = []
        self.dead_letters: list[tuple[bytes, str]] = []
        self.away = False
        self.delivered = 0
        """Chunks senders took from the queue (a test moves it on to drain the queue)."""

    async def send_chunk(self, message: SendChunk) -> None:
        await self._confirm()
        self.chunks.append(message)

    async def chunks_ready(self, route: Route = Route.STANDARD) -> int:
        await self._confirm()
        return sum(chunk.queue_route is route for chunk in self.chunks[self.delivered:])

    async def request_dispatch(self, campaign_id: str) -> None:
        await self._confirm()
        self.dispatches.append(campaign_id)

    async def broadcast_cancel(self, message: CancelCampaign) -> None:
        await self._confirm()
        self.cancels.append(message)

    async def dead_letter(self, body: bytes, routing_key: str) -> None:
        await self._confirm()
        self.dead_letters.append((body, routing_key))

    async def _confirm(self) -> None:
        await _round_trip()
        if self.away:
            raise ConnectionError("RabbitMQ is away")


class FakeFlags:
    """Cancel flags in Redis; ``away`` makes every call fail as an unreachable Redis does."""

    def __init__(self) -> None:
        self.raised: set[str] = set()
        self.away = False

    async def raise_flag(self, campaign_id: str) -> None:
        await self._reach()
        self.raised.add(campaign_id)

    async def is_raised(self, campaign_id: str) -> bool:
        await self._reach()
        return campaign_id in self.raised

    async def count(self) -> int:
        await self._reach()
        return len(self.raised)

    async def _reach(self) -> None:
        await _round_trip()
        if self.away:
            raise redis.exceptions.ConnectionError("Redis is away")


class FakeClock:
    """UTC time that moves only when told to; starts now (at MongoDB's millisecond precision)."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start if start is not None else utcnow()

    def __call__(self) -> datetime:
        return self._now

    def epoch_s(self) -> float:
        return self._now.timestamp()

    def advance(self, seconds: float) -> datetime:
        self._now += timedelta(seconds=seconds)
        return self._now

    def set(self, instant: datetime) -> datetime:
        self._now = instant
        return self._now


class FakeRegistry:
    """Heartbeats in Redis. A pod is alive from its ``beat`` until it is ``remove``d (its key
    expired); each beat is stamped with ``clock`` (epoch seconds), as Redis' adapter stamps it
    with the pod's time. ``away`` makes every call fail as an unreachable Redis does."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._beats: dict[str, PodBeat] = {}
        self._clock = clock
        self.away = False

    async def beat(self, pod: PodBeat) -> None:
        await self._reach()
        self._beats[pod.id] = replace(pod, beat_at=self._clock())

    async def is_alive(self, pod_id: str) -> bool:
        await self._reach()
        return pod_id in self._beats

    async def remove(self, pod_id: str) -> None:
        await self._reach()
        self._beats.pop(pod_id, None)

    async def live(self, services: Iterable[str] | None = None) -> list[PodBeat]:
        await self._reach()
        wanted = set(services) if services is not None else None
        return sorted((b for b in self._beats.values() if wanted is None or b.service in wanted),
                      key=lambda b: (b.service, b.id))

    async def _reach(self) -> None:
        await _round_trip()
        if self.away:
            raise redis.exceptions.ConnectionError("Redis is away")


# --- FCM and the rate limits -------------------------------------------------------------------
def answer_by_token(token: str) -> SendResult:
    """FCM's answer as the emulator gives it: a token named after an error gets that error."""
    for error in FcmError:
        if token.startswith(error.value.lower() + "-"):
            return SendResult(error)
    return SENT


class FakeFcm(FcmClient):
    """FCM: answers each request at once with ``answer(token)``, and records the tokens sent.

    ``on_request(token)`` runs as a request reaches FCM: a test cancels a campaign there, as a
    broadcast arriving while that request is on the wire would.
    """

    def __init__(self, answer: Callable[[str], SendResult] = answer_by_token,
                 on_request: Callable[[str], None] | None = None) -> None:
        self.sent: list[str] = []
        self.bodies: list[bytes] = []
        self.rejections: list[str | None] = []
        self._answer = answer
        self._on_request = on_request

    async def send(self, body: bytes, may_send: Callable[[], bool] | None = None) -> SendResult:
        await _round_trip()
        if may_send is not None and not may_send():
            return WITHHELD
        token: str = orjson.loads(body)["message"]["token"]
        self.sent.append(token)
        self.bodies.append(body)
        if self._on_request is not None:
            self._on_request(token)
        return self._answer(token)

    def rejected(self, result: SendResult) -> None:
        self.rejections.append(result.credential)


class UnlimitedBucket(TokenBucket):
    """A rate limit that never makes anyone wait; records what was taken and the penalties."""

    def __init__(self) -> None:
        self.taken = 0
        self.penalties_s: list[float] = []

    async def take(self, wanted: int, stop: asyncio.Event | None = None) -> int:
        await _round_trip()
        self.taken += wanted
        return wanted

    async def penalize(self, seconds: float) -> None:
        await _round_trip()
        self.penalties_s.append(seconds)


class UnlimitedLimits(RedisRateLimits):
    """The project's and campaigns' rate limits, none of them ever reached."""

    def __init__(self) -> None:
        self.project = UnlimitedBucket()
        self._buckets: dict[str, UnlimitedBucket] = {}

    def for_campaign(self, campaign_id: str, rate_per_s: int | None) -> TokenBucket | None:
        if rate_per_s is None:
            return None
        return self._buckets.setdefault(campaign_id, UnlimitedBucket())

    def for_lane(self, lane: Lane) -> tuple[TokenBucket, ...]:
        return (self.project,)


def _fakes_satisfy_the_ports() -> tuple[Stores, Bus, CancelFlags, PodRegistry]:
    """Never called: this is where mypy checks that each fake satisfies its port."""
    return fake_stores(), FakeBus(), FakeFlags(), FakeRegistry()


class HeldFcm(FcmClient):
    """FCM whose answers wait until a test lets them go: ``release(n)`` answers the ``n``
    oldest requests on the wire. It tracks how many were on the wire at most."""

    def __init__(self, answer: Callable[[str], SendResult] = answer_by_token) -> None:
        self.sent: list[str] = []
        self.bodies: list[bytes] = []
        self.rejections: list[str | None] = []
        self.on_wire: list[asyncio.Future[None]] = []
        self.most_on_wire = 0
        self._answer = answer

    async def send(self, body: bytes, may_send: Callable[[], bool] | None = None) -> SendResult:
        if may_send is not None and not may_send():
            return WITHHELD
        token: str = orjson.loads(body)["message"]["token"]
        self.sent.append(token)
        self.bodies.append(body)
        answered = asyncio.get_running_loop().create_future()
        self.on_wire.append(answered)
        self.most_on_wire = max(self.most_on_wire, len(self.on_wire))
        await answered
        return self._answer(token)

    def rejected(self, result: SendResult) -> None:
        self.rejections.append(result.credential)

    def release(self, count: int) -> None:
        for answered in self.on_wire[:count]:
            answered.set_result(None)
        del self.on_wire[:count]


class FakeDevicePace:
    """``DevicePace`` in memory, on the event loop's clock, by the domain's own rule: one
    device's messages at least ``interval_s`` apart. Records each batch it was asked for (one
    round trip each) and each hold."""

    def __init__(self, interval_s: float) -> None:
        self._interval_ms = round(interval_s * 1000)
        self._next_ms: dict[str, int] = {}
        self.batches: list[list[str]] = []
        self.holds: list[tuple[str, float]] = []

    @staticmethod
    def _now_ms() -> int:
        return round(asyncio.get_running_loop().time() * 1000)

    async def reserve(self, tokens: Sequence[str]) -> list[float]:
        await _round_trip()
        self.batches.append(list(tokens))
        now, waits = self._now_ms(), []
        for token in tokens:
            reserved = reserve(self._next_ms.get(token, 0), now, self._interval_ms)
            self._next_ms[token] = reserved.next_ms
            waits.append(reserved.wait_ms / 1000)
        return waits

    async def hold(self, token: str, seconds: float) -> None:
        await _round_trip()
        self.holds.append((token, seconds))
        self._next_ms[token] = hold(self._next_ms.get(token, 0), self._now_ms(), seconds)
