"""A campaign completes exactly once: when its last chunk is recorded and paging is over.

Senders count finished chunks and the dispatcher marks paging done; whichever of the two writes
last sees both facts and finalizes. The ``in_progress → finalizing → completed`` transitions are
conditional, so a campaign that is being cancelled is never marked completed.
"""

from __future__ import annotations

import logging

from herald.adapters.mongo import Document
from herald.adapters.stores import Stores
from herald.clock import utcnow
from herald.domain.status import Transition
from herald.observability import CAMPAIGNS_FINISHED
from herald.service_layer.recipients import final_counts

log = logging.getLogger(__name__)


def all_chunks_finished(campaign: Document) -> bool:
    progress = campaign.get("progress", {})
    return bool(campaign["dispatch"].get("done")) and (
        progress.get("chunks_done", 0) >= progress.get("chunks_published", 0))


async def chunk_finished(stores: Stores, campaign_id: str, sent: int, failed: int,
                         *, done: bool) -> Document | None:
    """Count a chunk that was just closed; finalize the campaign if it was the last one.

    ``done`` is False for a chunk a cancel cut short: its outcomes count, but the campaign is
    finished by the cancel, not here. Returns the campaign if this call completed it.
    """
    campaign = await stores.campaigns.count_finished_chunk(campaign_id, sent, failed, done=done)
    if done and campaign is not None and all_chunks_finished(campaign):
        return await finalize(stores, campaign_id)
    return None


async def finalize(stores: Stores, campaign_id: str) -> Document | None:
    """``in_progress → finalizing → completed`` with exact counts; None if someone else did.

    A campaign some recipients of which failed for a reason other than their own token (FCM
    quota or outage beyond the retries, a chunk dead-lettered) ends ``failed`` instead, with
    the reason, so an operator sees it and can retry exactly those recipients.
    """
    finalizing = await stores.campaigns.transition(campaign_id, Transition.FINALIZE, utcnow())
    if finalizing is None:
        return None
    return await complete(stores, finalizing)


async def complete(stores: Stores, finalizing: Document) -> Document | None:
    """``finalizing → completed`` (or ``failed``) with exact counts; idempotent, so a campaign
    whose finalizer died half-way is finished by the dispatchers' sweep."""
    campaign_id = str(finalizing["_id"])
    counts = await final_counts(stores, finalizing)
    now = utcnow()
    transition, error = Transition.COMPLETE, None
    if counts.failed_not_by_token:
        transition = Transition.FAIL
        error = (f"{counts.failed_not_by_token} recipients failed for reasons other than their "
                 "token (see the failed audit); POST .../retry sends to them again")
    finished = await stores.campaigns.transition(
        campaign_id, transition, now,
        also_set={**counts.as_document(), "finished_at": now, "error": error})
    if finished is not None:
        CAMPAIGNS_FINISHED.labels(finished["status"]).inc()
        log.info("campaign %s %s: %d targeted, %d sent, %d failed", campaign_id,
                 finished["status"], counts.targeted, counts.sent, counts.failed)
    return finished


async def reconcile(stores: Stores, campaign: Document) -> Document | None:
    """Finish a paged campaign whose finishing was interrupted: its last chunk closed but not
    counted, or counted but not finalized (its sender died, or MongoDB went away in between).

    The chunks themselves say how many are closed. The counter is left alone: a sender between
    closing its chunk and counting it would count it a second time, and a counter one ahead
    finishes the campaign while a chunk is still on its way.
    """
    if not all_chunks_finished(campaign):
        if not campaign["dispatch"].get("done"):
            return None
        closed = await stores.chunks.count_done(str(campaign["_id"]))
        if closed < campaign["progress"].get("chunks_published", 0):
            return None
    log.warning("campaign %s: every chunk is closed but the campaign was not finished; "
                "finishing it", campaign["_id"])
    return await finalize(stores, str(campaign["_id"]))
