"""What the service layer needs from the outside world, as protocols.

The MongoDB stores, the RabbitMQ bus and the Redis coordination in ``herald.adapters`` satisfy
them; the unit tests' in-memory fakes (``tests/unit/fakes.py``) do too, which is what lets the
use cases be tested without any server (cosmicpython's repository and fake unit of work).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypeVar

from herald.contracts.http import DeviceIn
from herald.domain.access import Actor, ApiKey, LogEntry
from herald.domain.archive import ArchiveRecord, VariantCounts
from herald.domain.audience import Audience, Zones
from herald.domain.device_import import DeviceFields, ImportCounts
from herald.domain.documents import (
    Approval,
    Campaign,
    CampaignCounts,
    CancelRecord,
    Chunk,
    ChunkState,
    ChunkStatus,
    Cursor,
    Decision,
    Delivery,
    Device,
    IdempotencyBinding,
    PauseRecord,
    Recorded,
    Schedule,
    ScheduleRunRecord,
    TestSend,
    UpsertCounts,
)
from herald.domain.erasure import ErasedPerson
from herald.domain.fcm_errors import SendResult
from herald.domain.frequency_cap import CapRule
from herald.domain.lanes import Lane, Route
from herald.domain.messages import CancelCampaign, Profile, ProfileNeed, Recipient, SendChunk
from herald.domain.outcomes import RecipientOutcome
from herald.domain.pods import PodBeat
from herald.domain.rollout import RolloutProgress
from herald.domain.status import Status, Transition
from herald.domain.timing import Wave

T = TypeVar("T")


class Offload(Protocol):
    """Runs CPU-bound work (compiling templates) off the event loop: ``await offload(work)``
    is ``work()``, done in a worker thread."""

    async def __call__(self, work: Callable[[], T]) -> T: ...


class CampaignLookup(Protocol):
    """One campaign by id: the read every question about a campaign starts from."""

    async def get(self, campaign_id: str) -> Campaign | None: ...


class CampaignReads(CampaignLookup, Protocol):
    """Which campaigns there are (the api's lists, the sweep's cancelling ones)."""

    async def page(self, statuses: Iterable[Status] | None, before: str | None,
                   limit: int) -> list[Campaign]: ...
    async def with_status(self, status: Status, limit: int = 0) -> list[Campaign]: ...


class NewCampaigns(CampaignLookup, Protocol):
    """Creating campaigns (and follow-ups linked to what they amend)."""

    async def insert(self, campaign: Campaign) -> None: ...
    async def link_amendment(self, campaign_id: str, amend_id: str) -> None: ...
    async def follow_ups_of(self, campaign_id: str) -> list[Campaign]:
        """Every follow-up (retarget, amend, retry) made of ``campaign_id``."""
        ...


class ScheduledCampaigns(CampaignLookup, Protocol):
    """Campaigns waiting for their time, and the runs of schedules."""

    async def due_scheduled(self, now: datetime, limit: int = 100) -> list[Campaign]: ...
    async def next_scheduled_due(self) -> datetime | None: ...
    async def patch_scheduled(self, edited: Campaign, now: datetime,
                              was: Status = Status.SCHEDULED) -> Campaign | None:
        """Write ``edited``'s name, content, audience, timing, rate, status and approvals only
        while the stored campaign is still ``was`` at ``edited.revision`` (then one revision
        more)."""
        ...
    async def set_rate(self, campaign_id: str, rate_per_s: int | None, by: Actor, now: datetime,
                       *, among: Iterable[Status],
                       approvals: Sequence[Approval] | None = None) -> Campaign | None: ...
    async def hold_for_approval(self, campaign_id: str, audience_estimate: int, now: datetime,
                                *, due_at: datetime) -> Campaign | None:
        """``scheduled → awaiting_approval`` (counted at its time, it needs an approval) only
        while the campaign is still due at ``due_at``."""
        ...
    async def fire(self, campaign_id: str, now: datetime, fired_by: str, *,
                   due_at: datetime) -> Campaign | None:
        """``scheduled → pending`` only while the campaign is still due at ``due_at`` (as the
        scheduler read it): a campaign moved at the last moment is left for its new time."""
        ...
    async def miss(self, campaign_id: str, reason: str, now: datetime, *,
                   due_at: datetime) -> Campaign | None:
        """``scheduled → missed`` only while the campaign is still due at ``due_at``."""
        ...
    async def insert_run(self, campaign: Campaign) -> Campaign: ...
    async def find_run(self, run_key: str) -> Campaign | None: ...


class CampaignApprovals(CampaignLookup, Protocol):
    """Approving a campaign that awaits it (``approval.py``)."""

    async def approve(self, campaign: Campaign, transition: Transition,
                      approvals: Sequence[Approval], now: datetime) -> Campaign | None:
        """Apply ``transition``, record ``approvals`` and clear its ``editors`` only if the
        campaign is still as read (its status allows it and its revision is
        ``campaign.revision``)."""
        ...


class CampaignPaging(CampaignLookup, Protocol):
    """A dispatcher's lease on a campaign and its checkpoints, and the chunks a cancel froze."""

    async def claim_for_dispatch(self, campaign_id: str | None, pod_id: str, now: datetime,
                                 lease_until: datetime) -> Campaign | None: ...
    async def renew_lease(self, campaign_id: str, pod_id: str,
                          lease_until: datetime) -> bool: ...
    async def paging(self, limit: int = 0) -> list[Campaign]: ...
    async def take_over(self, campaign_id: str, dead_owner: str, pod_id: str,
                        lease_until: datetime) -> Campaign | None: ...
    async def fix_dispatch_bound(self, campaign_id: str, pod_id: str, until: str | None,
                                 waves: Sequence[Wave] | None = None) -> Campaign | None: ...
    async def checkpoint(self, campaign_id: str, pod_id: str, seq: int, size: int,
                         lease_until: datetime) -> bool: ...
    async def finish_dispatch(self, campaign_id: str, pod_id: str,
                              now: datetime) -> Campaign | None: ...
    async def release_dispatch(self, campaign_id: str, pod_id: str, until: datetime) -> None: ...


