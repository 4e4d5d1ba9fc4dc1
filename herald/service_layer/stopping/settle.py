"""The settler: the one owner of every end of a campaign and of every final count.

Whatever happened (its last chunk closed, paging ended, the last pod acknowledged a cancel or a
pause, a decision had nobody to wait for, a pod that was away recorded answers late, or a pod
died and the sweep noticed), the one who saw it *reports* here: ``settle(campaign)``. The
settler reads the campaign and writes the end its state calls for, once, with exact counts from
the records, through a guarded transition:

- ``in_progress``, paged and every chunk closed for good: ``finalizing → completed`` (or
  ``failed``);
- ``finalizing`` (a finisher died half-way): ``completed`` (or ``failed``);
- ``cancelling``, once no pod may still be sending: ``cancelled`` (``failed`` for a stop), its
  count of the unpaged rest taken by the database at that instant;
- ``paused``, once no pod may still be sending: the pause settled with the counts so far;
- finished, when answers were recorded after the end: the final counts again.

``recover(now)`` is this protocol's part of the dispatchers' sweep: every campaign whose end a
dead pod or an outage left unwritten is settled.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta

from herald.clock import utcnow
from herald.domain.documents import Campaign
from herald.domain.status import TERMINAL, Status, Transition
from herald.observability import CAMPAIGNS_FINISHED, CANCEL_LATENCY_SECONDS, CANCEL_SENT_RATIO
from herald.service_layer.ports import CampaignRecords, PodRegistry
from herald.service_layer.recipients import final_counts
from herald.service_layer.stopping.pods import still_stopping

log = logging.getLogger(__name__)

FINALIZER_LEASE = timedelta(seconds=30)
RECONCILE_EVERY_S = 2.5
"""How often the sweep looks for campaigns whose last chunk closed without being counted."""


class Settler:
    def __init__(self, stores: CampaignRecords, pods: PodRegistry, pod_id: str, *,
                 stale_after: timedelta = timedelta(seconds=15)) -> None:
        self._stores = stores
        self._pods = pods
        self._pod_id = pod_id
        self._stale_after = stale_after
        self._reconciled_at = 0.0

    async def settle(self, campaign_id: str) -> Campaign | None:
        """Write the end the campaign has reached, if it has reached one: the campaign as
        written, or None (nothing to write yet, or someone else wrote it)."""
        campaign = await self._stores.campaigns.get(campaign_id)
        return None if campaign is None else await self.settled(campaign)

    async def settled(self, campaign: Campaign, *, count_closed: bool = False) -> Campaign | None:
        """``settle`` of a campaign just read (``count_closed``: also when the chunks, not the
        campaign's counter, say every chunk is closed)."""
        status = campaign.status
        if status is Status.CANCELLING:
            return await self._cancelled(campaign)
        if status is Status.PAUSED:
            return await self._pause_settled(campaign)
        if status is Status.IN_PROGRESS:
            return await self._completed(campaign, count_closed=count_closed)
        if status is Status.FINALIZING:
            return await self._complete(campaign)
        if status in TERMINAL:
            return await self._recounted(campaign)
        return None

    async def recover(self, now: datetime) -> None:
        """Settle every campaign whose end was left unwritten: a cancel or a pause whose last
        acknowledgement never came (a pod died), a campaign whose last chunk closed but was not
        counted, one left ``finalizing``."""
        campaigns = self._stores.campaigns
        for campaign in await campaigns.with_status(Status.CANCELLING):
            await self.settled(campaign)
        for campaign in await campaigns.with_status(Status.PAUSED):
            if campaign.pause is not None and campaign.pause.settled_at is None:
                await self.settled(campaign)
        if time.monotonic() - self._reconciled_at >= RECONCILE_EVERY_S:
            self._reconciled_at = time.monotonic()
            await self._reconcile()
            for campaign in await campaigns.stuck_finalizing(now - self._stale_after):
                log.warning("campaign %s was left finalizing; finishing it", campaign.id)
                await self.settled(campaign)

    async def _reconcile(self) -> None:
        """Campaigns paged whose last chunk may have closed uncounted: only those with no chunk
        pending are counted (one read of every pending chunk, not one count per campaign: with
        a thousand campaigns running, nearly all have a chunk pending)."""
        paged = await self._stores.campaigns.paged_and_open()
        if not paged:
            return
        pending = {state.campaign_id for state in await self._stores.chunks.pending_everywhere()}
        for campaign in paged:
            if campaign.all_chunks_finished or campaign.id not in pending:
                await self.settled(campaign, count_closed=True)

    # --- completed ------------------------------------------------------------------------------
    async def _completed(self, campaign: Campaign, *, count_closed: bool) -> Campaign | None:
        """Paged and every chunk closed: ``in_progress → finalizing → completed``. With
        ``count_closed`` the chunks themselves are counted (a sender that closed the last one
        died before counting it); the counter is left alone, since a sender between closing its
        chunk and counting it would count it twice."""
        if not campaign.all_chunks_finished:
            if not (count_closed and campaign.dispatch.done and await self._all_closed(campaign)):
                return None
            log.warning("campaign %s: every chunk is closed but the campaign was not finished; "
                        "finishing it", campaign.id)
        finalizing = await self._stores.campaigns.transition(campaign.id, Transition.FINALIZE,
                                                             utcnow())
        return None if finalizing is None else await self._complete(finalizing)

    async def _all_closed(self, campaign: Campaign) -> bool:
        closed = await self._stores.chunks.count_closed(campaign.id)
        return closed >= campaign.progress.chunks_published

    async def _complete(self, finalizing: Campaign) -> Campaign | None:
        """``finalizing → completed`` (or ``failed``) with exact counts; idempotent.

        A campaign some recipients of which failed for a reason other than their own token (FCM
        quota or outage beyond the retries, a chunk dead-lettered) ends ``failed`` instead, with
        the reason, so an operator sees it and can retry exactly those recipients."""
        final = await final_counts(self._stores, finalizing)
        transition, error = Transition.COMPLETE, None
        if final.failed_not_by_token:
            transition = Transition.FAIL
            error = (f"{final.failed_not_by_token} recipients failed for reasons other than "
                     "their token (see the failed audit); POST .../retry sends to them again")
            if final.counts.maybe_delivered:
                error += (f"; FCM did not answer in time for {final.counts.maybe_delivered} of "
                          "them, which may have been delivered (a retry replaces, with the same "
                          "replacement key)")
        finished = await self._stores.campaigns.finish(finalizing.id, transition, final.counts,
                                                       error, utcnow())
        if finished is not None:
            CAMPAIGNS_FINISHED.labels(finished.status.value).inc()
            counts = final.counts
            log.info("campaign %s %s: %d targeted, %d sent, %d failed, %d suppressed",
                     finished.id, finished.status.value, counts.targeted, counts.sent,
                     counts.failed, counts.suppressed)
        return finished

    # --- cancelled ------------------------------------------------------------------------------
    async def _cancelled(self, campaign: Campaign) -> Campaign | None:
        """``cancelling → cancelled`` (or ``failed`` for a stop) with exact counts, once no pod
        may still send; a lease makes one caller write them."""
        cancel = campaign.cancel
        if cancel is None:  # never written by the decider; nothing tells whom to wait for
            return None
        if not cancel.nothing_in_flight and await still_stopping(
                self._pods, campaign.id, cancel.requested_at.timestamp(), cancel.expected_pods,
                cancel.acks):
            return None
        now = utcnow()
        if not await self._stores.campaigns.claim_cancel_finalization(
                campaign.id, self._pod_id, now, now + FINALIZER_LEASE):
            return None  # another pod is writing the final counts
        counts = (await final_counts(self._stores, campaign)).counts
        cancelled = await self._stores.campaigns.confirm_cancel(
            campaign.id, counts, utcnow(), error=cancel.fails_with)
        if cancelled is not None and cancelled.cancel is not None:
            _observe_cancelled(cancelled)
            log.info("campaign %s %s: %d of %d sent, %d failed, %d suppressed", campaign.id,
                     cancelled.status.value, counts.sent, counts.targeted, counts.failed,
                     counts.suppressed)
        return cancelled

    # --- a pause settled ------------------------------------------------------------------------
    async def _pause_settled(self, campaign: Campaign) -> Campaign | None:
        """The pause settled with the exact counts so far, once no pod may still send: from
        then on ``paused`` means nothing is in flight."""
        pause = campaign.pause
        if pause is None or pause.settled_at is not None:
            return None
        if await still_stopping(self._pods, campaign.id, pause.requested_at.timestamp(),
                                pause.expected_pods, pause.acks):
            return None
        counts = (await final_counts(self._stores, campaign)).counts
        settled = await self._stores.campaigns.settle_pause(campaign.id, pause.pause_id, counts,
                                                            utcnow())
        if settled is not None:
            log.info("campaign %s paused with nothing in flight: %d sent, %d failed of %d "
                     "targeted so far", campaign.id, counts.sent, counts.failed,
                     counts.targeted)
        return settled

    # --- late answers ---------------------------------------------------------------------------
    async def _recounted(self, campaign: Campaign) -> Campaign | None:
        """A pod back from being away recorded answers to requests it had on the wire after the
        campaign finished: its final counts are computed again from the records, so they keep
        agreeing with the audit."""
        counts = (await final_counts(self._stores, campaign)).counts
        if counts == campaign.counts or not await self._stores.campaigns.recount(campaign.id,
                                                                                  counts):
            return None
        log.warning("campaign %s: %d answers recorded after it finished (a pod that was away); "
                    "final counts now sent %d, failed %d of %d", campaign.id,
                    counts.sent + counts.failed - campaign.counts.sent - campaign.counts.failed,
                    counts.sent, counts.failed, counts.targeted)
        return await self._stores.campaigns.get(campaign.id)


def _observe_cancelled(cancelled: Campaign) -> None:
    assert cancelled.cancel is not None and cancelled.cancel.acknowledged_at is not None
    CAMPAIGNS_FINISHED.labels(cancelled.status.value).inc()
    latency = cancelled.cancel.acknowledged_at - cancelled.cancel.requested_at
    CANCEL_LATENCY_SECONDS.observe(latency.total_seconds())
    if cancelled.counts.targeted:
        CANCEL_SENT_RATIO.observe(cancelled.counts.sent / cancelled.counts.targeted)
