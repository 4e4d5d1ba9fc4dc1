"""What the API reads: one campaign or schedule, a page of them, a campaign's audit."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from herald.domain.audience import Audience
from herald.domain.documents import Campaign, Outcome, Schedule
from herald.domain.locales import LocaleMatcher
from herald.domain.purpose import HoldBack, Purpose, looser, reach
from herald.domain.rendering import DEFAULT_VARIANT
from herald.domain.status import Status
from herald.service_layer.errors import CampaignArchived, CampaignNotFound
from herald.service_layer.ports import (
    CampaignLookup,
    CampaignReads,
    CampaignRecords,
    DeviceRepository,
    ScheduleRepository,
)
from herald.service_layer.recipients import RecipientLine, audit

Item = TypeVar("Item", Campaign, Schedule)


class ScheduleNotFound(LookupError):
    def __init__(self, schedule_id: str) -> None:
        super().__init__(f"no schedule {schedule_id}")


@dataclass(frozen=True)
class Page(Generic[Item]):
    items: list[Item]
    next_cursor: str | None
    """Id of the last item, when more follow it."""


def _page(found: list[Item], limit: int) -> Page[Item]:
    items = found[:limit]
    return Page(items, items[-1].id if len(found) > limit else None)


async def campaign(campaigns: CampaignLookup, campaign_id: str) -> Campaign:
    found = await campaigns.get(campaign_id)
    if found is None:
        raise CampaignNotFound(campaign_id)
    return found


async def campaigns(reads: CampaignReads, statuses: list[Status] | None, cursor: str | None,
                    limit: int) -> Page[Campaign]:
    """Newest first, ``limit`` campaigns older than the campaign ``cursor``."""
    return _page(await reads.page(statuses, cursor, limit + 1), limit)


async def recipients(records: CampaignRecords, campaign_id: str,
                     outcome: Outcome) -> AsyncIterator[RecipientLine]:
    """The audit of one outcome: found first (a 404 before the stream starts; archived, where
    its archive is), then streamed."""
    found = await campaign(records.campaigns, campaign_id)
    if found.archive is not None:
        raise CampaignArchived(found.id, found.archive)
    return audit(records, found, outcome)


async def audience_size(devices: DeviceRepository, audience: Audience) -> int:
    """How many devices ``audience`` selects now: the dispatcher's own question, counted."""
    return await devices.count(audience)


async def audience_split(devices: DeviceRepository, audience: Audience,
                         languages: Sequence[str]) -> tuple[int, dict[str, int] | None]:
    """How many devices ``audience`` selects now and, given a campaign's translation tags,
    how many of them would get each (``default``: the campaign's own content), matched by the
    sender's own lookup. Without tags only the count is asked (on nx-27017 a ``$group`` costs
    more than a ``$count``)."""
    if not languages:
        return await devices.count(audience), None
    matcher = LocaleMatcher(languages)
    split: Counter[str] = Counter()
    by_locale = await devices.locales(audience)
    for locale, count in by_locale.items():
        split[matcher.match(locale) or DEFAULT_VARIANT] += count
    return sum(by_locale.values()), dict(split)


async def held_back(devices: DeviceRepository, audience: Audience, purpose: Purpose | None,
                    reached: int) -> dict[HoldBack, int]:
    """How many devices ``audience`` selects that ``purpose``'s rule keeps from a campaign,
    given the ``reached`` count under it: what the looser purpose reaches, less ``reached``
    (one more count; none for a purpose without a rule)."""
    rule = looser(purpose)
    if rule is None:
        return {}
    hold, below = rule
    return {hold: max(0, await devices.count(reach(audience, below)) - reached)}


async def schedule(schedules: ScheduleRepository, schedule_id: str) -> Schedule:
    found = await schedules.get(schedule_id)
    if found is None:
        raise ScheduleNotFound(schedule_id)
    return found


async def schedules(book: ScheduleRepository, cursor: str | None,
                    limit: int) -> Page[Schedule]:
    return _page(await book.page(cursor, limit + 1), limit)