class CampaignCompletion(CampaignLookup, Protocol):
    """Counting finished chunks and finishing a campaign once (``completion.py``)."""

    async def count_finished_chunk(self, campaign_id: str, sent: int, failed: int, *,
                                   done: bool, suppressed: int = 0) -> Campaign | None: ...
    async def mark_first_request(self, campaign_id: str, at: datetime) -> bool:
        """Note when the campaign's first FCM request started: True for the one pod that
        noted it first."""
        ...
    async def transition(self, campaign_id: str, transition: Transition,
                         now: datetime) -> Campaign | None: ...
    async def finish(self, campaign_id: str, transition: Transition, counts: CampaignCounts,
                     error: str | None, now: datetime) -> Campaign | None: ...
    async def paged_and_open(self, limit: int = 0) -> list[Campaign]: ...
    async def stuck_finalizing(self, older_than: datetime, limit: int = 0) -> list[Campaign]: ...
    async def recount(self, campaign_id: str, counts: CampaignCounts) -> bool:
        """Final counts of a finished campaign computed again (answers recorded late)."""
        ...


class CampaignCancels(CampaignLookup, Protocol):
    """The stopping protocol's writes (``stopping/``): each decision written once, conditional
    on the status and on the decision it replaces (``after``, as read); acknowledgements; the
    settler's ends."""

    async def begin_cancel(self, campaign_id: str, record: CancelRecord, decision: Decision,
                           *, after: Decision | None, status: Status) -> Campaign | None:
        """``status → cancelling`` (``status`` as read: a pending campaign claimed meanwhile,
        or a settled pause resumed meanwhile, is decided again)."""
        ...
    async def begin_pause(self, campaign_id: str, record: PauseRecord, decision: Decision,
                          *, after: Decision | None) -> Campaign | None: ...
    async def resume(self, campaign_id: str, by: Actor | None, decision: Decision,
                     *, after: Decision | None) -> Campaign | None: ...
    async def add_ack(self, campaign_id: str, decision: Decision, pod_id: str) -> None:
        """``pod_id`` stopped for ``decision`` (nothing written if it is no longer the latest)."""
        ...
    async def claim_cancel_finalization(self, campaign_id: str, pod_id: str, now: datetime,
                                        until: datetime) -> bool: ...
    async def confirm_cancel(self, campaign_id: str, counts: CampaignCounts, now: datetime,
                             error: str | None = None) -> Campaign | None: ...
    async def settle_pause(self, campaign_id: str, pause_id: str, counts: CampaignCounts,
                           now: datetime) -> Campaign | None: ...
    async def mark_offered(self, campaign_id: str, resume_id: str, now: datetime) -> bool:
        """The resumed campaign's kept chunks were offered again (once per resume)."""
        ...
    async def resumed_unoffered(self) -> list[Campaign]:
        """Campaigns resumed whose kept chunks were not offered again yet."""
        ...


