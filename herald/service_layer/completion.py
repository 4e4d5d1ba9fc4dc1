"""A campaign completes exactly once: when its last chunk is recorded and paging is over.

Senders count finished chunks and the dispatcher marks paging done; whichever of the two writes
last sees both facts and finalizes. The ``in_progress → finalizing → completed`` transitions are
conditional, so a campaign that is being cancelled is never marked completed.
"""

from __future__ import annotations

import logging

from herald.clock import utcnow
from herald.domain.documents import Campaign
from herald.domain.status import Transition
from herald.observability import CAMPAIGNS_FINISHED
from herald.service_layer.ports import CampaignRecords
from herald.service_layer.recipients import final_counts

log = logging.getLogger(__name__)


async def chunk_finished(stores: CampaignRecords, campaign_id: str, sent: int, failed: int,
                         *, done: bool) -> Campaign | None:
    """Count a chunk that was just closed; finalize the campaign if it was the last one.

    ``done`` is False for a chunk a cancel cut short: its outcomes count, but the campaign is
    finished by the cancel, not here. Returns the campaign if this call completed it.
    """
    campaign = await stores.campaigns.count_finished_chunk(campaign_id, sent, failed, done=done)
    if done and campaign is not None and campaign.all_chunks_finished:
        return await finalize(stores, campaign_id)
    return None


async def finalize(stores: CampaignRecords, campaign_id: str) -> Campaign | None:
    """``in_progress → finalizing → completed`` with exact counts; None if someone else did.

    A campaign some recipients of which failed for a reason other than their own token (FCM
    quota or outage beyond the retries, a chunk dead-lettered) ends ``failed`` instead, with
    the reason, so an operator sees it and can retry exactly those recipients.
    """
    finalizing = await stores.campaigns.transition(campaign_id, Transition.FINALIZE, utcnow())
    if finalizing is None:
        return None
    return await complete(stores, finalizing)


async def complete(stores: CampaignRecords, finalizing: Campaign) -> Campaign | None:
    """``finalizing → completed`` (or ``failed``) with exact counts; idempotent, so a campaign
    whose finalizer died half-way is finished by the dispatchers' sweep."""
    final = await final_counts(stores, finalizing)
    transition, error = Transition.COMPLETE, None
    if final.failed_not_by_token:
        transition = Transition.FAIL
        error = (f"{final.failed_not_by_token} recipients failed for reasons other than their "
                 "token (see the failed audit); POST .../retry sends to them again")
        if final.counts.maybe_delivered:
            error += (f"; FCM did not answer in time for {final.counts.maybe_delivered} of "
                      "them, which may have been delivered (a retry replaces, with the same "
                      "replacement key)")
    finished = await stores.campaigns.finish(finalizing.id, transition, final.counts, error,
                                             utcnow())
    if finished is not None:
        CAMPAIGNS_FINISHED.labels(finished.status.value).inc()
        counts = final.counts
        log.info("campaign %s %s: %d targeted, %d sent, %d failed", finished.id,
                 finished.status.value, counts.targeted, counts.sent, counts.failed)
    return finished


async def reconcile(stores: CampaignRecords, campaign: Campaign) -> Campaign | None:
    """Finish a paged campaign whose finishing was interrupted: its last chunk closed but not
    counted, or counted but not finalized (its sender died, or MongoDB went away in between).

    The chunks themselves say how many are closed. The counter is left alone: a sender between
    closing its chunk and counting it would count it a second time, and a counter one ahead
    finishes the campaign while a chunk is still on its way.
    """
    if not campaign.all_chunks_finished:
        if not campaign.dispatch.done:
            return None
        closed = await stores.chunks.count_closed(campaign.id)
        if closed < campaign.progress.chunks_published:
            return None
    log.warning("campaign %s: every chunk is closed but the campaign was not finished; "
                "finishing it", campaign.id)
    return await finalize(stores, campaign.id)
