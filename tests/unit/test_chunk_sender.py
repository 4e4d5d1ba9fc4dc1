"""What a sender decides for each chunk message, sending through the real ``SendWindow`` to an
FCM that answers at once (one connection, two unrecorded requests, so every run takes the same
path)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta

import pytest

from herald.adapters.fcm import SendResult
from herald.clock import utcnow
from herald.domain.documents import (
    Campaign,
    CampaignCounts,
    ChunkState,
    ChunkStatus,
    new_id,
)
from herald.domain.fcm_errors import ERASED
from herald.domain.messages import Recipient, SendChunk
from herald.domain.rollout import Rollout, RolloutProgress, RolloutWave, wave_bucket
from herald.domain.status import Status, Transition
from herald.domain.status import Verdict as May
from herald.domain.suppression import Rule, suppressed_code
from herald.observability import SUPPRESSED
from herald.runtime.tracking import WorkTracker
from herald.service_layer.erasure import erase_user
from herald.service_layer.ports import Stores
from herald.service_layer.sending.campaigns import CampaignCache
from herald.service_layer.sending.chunk import UNFENCED, ChunkSender, SendingPolicy, Settlement
from herald.service_layer.sending.claims import ChunkClaims
from herald.service_layer.sending.fence import Fence
from herald.service_layer.sending.lifecycle import ChunkLifecycle
from herald.service_layer.sending.window import SendWindow, WindowPolicy
from herald.service_layer.stopping import PodView, Settler
from tests.factories import (
    at,
    begin_cancel,
    device,
    paged,
    pod_beat,
    recipients_of,
    sending_campaign,
)
from tests.factories import campaign as factory_campaign
from tests.unit.fakes import (
    FakeCampaigns,
    FakeClock,
    FakeFcm,
    FakeFlags,
    FakeRegistry,
    UnlimitedBucket,
    UnlimitedLimits,
    answer_by_token,
    fake_stores,
)

POD = "s1"
MAX_ATTEMPTS = 3
HELD = timedelta(minutes=5)
TOKENS = ["tok-0", "tok-1", "unregistered-2", "tok-3", "tok-4"]


@dataclass
class Rig:
    """One sender pod: its chunk sender, FCM, and what it knows of cancels."""

    stores: Stores
    flags: FakeFlags
    registry: FakeRegistry
    clock: FakeClock
    view: PodView
    fcm: FakeFcm = field(default_factory=FakeFcm)
    claims: ChunkClaims | None = None

    def sender(self, *, budget_s: float = 60.0,
               answer: Callable[[str], SendResult] = answer_by_token,
               on_request: Callable[[str], None] | None = None,
               fence: Fence = UNFENCED) -> ChunkSender:
        self.fcm = FakeFcm(answer, on_request)
        self.claims = ChunkClaims(self.stores.chunks, self.registry, POD, 60.0, self.clock)
        window = SendWindow(self.fcm, WindowPolicy(connections=1, unrecorded=2, max_retries=0),
                            UnlimitedBucket())
        settler = Settler(self.stores, self.registry, POD)
        return ChunkSender(
            ChunkLifecycle(self.stores, POD, self.clock, settled=settler.settled),
            CampaignCache(self.stores.campaigns, self.view), window, UnlimitedLimits(),
            self.claims, WorkTracker().working_on,
            SendingPolicy(max_attempts=MAX_ATTEMPTS, budget_s=budget_s,
                          heartbeat_interval_s=0.05), fence=fence, settle=settler.settle)


@pytest.fixture
def rig(stores: Stores, flags: FakeFlags, registry: FakeRegistry, clock: FakeClock) -> Rig:
    return Rig(stores, flags, registry, clock, PodView(stores.campaigns, flags))


def open_channel() -> bool:
    return False


async def campaign_of(rig: Rig, status: Status = Status.IN_PROGRESS) -> Campaign:
    """A sending campaign of one chunk of ``TOKENS``, every token a registered device."""
    await rig.stores.devices.upsert([device(i, token=token) for i, token in enumerate(TOKENS)],
                                    utcnow())
    return await sending_campaign(rig.stores, [TOKENS], status=status)


def message(campaign_id: str) -> SendChunk:
    return SendChunk(campaign_id=campaign_id, seq=0, recipients=recipients_of(TOKENS))


async def chunk_state(rig: Rig, campaign_id: str) -> ChunkState:
    found = await rig.stores.chunks.state(campaign_id, 0)
    assert found is not None
    return found


async def stored(rig: Rig, campaign_id: str) -> Campaign:
    found = await rig.stores.campaigns.get(campaign_id)
    assert found is not None
    return found


# --- a chunk sent through ----------------------------------------------------------------------
async def test_a_chunk_is_sent_recorded_in_groups_closed_and_completes_its_campaign(
        rig: Rig) -> None:
    campaign = await campaign_of(rig)
    verdict = await rig.sender().process(message(campaign.id), open_channel)
    state = await chunk_state(rig, campaign.id)
    done = await stored(rig, campaign.id)
    deliveries = [d async for d in rig.stores.deliveries.in_order(campaign.id)]
    dead = await rig.stores.devices.find_by_token("unregistered-2")
    assert verdict is Settlement.ACK and rig.fcm.sent == TOKENS
    assert [len(d.sent) + len(d.failed) for d in deliveries] == [1] * 5  # groups of 2 // 4 → 1
    assert (state.status, state.sent, state.failed, state.owner) == (ChunkStatus.DONE, 4, 1,
                                                                     None)
    assert done.status is Status.COMPLETED and done.counts == CampaignCounts(targeted=5, sent=4,
                                                                     failed=1)
    assert dead is not None and (dead.invalid, dead.invalid_reason) == (True, "UNREGISTERED")


async def test_a_redelivered_chunk_sends_only_what_was_not_recorded(rig: Rig) -> None:
    campaign = await campaign_of(rig)
    await rig.stores.chunks.claim(campaign.id, 0, "dead", None, rig.clock())
    await rig.stores.deliveries.record(campaign.id, 0, "dead", at([(0, None), (1, None)]), utcnow())
    verdict = await rig.sender().process(message(campaign.id), open_channel)
    assert verdict is Settlement.ACK and rig.fcm.sent == TOKENS[2:]
    assert (await stored(rig, campaign.id)).counts == CampaignCounts(targeted=5, sent=4, failed=1)


async def test_a_person_erased_after_the_chunk_was_published_is_never_sent_to(rig: Rig) -> None:
    """The message still carries their token; the chunk as stored holds a placeholder, which
    the sender records failed (``HERALD_ERASED``) without a request: every place is counted."""
    campaign = await campaign_of(rig)
    await erase_user(rig.stores.devices, rig.stores.chunks, rig.stores.test_sends, "u1")
    verdict = await rig.sender().process(message(campaign.id), open_channel)
    assert verdict is Settlement.ACK and rig.fcm.sent == [t for t in TOKENS if t != "tok-1"]
    done = await stored(rig, campaign.id)
    assert done.status is Status.COMPLETED
    assert done.counts == CampaignCounts(targeted=5, sent=3, failed=2)
    recorded = await rig.stores.deliveries.recorded(campaign.id, 0)
    assert recorded[1] == ERASED


async def test_recipients_quiet_hours_skip_are_recorded_suppressed_without_a_request(
        rig: Rig) -> None:
    """The dispatcher marks them (a wave quiet hours skip); the sender records each one
    ``suppressed`` with the rule, counted apart, and asks FCM nothing for them."""
    await rig.stores.devices.upsert([device(i, token=token) for i, token in enumerate(TOKENS)],
                                    utcnow())
    quiet = [Recipient(token=t, suppressed=Rule.QUIET_HOURS if t in TOKENS[3:] else None)
             for t in TOKENS]
    campaign = factory_campaign(**paged(1, len(quiet)))
    await rig.stores.campaigns.insert(campaign)
    await rig.stores.chunks.create(campaign.id, 0, quiet, None, utcnow())
    chunk = SendChunk(campaign_id=campaign.id, seq=0, recipients=quiet)
    before = SUPPRESSED.labels(Rule.QUIET_HOURS.value)._value.get()
    verdict = await rig.sender().process(chunk, open_channel)
    assert verdict is Settlement.ACK and rig.fcm.sent == TOKENS[:3]
    recorded = await rig.stores.deliveries.recorded(campaign.id, 0)
    assert {recorded[3], recorded[4]} == {suppressed_code(Rule.QUIET_HOURS)}
    state = await chunk_state(rig, campaign.id)
    assert (state.status, state.sent, state.failed, state.suppressed) == (ChunkStatus.DONE, 2, 1,
                                                                          2)
    assert SUPPRESSED.labels(Rule.QUIET_HOURS.value)._value.get() - before == 2
    assert (await stored(rig, campaign.id)).counts == CampaignCounts(targeted=5, sent=2,
                                                                     failed=1, suppressed=2)


async def test_a_chunk_recorded_whole_by_a_sender_that_died_is_only_closed(rig: Rig) -> None:
    campaign = await campaign_of(rig)
    await rig.stores.chunks.claim(campaign.id, 0, "dead", None, utcnow() - HELD)  # it held it
    await rig.stores.deliveries.record(campaign.id, 0, "dead",
                                       at([(p, None) for p in range(len(TOKENS))]), utcnow())
    verdict = await rig.sender().process(message(campaign.id), open_channel)
    assert verdict is Settlement.ACK and rig.fcm.sent == []
    assert (await chunk_state(rig, campaign.id)).status is ChunkStatus.DONE
    assert (await stored(rig, campaign.id)).status is Status.COMPLETED


# --- chunks acknowledged without sending -------------------------------------------------------
async def test_a_chunk_of_a_cancelled_campaign_is_dropped_untouched(rig: Rig) -> None:
    campaign = await campaign_of(rig)
    await rig.flags.raise_flag(campaign.id)
    verdict = await rig.sender().process(message(campaign.id), open_channel)
    state = await chunk_state(rig, campaign.id)
    assert verdict is Settlement.ACK and rig.fcm.sent == []
    assert (state.status, state.attempts, state.owner) == (ChunkStatus.PENDING, 0, None)


async def test_a_chunk_of_a_campaign_found_cancelling_is_dropped_and_the_cancel_learned(
        rig: Rig) -> None:
    """No broadcast reached this pod and no flag is raised: the campaign's status tells, and
    its decision is passed on to be acknowledged."""
    campaign = await campaign_of(rig)
    begun = await begin_cancel(rig.stores, campaign.id)
    assert begun is not None and begun.decision is not None
    learned: list[tuple[str, str]] = []
    rig.view.on_decision(lambda campaign_id, decision: learned.append((campaign_id, decision.id)))
    verdict = await rig.sender().process(message(campaign.id), open_channel)
    assert verdict is Settlement.ACK and rig.fcm.sent == []
    assert rig.view.known(campaign.id) is May.STOP
    assert learned == [(campaign.id, begun.decision.id)]


@pytest.mark.parametrize("status", [Status.COMPLETED, Status.CANCELLED, Status.PENDING])
async def test_a_chunk_of_a_campaign_not_sending_is_dropped(rig: Rig, status: Status) -> None:
    campaign = await campaign_of(rig, status)
    assert await rig.sender().process(message(campaign.id), open_channel) is Settlement.ACK
    assert rig.fcm.sent == []


async def test_a_chunk_of_an_unknown_campaign_is_dead_lettered(rig: Rig) -> None:
    assert await rig.sender().process(message(new_id()), open_channel) is Settlement.UNEXPLAINED
    assert rig.fcm.sent == []


async def test_a_chunk_with_a_sequence_its_campaign_never_wrote_is_dead_lettered(
        rig: Rig) -> None:
    campaign = await campaign_of(rig)
    forged = SendChunk(campaign_id=campaign.id, seq=7, recipients=recipients_of(TOKENS))
    assert await rig.sender().process(forged, open_channel) is Settlement.UNEXPLAINED
    assert rig.fcm.sent == []


async def test_a_chunk_whose_recipients_are_not_those_written_is_dead_lettered(
        rig: Rig) -> None:
    campaign = await campaign_of(rig)
    forged = SendChunk(campaign_id=campaign.id, seq=0, recipients=recipients_of(["x", "y"]))
    assert await rig.sender().process(forged, open_channel) is Settlement.UNEXPLAINED
    assert rig.fcm.sent == []


async def test_a_chunk_already_closed_is_only_acknowledged(rig: Rig) -> None:
    campaign = await campaign_of(rig)
    await rig.stores.chunks.claim(campaign.id, 0, "s2", None, rig.clock())
    await rig.stores.chunks.finish(campaign.id, 0, ChunkStatus.DONE, 5, 0, utcnow(), "s2")
    assert await rig.sender().process(message(campaign.id), open_channel) is Settlement.ACK
    assert rig.fcm.sent == []


# --- chunks handed back ------------------------------------------------------------------------
async def test_a_chunk_another_live_sender_holds_is_busy(rig: Rig) -> None:
    campaign = await campaign_of(rig)
    await rig.registry.beat(pod_beat("s2"))
    await rig.stores.chunks.claim(campaign.id, 0, "s2", None, rig.clock() + HELD)
    assert await rig.sender().process(message(campaign.id), open_channel) is Settlement.BUSY
    assert rig.fcm.sent == [] and (await chunk_state(rig, campaign.id)).owner == "s2"


async def test_a_chunk_a_dead_sender_held_is_taken_over_and_sent(rig: Rig) -> None:
    campaign = await campaign_of(rig)
    await rig.stores.chunks.claim(campaign.id, 0, "dead", None, rig.clock() + HELD)
    assert await rig.sender().process(message(campaign.id), open_channel) is Settlement.ACK
    assert rig.fcm.sent == TOKENS and (await chunk_state(rig, campaign.id)).attempts == 2


async def test_a_chunk_that_failed_too_often_is_poison(rig: Rig) -> None:
    campaign = await campaign_of(rig)
    for _ in range(MAX_ATTEMPTS):
        await rig.stores.chunks.claim(campaign.id, 0, "dead", None, rig.clock())
        await rig.stores.chunks.release(campaign.id, 0, "dead", refund=False)
    assert await rig.sender().process(message(campaign.id), open_channel) is Settlement.POISON
    assert rig.fcm.sent == []


async def test_a_stopping_sender_finishes_its_batch_and_hands_the_rest_on(rig: Rig) -> None:
    campaign = await campaign_of(rig)
    sender = rig.sender(on_request=lambda _token: sender.stop())
    verdict = await sender.process(message(campaign.id), open_channel)
    state = await chunk_state(rig, campaign.id)
    assert verdict is Settlement.REPUBLISH and rig.fcm.sent == TOKENS[:2]
    assert await rig.stores.deliveries.recorded(campaign.id, 0) == {0: None, 1: None}
    assert state.status is ChunkStatus.PENDING  # the next delivery carries on
    assert rig.claims is not None
    await rig.claims.release(campaign.id, 0, refund=True)  # what settling REPUBLISH does
    assert await rig.sender().process(message(campaign.id), open_channel) is Settlement.ACK
    assert rig.fcm.sent == TOKENS[2:]
    assert (await chunk_state(rig, campaign.id)).attempts == 1


async def test_a_chunk_over_its_time_budget_is_handed_on_before_its_next_batch(
        rig: Rig) -> None:
    campaign = await campaign_of(rig)
    verdict = await rig.sender(budget_s=-1.0).process(message(campaign.id), open_channel)
    assert verdict is Settlement.REPUBLISH and rig.fcm.sent == []


async def test_a_closed_channel_aborts_before_the_next_batch(rig: Rig) -> None:
    campaign = await campaign_of(rig)
    closed: list[str] = []
    sender = rig.sender(on_request=closed.append)
    verdict = await sender.process(message(campaign.id), lambda: bool(closed))
    assert verdict is Settlement.ABORT and rig.fcm.sent == TOKENS[:2]
    assert await rig.stores.deliveries.recorded(campaign.id, 0) == {0: None, 1: None}
    assert (await chunk_state(rig, campaign.id)).status is ChunkStatus.PENDING


# --- a cancel while sending --------------------------------------------------------------------
async def test_a_cancel_mid_chunk_stops_before_the_next_request_and_closes_the_chunk_cancelled(
        rig: Rig) -> None:
    """The broadcast arrives while the third request is on the wire: it is answered and
    recorded, no further request starts, and the rest of the chunk stays unsent."""
    campaign = await campaign_of(rig)

    def broadcast_during_the_third(token: str) -> None:
        if token == TOKENS[2]:
            rig.view.stop_here(campaign.id)

    sender = rig.sender(on_request=broadcast_during_the_third)
    verdict = await sender.process(message(campaign.id), open_channel)
    state = await chunk_state(rig, campaign.id)
    after = await stored(rig, campaign.id)
    assert verdict is Settlement.ACK and rig.fcm.sent == TOKENS[:3]
    assert (state.status, state.sent, state.failed) == (ChunkStatus.CANCELLED, 2, 1)
    assert (after.counts.sent, after.counts.failed, after.progress.chunks_done) == (2, 1, 0)
    assert after.status is Status.IN_PROGRESS  # the cancel, not the chunk, finishes it


async def test_a_pause_mid_chunk_stops_before_the_next_request_and_keeps_the_chunk_pending(
        rig: Rig) -> None:
    """Issue 24: like a cancel, the pause stops the next request; unlike it, the chunk stays
    pending with its claim given back, and after the resume only the rest is sent."""
    campaign = await campaign_of(rig)

    def pause_during_the_third(token: str) -> None:
        if token == TOKENS[2]:  # the pause decided, and its broadcast heard here
            paused = replace(campaign, status=Status.PAUSED)
            assert isinstance(rig.stores.campaigns, FakeCampaigns)
            rig.stores.campaigns.put(paused)
            rig.view.learn(paused)

    sender = rig.sender(on_request=pause_during_the_third)
    verdict = await sender.process(message(campaign.id), open_channel)
    assert verdict is Settlement.HOLD and rig.fcm.sent == TOKENS[:3]
    assert rig.claims is not None
    await rig.claims.release(campaign.id, 0, refund=True)  # what the consumer does on HOLD
    state = await chunk_state(rig, campaign.id)
    assert (state.status, state.owner, state.attempts) == (ChunkStatus.PENDING, None, 0)
    again = await sender.process(message(campaign.id), open_channel)
    assert again is Settlement.ACK and rig.fcm.sent == TOKENS[:3], "held: not claimed, not sent"

    await rig.stores.campaigns.transition(campaign.id, Transition.RESUME, utcnow())
    resumed = await sender.process(message(campaign.id), open_channel)
    state = await chunk_state(rig, campaign.id)
    assert resumed is Settlement.ACK and rig.fcm.sent == TOKENS, "the rest, nobody twice"
    assert (state.status, state.sent, state.failed) == (ChunkStatus.DONE, 4, 1)
    assert rig.view.known(campaign.id) is May.SEND


async def test_a_rollout_sends_the_open_waves_recipients_and_keeps_the_rest_pending(
        rig: Rig) -> None:
    """Issue 24: in wave 1 of 2 only the recipients whose bucket is in it are sent; the chunk
    says its wave is sent and stays pending; once the next wave is open, the rest goes."""
    tokens = [f"tok-{i}" for i in range(40)]
    rollout = Rollout((RolloutWave(30, 0), RolloutWave(100)))
    campaign = await sending_campaign(rig.stores, [tokens], rollout=rollout,
                                      rollout_progress=RolloutProgress())
    first = [t for t in tokens if wave_bucket(campaign.id, t) < 30]
    assert 0 < len(first) < len(tokens)
    sender = rig.sender()
    chunk = SendChunk(campaign_id=campaign.id, seq=0, recipients=recipients_of(tokens))
    assert await sender.process(chunk, open_channel) is Settlement.HOLD
    assert sorted(rig.fcm.sent) == sorted(first)
    assert rig.claims is not None
    await rig.claims.release(campaign.id, 0, refund=True)
    state = await chunk_state(rig, campaign.id)
    assert (state.status, state.wave_sent) == (ChunkStatus.PENDING, 0)

    await rig.stores.campaigns.update_rollout(campaign.id, 0, RolloutProgress(wave=1))
    assert await sender.process(chunk, open_channel) is Settlement.ACK
    assert sorted(rig.fcm.sent) == sorted(tokens), "each once"
    assert (await chunk_state(rig, campaign.id)).status is ChunkStatus.DONE


class BroadcastOnRead(FakeCampaigns):
    """The cancel broadcast arrives just as the sender reads the campaign."""

    def __init__(self) -> None:
        super().__init__()
        self.view: PodView | None = None

    async def get(self, campaign_id: str) -> Campaign | None:
        found = await super().get(campaign_id)
        if self.view is not None:
            self.view.stop_here(campaign_id)
        return found


async def test_a_cancel_heard_before_the_first_batch_sends_nothing_and_closes_nothing(
        flags: FakeFlags, registry: FakeRegistry, clock: FakeClock) -> None:
    campaigns = BroadcastOnRead()
    stores = replace(fake_stores(), campaigns=campaigns)
    rig = Rig(stores, flags, registry, clock, PodView(campaigns, flags))
    campaign = await campaign_of(rig)
    campaigns.view = rig.view
    verdict = await rig.sender().process(message(campaign.id), open_channel)
    state = await chunk_state(rig, campaign.id)
    assert verdict is Settlement.ACK and rig.fcm.sent == []
    assert (state.status, state.sent) == (ChunkStatus.PENDING, 0)  # its recipients stay unsent
    assert (await stored(rig, campaign.id)).counts.sent == 0


async def test_a_cancel_during_the_last_request_closes_the_chunk_cancelled_not_done(
        rig: Rig) -> None:
    """Every recipient got an answer, but the cancel came first: the chunk must not count as
    done, or it would complete a campaign that is being cancelled."""
    campaign = await campaign_of(rig)

    def broadcast_during_the_last(token: str) -> None:
        if token == TOKENS[-1]:
            rig.view.stop_here(campaign.id)

    verdict = await rig.sender(on_request=broadcast_during_the_last).process(
        message(campaign.id), open_channel)
    state = await chunk_state(rig, campaign.id)
    after = await stored(rig, campaign.id)
    assert verdict is Settlement.ACK and rig.fcm.sent == TOKENS
    assert (state.status, state.sent, state.failed) == (ChunkStatus.CANCELLED, 4, 1)
    assert (after.status, after.progress.chunks_done) == (Status.IN_PROGRESS, 0)


async def test_a_cancel_between_batches_stops_before_the_next_batch(rig: Rig) -> None:
    campaign = await campaign_of(rig)

    def broadcast_at_the_end_of_the_first_batch(token: str) -> None:
        if token == TOKENS[1]:
            rig.view.stop_here(campaign.id)

    sender = rig.sender(on_request=broadcast_at_the_end_of_the_first_batch)
    verdict = await sender.process(message(campaign.id), open_channel)
    assert verdict is Settlement.ACK and rig.fcm.sent == TOKENS[:2]
    assert (await chunk_state(rig, campaign.id)).status is ChunkStatus.CANCELLED



# --- a pod that was away (frozen, or cut off from the registry) -----------------------------------
class Away:
    """A pod's fence on a clock of its own; ``freeze`` jumps past its heartbeat's life, as a
    SIGSTOP would, and ``beat`` lands a heartbeat (the pod back in the registry)."""

    TTL_S = 1.5

    def __init__(self) -> None:
        self.now = 1000.0
        self.fence = Fence(self.TTL_S, 0.5, clock=lambda: self.now)

    def freeze(self) -> None:
        self.now += 10 * self.TTL_S

    def beat(self) -> None:
        self.fence.confirm(self.now)


def frozen_after(away: Away, requests: int, then: Callable[[], None] = lambda: None
                 ) -> Callable[[str], None]:
    """FCM hook: the pod freezes while its ``requests``-th request is on the wire; ``then``
    runs meanwhile (another pod takes over, a cancel is confirmed)."""
    seen: list[str] = []

    def on_request(token: str) -> None:
        seen.append(token)
        if len(seen) == requests:
            away.freeze()
            then()
            asyncio.get_running_loop().call_later(0.01, away.beat)
    return on_request


async def test_a_pod_back_from_a_freeze_that_lost_its_chunk_sends_nothing_more(
        rig: Rig) -> None:
    campaign = await campaign_of(rig)
    away = Away()
    taken: list[asyncio.Future[object]] = []

    def take_over() -> None:
        taken.append(asyncio.ensure_future(rig.stores.chunks.claim(
            campaign.id, 0, "taker", POD, rig.clock(), fence=1)))

    sender = rig.sender(fence=away.fence, on_request=frozen_after(away, 2, take_over))
    verdict = await sender.process(message(campaign.id), open_channel)
    assert verdict is Settlement.GONE
    assert rig.fcm.sent == TOKENS[:2]  # the one on the wire at the freeze, and none after
    assert await rig.stores.deliveries.recorded(campaign.id, 0) == {0: None, 1: None}
    state = await chunk_state(rig, campaign.id)
    assert (state.owner, state.status) == ("taker", ChunkStatus.PENDING)


async def test_a_pod_back_from_a_freeze_that_still_holds_its_chunk_goes_on(rig: Rig) -> None:
    campaign = await campaign_of(rig)
    away = Away()
    sender = rig.sender(fence=away.fence, on_request=frozen_after(away, 2))
    verdict = await sender.process(message(campaign.id), open_channel)
    state = await chunk_state(rig, campaign.id)
    assert verdict is Settlement.ACK and rig.fcm.sent == TOKENS
    assert (state.status, state.sent, state.failed) == (ChunkStatus.DONE, 4, 1)


async def test_a_pod_back_after_its_campaign_was_cancelled_sends_nothing_and_recounts(
        rig: Rig) -> None:
    campaign = await campaign_of(rig)
    away = Away()
    confirming: list[asyncio.Future[None]] = []

    def cancelled_and_confirmed() -> None:  # the broadcast never reached the frozen pod
        confirming.append(asyncio.ensure_future(confirm_cancel(rig, campaign.id)))

    sender = rig.sender(fence=away.fence,
                        on_request=frozen_after(away, 2, cancelled_and_confirmed))
    verdict = await sender.process(message(campaign.id), open_channel)
    done = await stored(rig, campaign.id)
    assert verdict is Settlement.GONE and rig.fcm.sent == TOKENS[:2]
    assert done.status is Status.CANCELLED
    assert (done.counts.sent, done.counts.unsent) == (2, 3)  # recounted with the late answers


async def confirm_cancel(rig: Rig, campaign_id: str) -> None:
    """A cancel confirmed by the others while this pod was away (its answers not yet in)."""
    now = utcnow()
    await begin_cancel(rig.stores, campaign_id)
    await rig.stores.campaigns.confirm_cancel(campaign_id, CampaignCounts(targeted=5), now)