class CampaignPauses(CampaignLookup, Protocol):
    """A staged rollout's progress (``rollout.py``)."""

    async def update_rollout(self, campaign_id: str, wave: int, progress: RolloutProgress
                             ) -> Campaign | None: ...
    async def with_rollout(self) -> list[Campaign]:
        """Campaigns sending in waves (``in_progress`` with a rollout)."""
        ...


class CampaignRepository(CampaignReads, NewCampaigns, ScheduledCampaigns, CampaignApprovals,
                         CampaignPaging, CampaignCompletion, CampaignCancels, CampaignPauses,
                         Protocol):
    """Every question asked of the campaigns collection (one MongoDB adapter answers them all);
    a use case names the part it asks."""


class ChunkRepository(Protocol):
    async def create(self, campaign_id: str, seq: int, recipients: Sequence[Recipient],
                     cursor: Cursor, now: datetime,
                     status: ChunkStatus = ChunkStatus.PENDING) -> Chunk: ...
    async def get(self, campaign_id: str, seq: int) -> Chunk | None: ...
    async def state(self, campaign_id: str, seq: int) -> ChunkState | None: ...
    async def claim(self, campaign_id: str, seq: int, pod_id: str, holder: str | None,
                    until: datetime, fence: int = 0) -> ChunkState | None: ...
    async def renew(self, campaign_id: str, seq: int, pod_id: str, fence: int,
                    until: datetime) -> int | None: ...
    async def release(self, campaign_id: str, seq: int, pod_id: str, *, refund: bool) -> None: ...
    async def finish(self, campaign_id: str, seq: int, status: ChunkStatus, sent: int,
                     failed: int, now: datetime, owner: str | None,
                     suppressed: int = 0) -> bool: ...
    def in_order(self, campaign_id: str) -> AsyncIterator[Chunk]: ...
    async def count_closed(self, campaign_id: str) -> int: ...
    async def pending_everywhere(self) -> list[ChunkState]:
        """Every chunk not closed yet, of every campaign."""
        ...
    async def pending(self, campaign_id: str) -> list[ChunkState]:
        """The campaign's chunks not closed yet, held by a pod or not."""
        ...
    async def mark_wave_sent(self, campaign_id: str, seq: int, wave: int) -> None: ...
    async def wait_for_next_wave(self, campaign_id: str, seq: int, pod_id: str,
                                 wave: int) -> bool:
        """Give back a pending chunk ``pod_id`` holds, its waves up to ``wave`` recorded and
        its later ones not: ``wave_sent`` = ``wave`` and its attempts counted afresh, for the
        next wave's delivery. False if this pod no longer held it."""
        ...
    async def mark_rescued(self, held: ChunkState, now: datetime,
                           not_since: datetime) -> bool: ...
    async def erase(self, person: ErasedPerson) -> int:
        """Replace each recipient of ``person`` in every chunk by the erased placeholder (its
        position stays); how many were replaced."""
        ...


