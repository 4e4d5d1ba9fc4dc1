"""Who a campaign reaches, and what happened to each of them.

Two questions share this module because each answers part of the other:
- *recipient sources*: the ordered, resumable stream of recipients a dispatcher pages into chunks
  (an audience over the device registry, or some recipients of an earlier campaign, read from
  its audit);
- *the audit*: per recipient, ``sent``/``failed`` as recorded from FCM's answers,
  ``suppressed`` as recorded by the rule that held it back (``domain/suppression.py``), and
  ``unsent`` for everyone targeted (in a chunk, or still in the source past the last chunk) but
  not recorded.
Final counts are computed from the audit itself, so the numbers and the lists never disagree.
What a cancel (or a pause) left unpaged is never written anywhere: it is the audience beyond the
paging cursor (``paging_cursor``), counted by the database (``unpaged``) and listed from it
(docs/cancel-protocol.md, "What a cancel leaves unpaged").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from herald.domain.audience import Audience, Zones
from herald.domain.documents import (
    Campaign,
    CampaignCounts,
    Cursor,
    FollowUpOf,
    Outcome,
    Recorded,
)
from herald.domain.fcm_errors import FcmError, token_is_unusable
from herald.domain.locales import LocaleMatcher
from herald.domain.messages import Profile, ProfileNeed, Recipient
from herald.domain.rendering import DEFAULT_VARIANT
from herald.domain.status import TERMINAL
from herald.domain.suppression import Rule, is_failure, is_suppressed, suppressed_by
from herald.domain.timing import Wave
from herald.service_layer.ports import CampaignRecords


@dataclass(frozen=True, slots=True)
class RecipientLine:
    """One line of the audit."""

    token: str
    user_id: str | None
    outcome: Outcome
    error: str | None = None
    variant: str = DEFAULT_VARIANT
    """The translation the recipient's message was in (its tag), or ``default``: the
    campaign's own content (always, for a campaign without translations)."""
    erased: bool = False
    """The recipient's person was erased (``erasure.py``): a placeholder, counted in its place
    and never listed nor sent to."""
    rule: Rule | None = None
    """What suppressed it (``suppressed`` only)."""

    def as_dict(self) -> dict[str, Any]:
        return {"token": self.token, "user_id": self.user_id, "outcome": self.outcome.value,
                "error": self.error, "variant": self.variant,
                "rule": None if self.rule is None else self.rule.value}


class Variants:
    """Which variant a campaign's recipient got: the tag RFC 4647 lookup picks for the locale
    its chunk recorded (the sender picks with the same matcher, from the same profile)."""

    def __init__(self, tags: Iterable[str]) -> None:
        self._matcher = LocaleMatcher(tags)

    def of(self, recipient: Recipient) -> str:
        profile = recipient.profile
        return self._matcher.match(profile.locale if profile else None) or DEFAULT_VARIANT


@dataclass(frozen=True, slots=True)
class FinalCounts:
    counts: CampaignCounts
    failed_not_by_token: int = 0
    """Failures a retry could fix (quota, outages, dead-lettered chunks, a configuration error
    once fixed), not dead tokens nor tokens of another project."""


class RecipientSource(Protocol):
    def stream(self, after: Cursor) -> AsyncGenerator[tuple[Cursor, Recipient], None]:
        """Recipients after position ``after``, each with its position."""
        ...

    async def count(self, after: Cursor) -> int:
        """How many recipients ``stream(after)`` would give, without reading them where the
        database can count them."""
        ...


class AudienceSource:
    """Devices matching an audience, in id order, up to the newest device at claim time."""

    def __init__(self, stores: CampaignRecords, audience: Audience, until: str | None,
                 need: ProfileNeed | None = None) -> None:
        self._stores = stores
        self._audience = audience
        self._until = until
        self._need = need

    async def stream(self, after: Cursor) -> AsyncGenerator[tuple[Cursor, Recipient], None]:
        start = after if isinstance(after, str) else None
        async for device_id, recipient in self._stores.devices.stream(
                self._audience, start, self._until, need=self._need):
            yield device_id, recipient

    async def count(self, after: Cursor) -> int:
        start = after if isinstance(after, str) else None
        return await self._stores.devices.count_between(self._audience, start, self._until)