class DeliveryRepository(Protocol):
    async def record(self, campaign_id: str, seq: int, pod_id: str,
                     outcomes: Sequence[RecipientOutcome], now: datetime) -> None: ...
    async def recorded(self, campaign_id: str, seq: int) -> Recorded: ...
    def in_order(self, campaign_id: str) -> AsyncIterator[Delivery]: ...


class CampaignArchival(Protocol):
    """Finished campaigns whose per-recipient records go to an archive (``archiving.py``):
    which are due, the claim one replica holds on one while it archives it, and the deletion
    of its chunks and deliveries once its archive is verified."""

    async def due(self, ended_before: datetime, now: datetime, limit: int) -> list[Campaign]:
        """Finished campaigns not archived whose end is before ``ended_before`` and that
        nobody holds claimed at ``now``, oldest first."""
        ...
    async def count_due(self, ended_before: datetime) -> int: ...
    async def claim(self, campaign_id: str, pod_id: str, now: datetime,
                    until: datetime) -> Campaign | None:
        """Hold ``campaign_id`` for archiving until ``until``, unless another pod holds it or
        it is archived already; the campaign, or None."""
        ...
    async def release(self, campaign_id: str, pod_id: str) -> None:
        """Give up the claim (the archive failed): the next run, of any replica, tries again."""
        ...
    async def mark_archived(self, campaign_id: str, pod_id: str, record: ArchiveRecord,
                            variants: dict[str, VariantCounts]) -> Campaign | None:
        """Write where its archive is, if ``pod_id`` still holds the claim."""
        ...
    async def unpurged(self, limit: int) -> list[Campaign]:
        """Archived campaigns whose records are not deleted yet."""
        ...
    async def purge(self, campaign_id: str) -> tuple[int, int]:
        """Delete the campaign's chunks and deliveries; how many of each."""
        ...
    async def mark_purged(self, campaign_id: str, now: datetime) -> None: ...


class ArchiveTarget(Protocol):
    """A directory or an S3-compatible bucket that keeps archives (``adapters/archives.py``)."""

    def location(self, name: str) -> str:
        """Where ``name`` is stored, as a URL (``file://...``, ``s3://...``)."""
        ...
    async def put(self, name: str, blocks: AsyncIterator[bytes]) -> None:
        """Store ``blocks`` as ``name``, whole or not at all (a reader never sees half)."""
        ...
    async def sha256(self, name: str) -> str | None:
        """The SHA-256 of ``name`` as stored, read back whole; None if there is none."""
        ...
    def get(self, name: str) -> AsyncIterator[bytes]:
        """``name`` as stored, block by block (FileNotFoundError or the client's error if
        there is none)."""
        ...


class ArchivedErasures(Protocol):
    """People erased after some campaigns' archives were written, waiting for those files to
    be rewritten without them (``archive_erasure.py``), and the archived campaigns' side of it:
    a claim on one while its file is rewritten, and its record updated after."""

    async def queue(self, person: ErasedPerson, now: datetime) -> bool:
        """Keep ``person`` (user id and tokens) until every archive is rewritten without them;
        False when no campaign is archived (nothing to rewrite, nothing kept)."""
        ...
    async def waiting(self, limit: int) -> list[tuple[str, ErasedPerson]]:
        """People queued (with each entry's id), oldest first."""
        ...
    async def done(self, entry_ids: Sequence[str]) -> None:
        """Forget these entries: every archive was rewritten without them."""
        ...
    async def archived(self, after_id: str | None, limit: int) -> list[Campaign]:
        """Campaigns with an archive, by id after ``after_id``."""
        ...
    async def claim_archived(self, campaign_id: str, pod_id: str, now: datetime,
                             until: datetime) -> Campaign | None:
        """Hold an archived campaign while its file is rewritten (the archive's own claim)."""
        ...
    async def mark_rewritten(self, campaign_id: str, pod_id: str, record: ArchiveRecord,
                             variants: dict[str, VariantCounts]) -> Campaign | None:
        """Write the rewritten file's record and summary and release the claim, if ``pod_id``
        still holds it."""
        ...
    async def release(self, campaign_id: str, pod_id: str) -> None: ...


class DeviceImporter(Protocol):
    async def import_batch(self, lines: Sequence[DeviceFields], now: datetime) -> ImportCounts:
        """Upsert by token the devices of ``lines`` (in order: each token's last line is what
        is stored), writing only what changes; what each line did
        (``herald.domain.device_import.plan_batch``)."""
        ...


class DeviceRepository(DeviceImporter, Protocol):
    async def upsert(self, devices: Sequence[DeviceIn], now: datetime) -> UpsertCounts: ...
    async def mark_invalid(self, tokens: Sequence[str], reason: str, now: datetime) -> int: ...
    def stream(self, audience: Audience, after: str | None, until: str | None, *,
               zones: Zones | None = None,
               need: ProfileNeed | None = None) -> AsyncIterator[tuple[str, Recipient]]:
        """The devices ``audience`` admits (within ``zones``), ``after < id <= until``, in id
        order: each one's id and the recipient it is (with the profile ``need`` asks for)."""
        ...
    async def count_between(self, audience: Audience, after: str | None, until: str | None, *,
                            zones: Zones | None = None) -> int:
        """How many devices ``stream`` would give, counted by the database."""
        ...
    async def profiles(self, tokens: Sequence[str], need: ProfileNeed) -> dict[str, Profile]:
        """The profiles of the devices with these tokens, by token (unknown ones left out)."""
        ...
    async def timezones(self, audience: Audience) -> list[str]: ...
    async def by_timezone(self, audience: Audience) -> dict[str | None, int]:
        """How many devices ``audience`` admits, by timezone as registered (None: none)."""
        ...
    async def count(self, audience: Audience) -> int: ...
    async def locales(self, audience: Audience) -> dict[str | None, int]:
        """How many devices ``audience`` admits, by locale as registered (None: no locale)."""
        ...
    async def newest_id(self) -> str | None: ...
    async def find_by_token(self, token: str) -> Device | None: ...
    async def find_by_user_id(self, user_id: str) -> Device | None:
        """The newest device registered for ``user_id`` (a user may have several) whose token
        is not retired."""
        ...
    async def of_user(self, user_id: str) -> list[Device]:
        """Every device registered with ``user_id``, retired ones too."""
        ...
    async def delete_of_user(self, user_id: str) -> int:
        """Remove every device registered with ``user_id``; how many there were."""
        ...
    async def delete_by_token(self, token: str) -> bool:
        """Remove the device of ``token``; False if there was none."""
        ...


class TestSendRepository(Protocol):
    """Test sends, kept apart from every campaign's own records."""

    async def insert(self, record: TestSend) -> None: ...
    async def of_campaign(self, campaign_id: str, limit: int = 50) -> list[TestSend]: ...
    async def per_device_since(self, device_ids: Sequence[str], since: datetime
                               ) -> dict[str, int]:
        """How many test sends reached each of ``device_ids`` since ``since``."""
        ...
    async def expire(self, before: datetime) -> int:
        """Delete the records of test sends made before ``before``; how many."""
        ...
    async def erase(self, person: ErasedPerson) -> int:
        """Blank ``person``'s devices in every test send (FCM's answers stay); how many."""
        ...