class FollowUpSource:
    """Some recipients of a finished campaign, by position in its audit: the unsent ones
    (retarget); with ``of=NOT_SENT`` also those that failed for a reason other than their token
    (retry); with ``of=SENT`` those FCM accepted (amend). ``with_suppressed`` adds, after
    those, the ones a rule suppressed (a retarget that asks for them).

    The positions stay valid across pages because a finished campaign's records no longer
    change (``CampaignCreator.correct`` says why)."""

    PROFILE_BATCH = 2000
    """Recipients whose profiles are read with one query, when the follow-up's messages differ
    per device (one ``$in`` on MongoDB; one scan of the devices on nx-27017)."""

    def __init__(self, stores: CampaignRecords, parent: Campaign,
                 of: FollowUpOf = FollowUpOf.UNSENT, need: ProfileNeed | None = None,
                 *, with_suppressed: bool = False) -> None:
        self._stores = stores
        self._parent = parent
        self._of = of
        self._need = need
        self._with_suppressed = with_suppressed

    async def stream(self, after: Cursor) -> AsyncGenerator[tuple[Cursor, Recipient], None]:
        skip = after if isinstance(after, int) else 0
        size = 1 if self._need is None else self.PROFILE_BATCH
        position = 0
        batch: list[tuple[int, RecipientLine]] = []
        async for line in self._lines():
            position += 1  # an erased recipient keeps its place, so a resumed page does too
            if position > skip and not line.erased:
                batch.append((position, line))
            if len(batch) >= size:
                for item in await self._recipients(batch):
                    yield item
                batch = []
        for item in await self._recipients(batch):
            yield item

    async def count(self, after: Cursor) -> int:
        skip = after if isinstance(after, int) else 0
        position = counted = 0
        async for line in self._lines():
            position += 1
            counted += position > skip and not line.erased
        return counted

    async def _recipients(self, batch: list[tuple[int, RecipientLine]]
                          ) -> list[tuple[Cursor, Recipient]]:
        """The lines as recipients, with their devices' profiles as they are now when the
        follow-up's messages differ per device (re-rendered for each device)."""
        profiles: dict[str, Profile] = {}
        if self._need is not None and batch:
            profiles = await self._stores.devices.profiles([line.token for _, line in batch],
                                                           self._need)
        return [(position, Recipient.model_construct(token=line.token, user_id=line.user_id,
                                                     profile=profiles.get(line.token)))
                for position, line in batch]

    async def _lines(self) -> AsyncIterator[RecipientLine]:
        """The parent's lines this follow-up is of, erased ones included (to keep places)."""
        for outcome in self._outcomes():
            async for line in audit(self._stores, self._parent, outcome, in_place=True):
                if outcome is not Outcome.FAILED or not token_is_unusable(line.error):
                    yield line

    def _outcomes(self) -> list[Outcome]:
        """The parent's outcomes it reaches, in the order its positions count them."""
        outcomes = {FollowUpOf.SENT: [Outcome.SENT], FollowUpOf.UNSENT: [Outcome.UNSENT],
                    FollowUpOf.NOT_SENT: [Outcome.FAILED, Outcome.UNSENT]}[self._of]
        return [*outcomes, Outcome.SUPPRESSED] if self._with_suppressed else outcomes


def _skipped(recipient: Recipient) -> Recipient:
    """A recipient of a wave quiet hours skip: the sender records it suppressed."""
    return recipient.model_copy(update={"suppressed": Rule.QUIET_HOURS})


class LocalTimeSource:
    """The audience wave by wave, each in id order: per-device local-time delivery (a wave is
    the timezones where the campaign's wall-clock time happens at one instant), quiet hours
    (the zones inside the window: due when it ends there, or due at once and marked
    suppressed), or both.

    Positions are ``(wave, device id)``. With ``due_by`` the stream stops before the first wave
    that is not due yet; without it, it runs to the end (what the audit counts as unsent).
    """

    def __init__(self, stores: CampaignRecords, audience: Audience, waves: tuple[Wave, ...],
                 until: str | None, due_by: datetime | None,
                 need: ProfileNeed | None = None) -> None:
        self._need = need
        self._stores = stores
        self._audience = audience
        self._waves = waves
        self._until = until
        self._due_by = due_by
        self._listed = tuple(sorted({zone for wave in waves for zone in wave.zones}))

    def _zones(self, wave: Wave) -> Zones:
        """The wave's devices: in its zones, and for ``others`` those with no timezone or one
        unknown when the waves were planned."""
        return Zones(tuple(wave.zones), others=wave.others, listed=self._listed)

    async def stream(self, after: Cursor) -> AsyncGenerator[tuple[Cursor, Recipient], None]:
        first_wave, after_id = after if isinstance(after, tuple) else (0, None)
        for index in range(first_wave, len(self._waves)):
            wave = self._waves[index]
            if self._due_by is not None and wave.due_at > self._due_by:
                return
            start = after_id if index == first_wave else None
            async for device_id, recipient in self._stores.devices.stream(
                    self._audience, start, self._until, zones=self._zones(wave),
                    need=self._need):
                yield (index, device_id), _skipped(recipient) if wave.skipped else recipient

    async def count(self, after: Cursor) -> int:
        first_wave, after_id = after if isinstance(after, tuple) else (0, None)
        counted = 0
        for index in range(first_wave, len(self._waves)):
            wave = self._waves[index]
            if self._due_by is not None and wave.due_at > self._due_by:
                break
            counted += await self._stores.devices.count_between(
                self._audience, after_id if index == first_wave else None, self._until,
                zones=self._zones(wave))
        return counted

    def next_wave_due(self) -> datetime | None:
        """When the first wave this stream stopped before is due (None: nothing left)."""
        if self._due_by is None:
            return None
        return min((w.due_at for w in self._waves if w.due_at > self._due_by), default=None)