class ScheduleRepository(Protocol):
    async def insert(self, schedule: Schedule) -> None: ...
    async def get(self, schedule_id: str) -> Schedule | None: ...
    async def page(self, before: str | None, limit: int) -> list[Schedule]: ...
    async def update(self, schedule_id: str, changes: Mapping[str, Any],
                     unless_ended: bool = False) -> Schedule | None: ...
    async def due(self, now: datetime, limit: int = 100) -> list[Schedule]: ...
    async def next_run_at(self) -> datetime | None: ...
    async def claim(self, schedule_id: str, occurrence: datetime, pod_id: str,
                    now: datetime, lease_until: datetime) -> Schedule | None: ...
    async def advance(self, claimed: Schedule, pod_id: str, next_run_at: datetime | None,
                      runs: Sequence[ScheduleRunRecord], missed: int, now: datetime) -> bool: ...


class IdempotencyRepository(Protocol):
    async def reserve(self, binding: IdempotencyBinding) -> IdempotencyBinding | None: ...
    async def rebind(self, key: str, stale_campaign_id: str, campaign_id: str) -> bool: ...
    async def expire(self, before: datetime) -> int:
        """Forget keys bound before ``before``; how many."""
        ...


class ApiKeyRepository(Protocol):
    async def insert(self, key: ApiKey) -> None: ...
    async def by_digest(self, secret_hash: str) -> ApiKey | None: ...
    async def get(self, key_id: str) -> ApiKey | None: ...
    async def page(self, before: str | None, limit: int) -> list[ApiKey]: ...
    async def revoke(self, key_id: str, by: Actor, now: datetime) -> ApiKey | None: ...
    async def touch(self, key_id: str, now: datetime) -> None: ...
    async def ensure_bootstrap(self, secret_hash: str, now: datetime) -> ApiKey: ...
    async def retire_bootstraps_before(self, current: ApiKey, by: Actor,
                                       now: datetime) -> list[str]: ...


class OperatorLogRepository(Protocol):
    async def append(self, entry: LogEntry) -> None: ...
    async def tally(self, entry: LogEntry) -> None:
        """Count ``entry`` into the one entry of its actor, action and status for the minute
        it falls in (made by the first)."""
    async def page(self, *, campaign_id: str | None, actor_id: str | None, before: str | None,
                   limit: int) -> list[LogEntry]: ...


@dataclass(frozen=True)
class Stores:
    """Every repository of one stack (one MongoDB database, or the unit tests' memory), as the
    composition roots build them; a use case takes the one repository it uses, or
    ``CampaignRecords``."""

    devices: DeviceRepository
    campaigns: CampaignRepository
    chunks: ChunkRepository
    deliveries: DeliveryRepository
    idempotency: IdempotencyRepository
    schedules: ScheduleRepository
    api_keys: ApiKeyRepository
    operator_log: OperatorLogRepository
    test_sends: TestSendRepository


class CampaignRecords(Protocol):
    """The repositories a campaign's own records live in, and its audience's devices: what
    paging, sending, finishing, cancelling and auditing a campaign read and write (``Stores``
    has them all)."""

    @property
    def campaigns(self) -> CampaignRepository: ...
    @property
    def chunks(self) -> ChunkRepository: ...
    @property
    def deliveries(self) -> DeliveryRepository: ...
    @property
    def devices(self) -> DeviceRepository: ...


class Bus(Protocol):
    """Herald's commands on RabbitMQ; every publish waits for the broker's confirm."""

    async def send_chunk(self, message: SendChunk) -> None:
        """Publish a chunk to its route's queue (``SendChunk.route``)."""
        ...

    async def chunks_ready(self, route: Route = Route.STANDARD) -> int:
        """Chunk messages waiting, undelivered, in ``route``'s queue."""
        ...
    async def request_dispatch(self, campaign_id: str) -> None: ...
    async def broadcast_cancel(self, message: CancelCampaign) -> None: ...
    async def dead_letter(self, body: bytes, routing_key: str) -> None: ...