async def source_for(stores: CampaignRecords, campaign: Campaign,
                     due_by: datetime | None = None,
                     need: ProfileNeed | None = None) -> RecipientSource:
    """Where ``campaign``'s recipients come from; ``due_by`` limits local-time waves to the due;
    ``need``: what of each device the recipients carry (the dispatcher's chunks)."""
    if campaign.follow_up is not None:
        parent = await stores.campaigns.get(campaign.follow_up.campaign_id)
        if parent is None:
            raise LookupError(f"campaign {campaign.follow_up.campaign_id} is gone")
        return FollowUpSource(stores, parent, campaign.follow_up.outcome, need,
                              with_suppressed=campaign.follow_up.with_suppressed)
    audience = campaign.reach or Audience()
    dispatch = campaign.dispatch
    if dispatch.waves is not None:
        return LocalTimeSource(stores, audience, dispatch.waves, dispatch.until, due_by, need)
    return AudienceSource(stores, audience, dispatch.until, need)


async def _recorded_by_chunk(stores: CampaignRecords,
                             campaign_id: str) -> AsyncIterator[tuple[int, Recorded]]:
    """Recorded outcomes grouped by chunk, in chunk order; a position recorded twice counts once."""
    seq: int | None = None
    group: Recorded = {}
    async for delivery in stores.deliveries.in_order(campaign_id):
        if delivery.seq != seq:
            if seq is not None:
                yield seq, group
            seq, group = delivery.seq, {}
        delivery.add_to(group)
    if seq is not None:
        yield seq, group


class _Lookahead:
    """Walks the recorded groups alongside the chunks, both in chunk order."""

    def __init__(self, groups: AsyncIterator[tuple[int, Recorded]]) -> None:
        self._groups = groups
        self._head: tuple[int, Recorded] | None = None
        self._done = False

    async def for_chunk(self, seq: int) -> Recorded:
        while not self._done and (self._head is None or self._head[0] < seq):
            self._head = await anext(self._groups, None)
            self._done = self._head is None
        if self._head is not None and self._head[0] == seq:
            return self._head[1]
        return {}


def outcome_of(recorded: Recorded, position: int) -> tuple[Outcome, str | None]:
    """The audit's outcome of the recipient at ``position`` of a chunk, and its error (or,
    suppressed, the code of its rule)."""
    if position not in recorded:
        return Outcome.UNSENT, None
    error = recorded[position]
    if error is None:
        return Outcome.SENT, None
    return (Outcome.SUPPRESSED if is_suppressed(error) else Outcome.FAILED), error


async def audit(stores: CampaignRecords, campaign: Campaign, outcome: Outcome, *,
                in_place: bool = False) -> AsyncIterator[RecipientLine]:
    """The recipients of ``campaign`` whose outcome is ``outcome``, in chunk order.

    ``unsent`` also covers the part of the source the dispatcher never paged (it stopped early).
    An erased person's recipients are left out (still counted, never listed), unless
    ``in_place``: then a line without anything of theirs (``erased``) holds each one's place,
    which is what a follow-up counts its positions in.
    """
    records = _Lookahead(_recorded_by_chunk(stores, campaign.id))
    variants = Variants(campaign.content.translations)
    cursor: Cursor = None
    async for chunk in stores.chunks.in_order(campaign.id):
        recorded = await records.for_chunk(chunk.seq)
        cursor = chunk.state.cursor
        for position, recipient in enumerate(chunk.recipients):
            found, error = outcome_of(recorded, position)
            if found is outcome and (in_place or not recipient.erased):
                rule = suppressed_by(error)
                yield RecipientLine(recipient.token, recipient.user_id, found,
                                    None if rule else error, variants.of(recipient),
                                    erased=bool(recipient.erased), rule=rule)
    if outcome is Outcome.UNSENT and campaign.source_not_exhausted:
        source = await source_for(stores, campaign, need=_variant_need(campaign))
        async for _, recipient in source.stream(after=cursor):
            yield RecipientLine(recipient.token, recipient.user_id, Outcome.UNSENT,
                                variant=variants.of(recipient))