class CancelFlags(Protocol):
    """The cancel intent in Redis, for pods that missed the broadcast."""

    async def raise_flag(self, campaign_id: str) -> None: ...
    async def is_raised(self, campaign_id: str) -> bool: ...
    async def count(self) -> int: ...


class PodRegistry(Protocol):
    """Heartbeats: which pods are alive and what they work on."""

    async def beat(self, pod: PodBeat) -> None: ...
    async def is_alive(self, pod_id: str) -> bool: ...
    async def remove(self, pod_id: str) -> None: ...
    async def live(self, services: Iterable[str] | None = None) -> list[PodBeat]: ...


class FleetMeasure(Protocol):
    """What the fleet sends in a second, as measured (``adapters/fleet_rate.py``)."""

    async def per_sender_per_s(self) -> float | None:
        """Per live sender; None before the first measurement."""
        ...


class Fcm(Protocol):
    """FCM's ``messages:send`` (the FCM adapter): one pre-encoded request, its answer."""

    async def send(self, body: bytes, may_send: Callable[[], bool] | None = None
                   ) -> SendResult:
        """One request; ``may_send`` is asked once more right before its bytes leave."""
        ...

    def rejected(self, result: SendResult) -> None:
        """FCM refused the OAuth token ``result`` was sent with: use another from now on."""
        ...


class RateBucket(Protocol):
    """A share of a rate limit (the fleet's FCM quota, or one campaign's cap)."""

    async def take(self, wanted: int, stop: asyncio.Event | None = None) -> int:
        """Up to ``wanted`` tokens, waiting for at least one (0 if ``stop`` is set first)."""
        ...

    async def penalize(self, seconds: float) -> None:
        """Nobody takes a token for ``seconds`` (FCM's ``Retry-After``)."""
        ...


class RateLimits(Protocol):
    """The fleet's FCM quota and each campaign's own cap."""

    @property
    def project(self) -> RateBucket: ...

    def for_campaign(self, campaign_id: str, rate_per_s: int | None) -> RateBucket | None: ...

    def for_lane(self, lane: Lane) -> tuple[RateBucket, ...]:
        """The buckets a request of ``lane`` takes from: the project's rate, and for ``bulk``
        first its share of it (the rest is kept for urgent sends)."""
        ...


class DevicePace(Protocol):
    """Each device's pace, shared by every sender (``domain/pace.py``)."""

    async def reserve(self, tokens: Sequence[str]) -> list[float]:
        """For each of ``tokens`` (a batch, one atomic step): 0.0 if a message to it may start
        now (its next moment moves on one interval), else the seconds until it may."""
        ...

    async def hold(self, token: str, seconds: float) -> None:
        """No message to ``token`` starts within ``seconds`` (FCM said it had too many)."""
        ...


class FrequencyCaps(Protocol):
    """Each person's marketing pushes within the cap's windows, shared by every sender
    (``domain/frequency_cap.py``)."""

    async def admit(self, campaign_id: str, rule: CapRule,
                    people: Mapping[str, Sequence[str]], now_s: float | None = None
                    ) -> set[str]:
        """The people of ``people`` (person → the send keys of this batch that reach them)
        that ``rule`` lets ``campaign_id`` reach, their sends counted, in one atomic step for
        the whole batch; ``now_s`` None: the store's own clock."""
        ...

    async def release(self, sends: Mapping[str, Sequence[str]]) -> None:
        """Count these sends (person → send keys) no more: their requests failed or never
        left."""
        ...

    async def forget(self, people: Sequence[str]) -> None:
        """Everything counted for these people (their erasure)."""
        ...

    async def histories(self, people: Sequence[str]) -> dict[str, list[tuple[str, float]]]:
        """What is counted for each of ``people``, read without changing anything: (send key,
        when it was counted in seconds) pairs, a person with nothing counted left out (the
        estimate's forecast of the cap)."""
        ...