def _variant_need(campaign: Campaign) -> ProfileNeed | None:
    """What the audit reads of the devices never paged: their locale, if the campaign has
    translations (the variant they would have got)."""
    return ProfileNeed() if campaign.content.translations else None


async def variants_of(stores: CampaignRecords, campaign: Campaign,
                      outcome: Outcome) -> dict[str, int]:
    """The recipients of ``campaign`` with ``outcome``, by the variant they got (or, unsent,
    would have got): the languages a follow-up of them affects. A campaign without
    translations has only ``default``, counted without reading the audit."""
    if not campaign.content.translations:
        count = {Outcome.SENT: campaign.counts.sent, Outcome.FAILED: campaign.counts.failed,
                 Outcome.SUPPRESSED: campaign.counts.suppressed}.get(outcome,
                                                                    campaign.counts.unsent)
        return {DEFAULT_VARIANT: count} if count else {}
    counted: Counter[str] = Counter()
    async for line in audit(stores, campaign, outcome):
        counted[line.variant] += 1
    return dict(counted)


def unsent(stores: CampaignRecords, campaign: Campaign) -> AsyncIterator[RecipientLine]:
    """Targeted but neither sent nor failed: the rest of every chunk, then the unpaged source."""
    return audit(stores, campaign, Outcome.UNSENT)


async def targeted(stores: CampaignRecords, campaign: Campaign) -> int:
    """Every recipient of every chunk, plus what the source still holds if paging stopped early.

    The checkpoints counted each published chunk once; a chunk its dispatcher wrote but died
    before checkpointing is added; then the unpaged rest of the source, counted by the database
    from the last chunk's position (``unpaged``). A finished campaign's is the one its end
    wrote: counted once, at that instant, whatever later happens to the devices.
    """
    if campaign.status in TERMINAL:
        return campaign.counts.targeted
    total = campaign.counts.targeted
    next_seq = campaign.dispatch.next_seq
    unchecked = await stores.chunks.state(campaign.id, next_seq)
    if unchecked is not None:
        total += unchecked.size
    return total + await unpaged(stores, campaign)


async def unpaged(stores: CampaignRecords, campaign: Campaign) -> int:
    """How many recipients the source still holds beyond the paging checkpoint (the last chunk
    written, checkpointed or not): what a cancel or a pause left unpaged (0 once paged)."""
    if not campaign.source_not_exhausted:
        return 0
    source = await source_for(stores, campaign)
    return await source.count(after=await paging_cursor(stores, campaign))


async def paging_cursor(stores: CampaignRecords, campaign: Campaign) -> Cursor:
    """Where paging stands: the position of the last chunk written (None: nothing yet)."""
    next_seq = campaign.dispatch.next_seq
    last = await stores.chunks.state(campaign.id, next_seq)
    if last is None and next_seq:
        last = await stores.chunks.state(campaign.id, next_seq - 1)
    return last.cursor if last else None


async def final_counts(stores: CampaignRecords, campaign: Campaign) -> FinalCounts:
    """Exact counts from the records (what the audit lists), read once a campaign is finished."""
    sent = failed = suppressed = retryable = maybe_delivered = 0
    async for _, group in _recorded_by_chunk(stores, campaign.id):
        errors = [error for error in group.values() if is_failure(error)]
        held = sum(map(is_suppressed, group.values()))
        sent += len(group) - len(errors) - held
        failed += len(errors)
        suppressed += held
        retryable += sum(not token_is_unusable(error) for error in errors)
        maybe_delivered += errors.count(FcmError.TIMEOUT.value)
    counts = CampaignCounts(targeted=await targeted(stores, campaign), sent=sent, failed=failed,
                            maybe_delivered=maybe_delivered, suppressed=suppressed)
    return FinalCounts(counts, failed_not_by_token=retryable)
